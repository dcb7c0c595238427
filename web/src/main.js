// tether's editor page (/d/{name}): the document in a rich-text editor (Tiptap on its
// Y.XmlFragment "default", rich_editor.js) or a plain one (CodeMirror on its Y.Text "content",
// plain_editor.js), over ONE Hocuspocus /ws socket; presence, connection state and AI
// suggestions (ghost text, rewrites) as Stateless JSON on the same socket.
//
// Which editor: `?editor=rich|plain` (or window.TETHER.editor) when given; else, once synced,
// rich when the fragment holds anything, plain when only the text does, rich for a new document.
//
// Both editors are a *surface* this page drives: {kind, hasFocus(), focus(), setEditable(bool),
// destroy(), ghost(), startGhost(id), ghostDelta(id, text), ghostEnded(id), clearGhost(silent),
// cursor() -> request fields or null, selection() -> {fields, old} or null}; they call back
// through `editorCtx` (request, rewrite, sendAccept, cancel, typed).
import "./common.css";
import "./editor.css";
import * as Y from "yjs";
import { HocuspocusProvider, HocuspocusProviderWebsocket } from "@hocuspocus/provider";
import { guardPresence } from "./presence.js";
import { fallbackSocketClass } from "./transport.js";
import {
  appRoot,
  at,
  config,
  currentToken,
  displayName,
  h,
  signInBox,
} from "./common.js";
import { wordDiff } from "./diff.js";

const PAUSE_MS = 600;
const MAX_TOKENS = 24;
// Until the first sync says which kind the document is; then the local state decides.
const CHOOSE_EDITOR_AFTER_MS = 3000;
const NO_ANSWER_MS = 15000;
const COLORS = [
  "#e4572e", "#2e86ab", "#a23b72", "#3b8f5a", "#f18f01", "#6c5ce7",
  "#d1495b", "#00798c", "#8e6c8a", "#c17817", "#3d5a80", "#ef476f",
];

// ---------------------------------------------------------------- what to open, as whom

const cfg = config();
const documentName = cfg.document || documentNameFromPath(location.pathname);
const token = currentToken();
const user = {
  name: displayName(token),
  color: COLORS[Math.floor(Math.random() * COLORS.length)],
};
user.colorLight = user.color + "33";
const aiEnabled = cfg.ai !== false;
// Set once they exist; refuse() may run before (no document name) or after.
let provider = null;
let websocketProvider = null;
let surface = null; // the editor, once mounted

function documentNameFromPath(path) {
  const prefix = at("/d/");
  const match = path.startsWith(prefix) ? [path, path.slice(prefix.length)] : null;
  if (!match) return "";
  try {
    return decodeURIComponent(match[1]);
  } catch {
    return match[1];
  }
}

// ---------------------------------------------------------------- the page

const root = appRoot();
root.classList.add("tether-editor-page");

const statusEl = h("span", { id: "tether-status", class: "chip status-connecting", role: "status" }, "connecting…");
const pendingEl = h("span", { id: "tether-pending", class: "chip pending" }, "");
const scopeEl = h("span", { id: "tether-scope", class: "chip scope", hidden: true }, "read-only");
const aiEl = h("span", { id: "tether-ai", class: "ai-status", "aria-live": "polite" }, "");
const rewriteButton = h(
  "button",
  { id: "tether-rewrite", type: "button", title: "Rewrite the selection (Ctrl/Cmd+Shift+R)", disabled: true },
  "Rewrite selection",
);
const suggestButton = h(
  "button",
  { id: "tether-suggest", type: "button", title: "Suggest a continuation (Ctrl/Cmd+Space)", disabled: true },
  "Suggest",
);
const presenceEl = h("ul", { id: "tether-presence", class: "presence" });
const rewritePanel = h("div", { id: "tether-rewrite-panel", class: "rewrite-panel", hidden: true });
const editorEl = h("section", { id: "tether-editor", class: "editor", "aria-label": "document" });
const refusalEl = h("div", { id: "tether-refusal", class: "refusal", role: "alert", hidden: true });
const sidebarEl = h(
  "aside",
  { class: "sidebar", id: "tether-sidebar" },
  h("h2", {}, "Here now"),
  presenceEl,
  rewritePanel,
  h(
    "details",
    { class: "help" },
    h("summary", {}, "Shortcuts"),
    h(
      "ul",
      {},
      h("li", {}, h("kbd", {}, "Tab"), " accept the grey suggestion"),
      h("li", {}, h("kbd", {}, "Esc"), " dismiss it"),
      h("li", {}, h("kbd", {}, "Ctrl/Cmd+Space"), " ask for one now"),
      h("li", {}, h("kbd", {}, "Ctrl/Cmd+Shift+R"), " rewrite the selection"),
    ),
  ),
);
// The editor and its sidebar: hidden as a whole on a refusal, so only the card shows.
const layoutEl = h("main", { class: "layout", id: "tether-layout" }, editorEl, sidebarEl);

root.append(
  h(
    "header",
    { class: "topbar" },
    h("a", { href: at("/"), class: "brand", title: "all documents" }, "tether"),
    h("span", { class: "docname", id: "tether-docname" }, documentName || "(no document)"),
    statusEl,
    pendingEl,
    scopeEl,
    h("span", { class: "spacer" }),
    aiEl,
    suggestButton,
    rewriteButton,
  ),
  layoutEl,
  refusalEl,
);
document.title = `${documentName} · tether`;
if (!aiEnabled) {
  suggestButton.hidden = true;
  rewriteButton.hidden = true;
}

if (!documentName) {
  refuse("No document named in the address: open /d/<name>.", false);
  throw new Error("no document name");
}

// ---------------------------------------------------------------- sync

const ydoc = new Y.Doc();
const ytext = ydoc.getText("content");
websocketProvider = new HocuspocusProviderWebsocket({
  url: (location.protocol === "https:" ? "wss" : "ws") + "://" + location.host + at("/ws"),
  // Reconnect quickly after a server restart, never give up.
  // (@lifeomic/attempt refuses delay < minDelay: keep delay >= minDelay, all integers.)
  delay: 1000,
  minDelay: 500,
  factor: 1.5,
  maxDelay: 5000,
  maxAttempts: 0,
  // A WebSocket, or the same frames over HTTP when proxies refuse or kill sockets.
  WebSocketPolyfill: fallbackSocketClass({ token, onTransport: showTransport }),
});
websocketProvider.on("maxAttemptsFailed", ({ error }) => {
  console.error("tether: cannot connect", error);
  if (!refused) setConnection("offline", "offline (not retrying; reload the page)");
});
provider = new HocuspocusProvider({
  websocketProvider,
  name: documentName,
  token,
  document: ydoc,
});
guardPresence(provider.awareness); // first listener: remote colours are checked before use
provider.attach();
provider.setAwarenessField("user", user);

let everConnected = false;
let refused = false;
let authenticated = false;
let writable = false;

function setConnection(state, label) {
  statusEl.className = `chip status-${state}`;
  statusEl.textContent = state === "connected" && transport ? `${label} · ${TRANSPORT_NAMES[transport]}` : label;
  statusEl.title = transport ? `transport: ${TRANSPORT_NAMES[transport]}` : "";
  document.body.dataset.connection = state;
}

// Which way the frames travel (transport.js): said in the status pill, so an editor behind a
// proxy that blocks WebSockets knows why it is a little slower.
const TRANSPORT_NAMES = { ws: "WebSocket", "http-stream": "HTTP stream", "http-poll": "HTTP polling" };
let transport = null;

function showTransport(kind) {
  transport = kind;
  document.body.dataset.transport = kind;
  if (!refused && websocketProvider && websocketProvider.status === "connected") {
    setConnection("connected", "connected");
  }
}

websocketProvider.on("status", ({ status }) => {
  if (refused) return;
  if (status === "connected") {
    everConnected = true;
    setConnection("connected", "connected");
  } else if (status === "connecting") {
    setConnection(everConnected ? "reconnecting" : "connecting", everConnected ? "reconnecting…" : "connecting…");
  } else {
    setConnection("offline", navigator.onLine === false ? "offline" : "offline, retrying…");
  }
  renderPending();
});
window.addEventListener("offline", () => !refused && setConnection("offline", "offline"));

provider.on("authenticated", ({ scope }) => {
  authenticated = true;
  writable = scope !== "readonly";
  scopeEl.hidden = writable;
  document.body.dataset.scope = scope;
  if (surface) surface.setEditable(writable);
  // The AI's state belongs to the socket: ask again after every (re)authentication.
  if (aiEnabled) send({ type: "status", id: AI_STATUS_ID });
  renderAiControls();
});

provider.on("authenticationFailed", ({ reason }) => {
  refuse(`Access to “${documentName}” was refused: ${reason || "permission denied"}.`, cfg.auth === "jwt");
});

provider.on("synced", ({ state }) => {
  document.body.dataset.synced = state ? "true" : "false";
  renderPending();
});

provider.on("unsyncedChanges", () => renderPending());

function renderPending() {
  const n = provider.unsyncedChanges;
  document.body.dataset.pending = String(n);
  if (refused) {
    pendingEl.textContent = "";
  } else if (n > 0) {
    pendingEl.textContent = n === 1 ? "1 edit not yet saved" : `${n} edits not yet saved`;
    pendingEl.className = "chip pending unsaved";
  } else if (provider.isSynced) {
    pendingEl.textContent = "all changes saved";
    pendingEl.className = "chip pending saved";
  } else {
    pendingEl.textContent = "";
    pendingEl.className = "chip pending";
  }
}

/** Refused: no document text on screen, the reason, and a way to sign in. */
function refuse(message, offerSignIn) {
  refused = true;
  layoutEl.hidden = true;
  editorEl.hidden = true;
  editorEl.replaceChildren();
  presenceEl.replaceChildren();
  rewritePanel.hidden = true;
  suggestButton.disabled = true;
  rewriteButton.disabled = true;
  document.body.dataset.connection = "refused";
  statusEl.className = "chip status-refused";
  statusEl.textContent = "access refused";
  pendingEl.textContent = "";
  refusalEl.replaceChildren(
    h("h2", {}, "No access"),
    h("p", { id: "tether-refusal-message" }, message),
    offerSignIn ? signInBox("Sign in with a token that allows this document.") : null,
    h("p", {}, h("a", { href: at("/") }, "All documents")),
  );
  refusalEl.hidden = false;
  // Stop syncing (never send anything after a refusal), then drop the text from the page.
  for (const thing of [provider, websocketProvider, surface]) {
    try {
      if (thing) thing.destroy();
    } catch (err) {
      console.warn("tether: cleanup after refusal", err);
    }
  }
}

// ---------------------------------------------------------------- presence

function renderPresence() {
  if (refused) return;
  const states = provider.awareness ? provider.awareness.getStates() : new Map();
  const me = ydoc.clientID;
  const items = [];
  for (const [clientId, state] of states) {
    const u = state && state.user;
    if (!u) continue;
    items.push({ clientId, name: String(u.name || "Anonymous"), color: String(u.color || "#888"), me: clientId === me });
  }
  items.sort((a, b) => (b.me - a.me) || a.name.localeCompare(b.name));
  presenceEl.replaceChildren(
    ...items.map((item) =>
      h(
        "li",
        { "data-client-id": item.clientId, class: item.me ? "me" : "" },
        h("span", { class: "dot", style: { background: item.color } }),
        h("span", { class: "name" }, item.name),
        item.me ? h("span", { class: "you" }, " (you)") : null,
      ),
    ),
  );
  document.body.dataset.peers = String(items.length);
}
provider.awareness && provider.awareness.on("change", renderPresence);

// ---------------------------------------------------------------- AI messages

let counter = 0;
function newId(prefix) {
  counter += 1;
  return `${prefix}${Date.now().toString(36)}-${counter}`;
}

function send(message) {
  if (refused) return;
  provider.sendStateless(JSON.stringify(message));
}

// What the server says of its AI (ai.status): null until it says anything (an older server
// never does: then AI counts as available). Only "ready" means suggestions work.
const AI_STATUS_ID = "ai-status";
let aiState = null; // {state, reason}
const SUGGEST_TITLE = suggestButton.title;
const REWRITE_TITLE = rewriteButton.title;

function aiAvailable() {
  return aiState === null || aiState.state === "ready";
}

function aiUnavailableText() {
  return `AI unavailable: ${aiState.reason || aiState.state}`;
}

// The server's 'unavailable' errors already begin "AI is unavailable: …"; say it once.
function withoutPrefix(reason) {
  return String(reason || "").replace(/^\s*AI (is )?unavailable:\s*/i, "");
}

/** Grey the AI controls while AI cannot answer, saying why on hover. */
function renderAiControls() {
  const usable = aiEnabled && writable && !refused && aiAvailable();
  suggestButton.disabled = !usable;
  rewriteButton.disabled = !usable;
  const why = aiAvailable() ? null : aiUnavailableText();
  suggestButton.title = why || SUGGEST_TITLE;
  rewriteButton.title = why || REWRITE_TITLE;
  document.body.dataset.ai = !aiEnabled ? "off" : aiState ? aiState.state : "unknown";
}

function setAiState(state, reason) {
  const wasAvailable = aiAvailable();
  aiState = { state, reason: withoutPrefix(reason) };
  renderAiControls();
  if (!aiAvailable()) {
    const ghost = surface && surface.ghost();
    if (ghost && !ghost.received) surface.clearGhost(true);
    aiNote(aiUnavailableText(), true);
  } else if (!wasAvailable) {
    aiNote("AI is back");
  }
}

let aiNoteTimer = null;
function aiNote(text, sticky = false) {
  aiEl.textContent = text;
  clearTimeout(aiNoteTimer);
  if (text && !sticky) aiNoteTimer = setTimeout(() => (aiEl.textContent = ""), 4000);
}

let pauseTimer = null;
let lastAnsweredId = null; // the newest ghost id the server has started
let rewrite = null; // {id, old, received, streaming, state, note}

/** Ask for a completion at the cursor (auto: after a pause in typing). */
function requestSuggestion({ auto }) {
  if (refused || !surface || !aiEnabled || !authenticated || !writable) return;
  if (!aiAvailable()) {
    if (!auto) aiNote(aiUnavailableText(), true);
    return;
  }
  if (auto && (rewrite || !surface.hasFocus())) return;
  // Positions must mean the same text on both sides: only when connected and in sync.
  if (websocketProvider.status !== "connected" || !provider.isSynced) {
    if (!auto) aiNote("not connected: suggestions need the server");
    return;
  }
  const where = surface.cursor();
  if (!where) return;
  const id = newId("g");
  surface.startGhost(id);
  // No answer at all (lost on the way): drop the empty ghost quietly.
  setTimeout(() => {
    const ghost = surface.ghost();
    if (ghost && ghost.id === id && lastAnsweredId !== id && !ghost.received) {
      surface.clearGhost(true);
      if (!auto) aiNote("no answer from the AI");
    }
  }, NO_ANSWER_MS);
  send({ type: "suggest", id, kind: "complete", ...where, max_tokens: MAX_TOKENS });
  if (!auto) aiNote("asking…");
}

const editorCtx = {
  request: requestSuggestion,
  rewrite: () => startRewrite(),
  sendAccept: (id) => send({ type: "accept", id }),
  cancel: (id) => send({ type: "cancel", id }),
  typed() {
    clearTimeout(pauseTimer);
    if (surface.ghost()) return; // typing into the ghost: keep it, no new request
    pauseTimer = setTimeout(() => {
      if (!surface.ghost()) requestSuggestion({ auto: true });
    }, PAUSE_MS);
  },
};


provider.on("stateless", ({ payload }) => {
  let msg;
  try {
    msg = JSON.parse(payload);
  } catch {
    return;
  }
  if (!msg || typeof msg !== "object" || typeof msg.type !== "string") return;
  if (msg.type === "ai.status" && msg.id === AI_STATUS_ID) {
    return setAiState(String(msg.state), typeof msg.reason === "string" ? msg.reason : "");
  }
  if (msg.type === "suggestion.error" && msg.code === "unavailable") return onUnavailable(msg);
  const ghost = surface && surface.ghost();
  if (ghost && msg.id === ghost.id) return onGhostMessage(msg, ghost);
  if (rewrite && msg.id === rewrite.id) return onRewriteMessage(msg);
  if (msg.type === "suggestion.accepted") return;
  if (msg.type === "suggestion.error") {
    if (msg.id === null || msg.code !== "bad_request") {
      aiNote(`AI: ${msg.message || msg.code}`);
    } else if (msg.code === "bad_request" && String(msg.id || "").startsWith("g")) {
      aiNote("The text there changed; ask again.");
    }
  }
});

/** The model worker died under a suggestion: grey out until ai.status says ready again. */
function onUnavailable(msg) {
  const ghost = surface && surface.ghost();
  if (ghost && msg.id === ghost.id) surface.clearGhost(true);
  if (rewrite && msg.id === rewrite.id) onRewriteMessage({ ...msg, message: withoutPrefix(msg.message) });
  // Its sticky note says why (a later ai.status replaces the state and the reason).
  if (aiAvailable()) setAiState("starting", msg.message || "the model is restarting");
  else aiNote(aiUnavailableText(), true);
  // Ask again: the answer is the server's current state, so an ai.status that crossed this
  // error on the wire cannot leave the buttons grey (one subscription per socket: harmless).
  send({ type: "status", id: AI_STATUS_ID });
}

function onGhostMessage(msg, ghost) {
  switch (msg.type) {
    case "suggestion.start":
      lastAnsweredId = ghost.id;
      aiEl.textContent = "";
      break;
    case "suggestion.delta":
      if (typeof msg.text === "string" && msg.text) surface.ghostDelta(ghost.id, msg.text);
      break;
    case "suggestion.end": {
      // The server's junk filter dropped it ("junk:echo", ...): nothing junk was streamed, so
      // this ends like "done" (what came before it, if anything, was clean), shows no note,
      // and the kind goes to the console for whoever wonders why no ghost text came.
      const junk = typeof msg.reason === "string" && msg.reason.startsWith("junk:");
      if (junk) console.info(`tether: suggestion ${ghost.id} dropped as junk (${msg.reason.slice(5)})`);
      if (msg.reason !== "done" && !junk && !ghost.consumed) {
        // Cancelled by an edit at the cursor, or superseded: the server cannot accept it now.
        surface.clearGhost(true);
      } else {
        surface.ghostEnded(ghost.id);
        if (!ghost.received && msg.reason === "done") aiNote("no suggestion here");
      }
      break;
    }
    case "suggestion.error":
      surface.clearGhost(true);
      aiNote(`AI: ${msg.message || msg.code}`);
      break;
    default:
      break;
  }
}

// ---------------------------------------------------------------- rewrite panel

function startRewrite() {
  if (refused || !surface || !aiEnabled || !authenticated || !writable) return;
  if (!aiAvailable()) {
    aiNote(aiUnavailableText(), true);
    return;
  }
  const selected = surface.selection();
  if (!selected) {
    aiNote("Select some text to rewrite.");
    return;
  }
  if (rewrite && rewrite.streaming) send({ type: "cancel", id: rewrite.id });
  const id = newId("r");
  rewrite = {
    id,
    old: selected.old,
    received: "",
    streaming: true,
    state: "streaming",
    note: "",
  };
  surface.clearGhost(true); // superseded by this request
  send({ type: "suggest", id, kind: "rewrite", ...selected.fields });
  renderRewrite();
}

function onRewriteMessage(msg) {
  switch (msg.type) {
    case "suggestion.delta":
      if (typeof msg.text === "string") rewrite.received += msg.text;
      break;
    case "suggestion.end":
      rewrite.streaming = false;
      if (rewrite.state === "streaming") {
        rewrite.state = msg.reason === "done" ? "ready" : "ended";
        if (msg.reason !== "done") rewrite.note = `stopped (${msg.reason})`;
      }
      break;
    case "suggestion.accepted":
      rewrite = null;
      aiNote("rewrite applied");
      break;
    case "suggestion.error":
      rewrite.streaming = false;
      rewrite.state = "error";
      rewrite.note = msg.message || msg.code;
      break;
    default:
      break;
  }
  renderRewrite();
}

function closeRewrite() {
  if (rewrite && rewrite.streaming) send({ type: "cancel", id: rewrite.id });
  rewrite = null;
  renderRewrite();
}

function renderRewrite() {
  if (!rewrite) {
    rewritePanel.hidden = true;
    rewritePanel.replaceChildren();
    return;
  }
  const parts = wordDiff(rewrite.old, rewrite.received);
  const diff = h(
    "div",
    { class: "diff", id: "tether-rewrite-diff" },
    parts.map((p) =>
      p.op === "same" ? h("span", {}, p.text) : h(p.op === "del" ? "del" : "ins", {}, p.text),
    ),
  );
  const label = {
    streaming: "writing…",
    ready: "ready",
    accepting: "applying…",
    ended: rewrite.note,
    error: `error: ${rewrite.note}`,
  }[rewrite.state] || "";
  const canAccept = writable && rewrite.received.length > 0 &&
    (rewrite.state === "streaming" || rewrite.state === "ready" || rewrite.state === "ended");
  rewritePanel.replaceChildren(
    h("h2", {}, "Rewrite ", h("small", { class: `rewrite-state ${rewrite.state}` }, label)),
    diff,
    h(
      "div",
      { class: "actions" },
      h(
        "button",
        {
          type: "button",
          id: "tether-rewrite-accept",
          class: "primary",
          disabled: !canAccept,
          onclick: () => {
            if (!rewrite) return;
            send({ type: "accept", id: rewrite.id });
            rewrite.streaming = false;
            rewrite.state = "accepting";
            renderRewrite();
          },
        },
        "Accept",
      ),
      h("button", { type: "button", id: "tether-rewrite-reject", onclick: closeRewrite }, "Reject"),
    ),
  );
  rewritePanel.hidden = false;
}

// ---------------------------------------------------------------- the editor

// The server's --rich-fragment ("default", Tiptap's default field, unless it says otherwise).
const RICH_FIELD = typeof cfg.fragment === "string" && cfg.fragment ? cfg.fragment : "default";
const forcedKind = new URLSearchParams(location.search).get("editor") || cfg.editor;

function chooseKind() {
  if (forcedKind === "rich" || forcedKind === "plain") return forcedKind;
  if (ydoc.getXmlFragment(RICH_FIELD).length > 0) return "rich";
  return ytext.length > 0 ? "plain" : "rich"; // a new document opens rich
}

async function mountEditor() {
  if (surface || refused) return;
  const kind = chooseKind();
  // Each editor is a chunk of its own: a page loads only the one it shows.
  const module = kind === "rich" ? await import("./rich_editor.js") : await import("./plain_editor.js");
  if (surface || refused) return;
  editorEl.dataset.kind = kind;
  document.body.dataset.editor = kind;
  const ctx = { ...editorCtx, ydoc, provider, awareness: provider.awareness, user, field: RICH_FIELD };
  surface = kind === "rich" ? module.mountRich(editorEl, ctx) : module.mountPlain(editorEl, ctx);
  if (authenticated) surface.setEditable(writable);
  Object.assign(window.tether, { surface, view: surface.view, editor: surface.editor });
  renderAiControls();
}

provider.on("synced", () => mountEditor());
setTimeout(() => mountEditor(), CHOOSE_EDITOR_AFTER_MS); // offline: what this page has
if (provider.isSynced) mountEditor();

suggestButton.addEventListener("click", () => {
  if (!surface) return;
  surface.focus();
  requestSuggestion({ auto: false });
});
rewriteButton.addEventListener("mousedown", (e) => e.preventDefault()); // keep the selection
rewriteButton.addEventListener("click", () => startRewrite());

renderPresence();
renderPending();
renderAiControls();

// For scripted browser tests and debugging (the editor's fields are set once it is mounted).
window.tether = { provider, websocketProvider, ydoc, ytext, user, documentName, surface: null, view: null, editor: null };
