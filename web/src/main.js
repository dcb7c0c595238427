// tether's editor page (/d/{name}): the document in a rich-text editor (Tiptap on its
// Y.XmlFragment "default", rich_editor.js) or a plain one (CodeMirror on its Y.Text "content",
// plain_editor.js), over ONE Hocuspocus /ws socket; presence, connection state and AI
// suggestions (ghost text, rewrites) as Stateless JSON on the same socket.
//
// Which editor: `?editor=rich|plain` (or window.TETHER.editor) when given; else, once synced,
// rich when the fragment holds anything, plain when only the text does, rich for a new document.
//
// The document is also kept in this browser (local.js: y-indexeddb, merged before the socket
// syncs; a service worker keeps the page shell), so edits survive a reload, a crashed tab and a
// server that is down; `?local=off` or the deployment's --web-local-copies off keep nothing.
//
// Both editors are a *surface* this page drives: {kind, hasFocus(), focus(), setEditable(bool),
// destroy(), suggestions() -> tether-client's driver (ask, rewrite) or null}. Their AI (ghost
// text, Tab/Esc, type-through, rewrites) is tether-client's Tiptap or CodeMirror extension,
// given this page's options (aiOptions).
import "./common.css";
import "./editor.css";
import * as Y from "yjs";
import { HocuspocusProvider, HocuspocusProviderWebsocket } from "@hocuspocus/provider";
import { TetherAI } from "tether-client";
import { guardPresence } from "./presence.js";
import { fallbackSocketClass } from "./transport.js";
import {
  MAX_NAME,
  appRoot,
  at,
  colorOf,
  config,
  currentToken,
  displayName,
  h,
  rememberName,
  signInBox,
} from "./common.js";
import { LocalCopy } from "./local.js";
import { clearAllLocalCopies, keepShell } from "./offline.js";

// Until the first sync says which kind the document is; then the local state decides.
const CHOOSE_EDITOR_AFTER_MS = 3000;
const DELETED_REASON = "document deleted"; // the server's PermissionDenied for a deleted one
const SYNC_STATUS = 8; // the frame type of the server's per-update answer (1 applied, 0 refused)
// A refusal of the document that says nothing about access to it: the local copy stays.
const KEEPS_LOCAL_COPY = ["document quarantined", "too many documents", "update too large", "invalid document name"];
// Refusals of the token itself, not of access: "token expired", "missing, invalid or expired
// token" (a new token fixes them).
const TOKEN_TROUBLE = ["expired", "invalid", "missing"];

// ---------------------------------------------------------------- what to open, as whom

const cfg = config();
const documentName = cfg.document || documentNameFromPath(location.pathname);
const token = currentToken(); // moves a ?token= out of the address bar first
const user = {};
setUser(displayName(token));
const aiEnabled = cfg.ai !== false;
// Local copies: on unless the deployment (window.TETHER.local) or this page load says off.
const deploymentLocal = cfg.local !== false;
const localWanted = deploymentLocal && new URLSearchParams(location.search).get("local") !== "off";
// Set once they exist; refuse() may run before (no document name) or after.
let provider = null;
let websocketProvider = null;
let surface = null; // the editor, once mounted

/** The name shown to others, and the colour that follows from it (the same on every load). */
function setUser(name) {
  user.name = name;
  user.color = colorOf(name);
  user.colorLight = user.color + "33";
}

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
const localEl = h("span", { id: "tether-local", class: "chip local" }, "");
const nameInput = h("input", {
  id: "tether-name",
  class: "name-field",
  type: "text",
  maxlength: MAX_NAME,
  autocomplete: "nickname",
  spellcheck: "false",
  "aria-label": "your name, shown to the others here",
  title: "Your name, shown to the others here",
  value: user.name,
});
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
    localEl,
    scopeEl,
    h("span", { class: "spacer" }),
    nameInput,
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
let refused = false;
let authenticated = false;
let writable = false;
let everConnected = false;
let failedSinceConnected = false; // a connection attempt failed since the socket was last up
let gaveUp = false;
let failures = 0; // closed or failed sockets since the last one that opened
// Writes the server answered "not applied" (SyncStatus 0) under a read-only grant, since the
// last authentication: they stay in this page (and its local copy) and are never saved.
let refusedEdits = 0;
// What the local copy says of the last visit: edits the server had not acknowledged then, and
// the scope it last granted (so a page opened offline is editable where it was before).
let carriedUnsaved = false;
let storedUnsaved = false;
let rememberedScope = null;

const local = new LocalCopy(documentName, ydoc, { enabled: localWanted, onState: renderLocal });
if (!deploymentLocal) clearAllLocalCopies(); // a deployment that keeps none keeps none at all
keepShell(deploymentLocal, () => (document.body.dataset.shell = "kept"));

const Socket = fallbackSocketClass({ token, onTransport: showTransport });
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
  WebSocketPolyfill: Socket,
});
websocketProvider.on("maxAttemptsFailed", ({ error }) => {
  console.error("tether: cannot connect", error);
  gaveUp = true;
  renderConnection();
});

// The document's provider starts once the local copy is merged into ydoc: what it holds is then
// the provider's starting state, and the sync handshake sends the server only what it lacks.
local.ready.then(() => {
  if (refused) return;
  carriedUnsaved = storedUnsaved = local.meta.unsaved === true;
  rememberedScope = typeof local.meta.scope === "string" ? local.meta.scope : null;
  connectDocument();
});

function connectDocument() {
  provider = new HocuspocusProvider({
    websocketProvider,
    name: documentName,
    token,
    document: ydoc,
  });
  guardPresence(provider.awareness); // first listener: remote colours are checked before use
  provider.on("message", onFrame); // every frame for this document, before the provider's own
  provider.on("authenticated", onAuthenticated);
  provider.on("authenticationFailed", onAuthenticationFailed);
  provider.on("synced", ({ state }) => {
    document.body.dataset.synced = state ? "true" : "false";
    renderPending();
    mountEditor();
  });
  provider.on("unsyncedChanges", () => renderPending());
  provider.awareness.on("change", renderPresence);
  startAi(); // before attach: it hears the first authentication
  provider.attach();
  provider.setAwarenessField("user", { ...user });
  window.tether.provider = provider;
  renderPresence();
  renderPending();
  // Which editor: the local copy already tells when it holds the document; else the first
  // sync, or (offline, nothing kept) a new document's after a while.
  if (ydoc.getXmlFragment(RICH_FIELD).length > 0 || ytext.length > 0) mountEditor();
  setTimeout(() => mountEditor(), CHOOSE_EDITOR_AFTER_MS);
}

// Which way the frames travel (transport.js): said in the status pill, so an editor behind a
// proxy that blocks WebSockets knows why it is a little slower.
const TRANSPORT_NAMES = { ws: "WebSocket", "http-stream": "HTTP stream", "http-poll": "HTTP polling" };
let transport = null;

function showTransport(kind) {
  transport = kind;
  document.body.dataset.transport = kind;
  renderConnection();
}

/** The status pill, from the socket's state and the browser's network state, never from an
 * event alone: whatever happened last, it says what is true now. */
function renderConnection() {
  if (refused) return;
  const status = websocketProvider ? websocketProvider.status : "connecting";
  const online = navigator.onLine !== false;
  let state;
  let label;
  if (status === "connected") {
    state = "connected";
    label = transport ? `connected · ${TRANSPORT_NAMES[transport]}` : "connected";
  } else if (gaveUp) {
    state = "offline";
    label = "offline (not retrying; reload the page)";
  } else if (!online) {
    state = "offline";
    label = "offline";
  } else if (failedSinceConnected) {
    state = "offline";
    label = "offline · retrying";
  } else if (everConnected) {
    state = "reconnecting";
    label = "reconnecting…";
  } else {
    state = "connecting";
    label = "connecting…";
  }
  statusEl.className = `chip status-${state}`;
  statusEl.textContent = label;
  statusEl.title = state === "connected" && transport ? `transport: ${TRANSPORT_NAMES[transport]}` : state === "offline" ? "cannot reach the server: edits stay in this page" + (local.enabled ? " and this browser" : "") : "";
  document.body.dataset.connection = state;
  document.body.dataset.online = String(online);
}

websocketProvider.on("status", ({ status }) => {
  if (refused) return;
  if (status === "connected") {
    everConnected = true;
    failedSinceConnected = false;
    failures = 0;
  } else if (status === "disconnected") {
    failedSinceConnected = true;
    failures += 1;
  }
  document.body.dataset.failures = String(failures);
  renderConnection();
  renderPending();
});

window.addEventListener("offline", () => {
  if (refused) return;
  renderConnection();
  // Without a network the socket is dead, though it may take a ping timeout to notice: end it
  // now, so the state says so and reconnecting starts clean when the network is back.
  if (websocketProvider.status === "connected" && websocketProvider.webSocket) websocketProvider.webSocket.close();
});
window.addEventListener("online", () => {
  if (refused) return;
  renderConnection();
  Socket.networkChanged(); // a WebSocket first again, whatever failed while the network was away
  if (websocketProvider.status !== "connected") websocketProvider.connect(); // now, not after the back-off
});

/** The frames of this document, read before the provider applies them: the provider (4.8)
 * ignores a SyncStatus 0, so a refused write would look saved. */
function onFrame({ event }) {
  const bytes = new Uint8Array(event.data);
  let pos = 0;
  const varUint = () => {
    let value = 0;
    let shift = 0;
    let byte;
    do {
      byte = bytes[pos++];
      value += (byte & 0x7f) * 2 ** shift;
      shift += 7;
    } while (byte & 0x80 && pos < bytes.length);
    return value;
  };
  const nameBytes = varUint();
  pos += nameBytes; // past the document name
  if (pos >= bytes.length || varUint() !== SYNC_STATUS || pos >= bytes.length) return;
  const applied = (bytes[pos] & 0x3f) === 1; // lib0 varInt: 6 value bits, then the sign
  if (!applied) onRefusedWrite();
}

function onRefusedWrite() {
  // With a read-write grant the server asks for the update again itself (it was turned away
  // while the document was rebuilt, or arrived before one it needs): it is still unsaved.
  if (writable) return;
  refusedEdits += 1;
  provider.decrementUnsyncedChanges(); // answered, so not pending: refused (renderPending)
}

function onAuthenticated({ scope }) {
  authenticated = true;
  writable = scope !== "readonly";
  // This round's handshake sends the server all it lacks: refusals are counted afresh.
  refusedEdits = 0;
  scopeEl.hidden = writable;
  document.body.dataset.scope = scope;
  rememberedScope = scope;
  local.set("scope", scope);
  if (surface) surface.setEditable(writable);
  renderAiControls();
  renderPending();
}

function onAuthenticationFailed({ reason }) {
  const why = String(reason || "permission denied");
  if (why === DELETED_REASON) {
    local.clear();
    refuse(`“${documentName}” was deleted; this browser no longer keeps a copy of it.`, false);
    return;
  }
  // No longer allowed (a token for other documents, revoked): this browser keeps no copy of
  // it, unless it holds edits typed here that never reached the server: those are the
  // writer's own words, kept until a token with access saves them. A token that expired or
  // is invalid says nothing about access (signing in again fixes it), nor does a limit of the
  // connection: the copy stays.
  const tokenTrouble = TOKEN_TROUBLE.some((part) => why.includes(part));
  const keeps = tokenTrouble || KEEPS_LOCAL_COPY.some((prefix) => why.startsWith(prefix));
  const unsaved = unsavedEdits();
  if (!keeps && !unsaved) local.clear();
  const kept = !keeps && unsaved ? " The edits typed here that were not saved are kept in this browser until a token with access saves them." : "";
  refuse(`Access to “${documentName}” was refused: ${why}.${kept}`, cfg.auth === "jwt");
}

/** Edits this page holds that the server has not acknowledged (or refused). */
function unsavedEdits() {
  return (provider ? provider.unsyncedChanges : 0) > 0 || carriedUnsaved || refusedEdits > 0;
}

function renderPending() {
  const n = provider ? provider.unsyncedChanges : 0;
  document.body.dataset.pending = String(n);
  document.body.dataset.refused = String(refusedEdits);
  const synced = provider !== null && provider.isSynced;
  if (carriedUnsaved && n === 0 && synced && refusedEdits === 0) carriedUnsaved = false; // all in
  const unsaved = unsavedEdits();
  document.body.dataset.unsaved = String(unsaved);
  rememberUnsaved(unsaved);
  let text = "";
  let state = "";
  if (refused) {
    text = "";
  } else if (refusedEdits > 0) {
    text = `read-only: ${refusedEdits === 1 ? "1 edit" : `${refusedEdits} edits`} not saved`;
    state = "unsaved refused";
  } else if (n > 0) {
    text = n === 1 ? "1 edit not yet saved" : `${n} edits not yet saved`;
    state = "unsaved";
  } else if (carriedUnsaved) {
    text = "edits not yet saved";
    state = "unsaved";
  } else if (synced) {
    text = "all changes saved";
    state = "saved";
  }
  pendingEl.textContent = text;
  pendingEl.className = `chip pending ${state}`.trim();
  pendingEl.title = refusedEdits > 0 ? "the server refused them: this page may only read this document" : "";
}

// The local copy's "unsaved" fact: written at once when edits start waiting (a crash then
// leaves it set), cleared once nothing has waited for a while (not on every acknowledgement).
const UNSAVED_CLEARED_AFTER_MS = 2000;
let unsavedTimer = null;

function rememberUnsaved(unsaved) {
  if (refused) return;
  if (unsaved && !storedUnsaved) {
    storedUnsaved = true;
    local.set("unsaved", true);
  } else if (!unsaved && storedUnsaved && unsavedTimer === null) {
    unsavedTimer = setTimeout(() => {
      unsavedTimer = null;
      if (!refused && !unsavedEdits()) {
        storedUnsaved = false;
        local.set("unsaved", false);
      }
    }, UNSAVED_CLEARED_AFTER_MS);
  }
}

/** Where this browser keeps the document: a chip, and document.body.dataset.local for tests. */
function renderLocal(state) {
  document.body.dataset.local = state;
  const shown = {
    loading: ["", ""],
    saving: ["local copy…", "writing the latest edits to this browser's copy"],
    saved: ["local copy", "kept in this browser too: edits survive a reload and a server that is down"],
    off: [localWanted ? "" : "no local copy", "this browser keeps no copy of this document"],
    failed: ["no local copy", "this browser refused to keep a copy (storage off or full)"],
  }[state] || ["", ""];
  localEl.textContent = shown[0];
  localEl.title = shown[1];
  localEl.className = `chip local local-${state}`;
}

// Leaving with edits the server has not confirmed: the browser asks first.
window.addEventListener("beforeunload", (event) => {
  if (refused || !unsavedEdits()) return;
  event.preventDefault();
  event.returnValue = ""; // older browsers want it set
});

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
  for (const thing of [ai, provider, websocketProvider, surface]) {
    try {
      if (thing) thing.destroy();
    } catch (err) {
      console.warn("tether: cleanup after refusal", err);
    }
  }
}

// ---------------------------------------------------------------- presence

function renderPresence() {
  if (refused || !provider) return;
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

// ---------------------------------------------------------------- AI

// The AI messages, ghost text and rewrites are tether-client's (clients/js): one client on this
// document's provider, and its editor extensions (mounted with the editor). This page shows
// what they report: the status on the buttons, short notes, the rewrite panel.
let ai = null; // the TetherAI client, once the provider exists (unless AI is off here)
let rewrite = null; // the RewriteSession in the panel
let rewriteDroppedShown = null; // the `dropped` list the panel has put on screen
let wasAvailable = true;
const SUGGEST_TITLE = suggestButton.title;
const REWRITE_TITLE = rewriteButton.title;

function startAi() {
  if (!aiEnabled) return;
  // The client asks for ai.status now and after every (re)authentication.
  ai = TetherAI.for(provider);
  ai.on("status", onAiStatus);
  ai.on("error", (error) => {
    // An error for no suggestion of ours: a request the server could not read.
    if (error.id === null || error.code !== "bad_request") aiNote(`AI: ${error.message || error.code}`);
  });
}

/** Only "ready" means suggestions work; until the server says anything, they count as working. */
function aiAvailable() {
  return !ai || ai.available;
}

// The server's 'unavailable' errors already begin "AI is unavailable: …"; say it once.
function withoutPrefix(reason) {
  return String(reason || "").replace(/^\s*AI (is )?unavailable:\s*/i, "");
}

function aiUnavailableText() {
  const status = ai && ai.status;
  return `AI unavailable: ${(status && (withoutPrefix(status.reason) || status.state)) || "unknown"}`;
}

/** Grey the AI controls while AI cannot answer, saying why on hover. */
function renderAiControls() {
  const usable = aiEnabled && writable && !refused && aiAvailable();
  suggestButton.disabled = !usable;
  rewriteButton.disabled = !usable;
  const why = aiAvailable() ? null : aiUnavailableText();
  suggestButton.title = why || SUGGEST_TITLE;
  rewriteButton.title = why || REWRITE_TITLE;
  document.body.dataset.ai = !aiEnabled ? "off" : ai && ai.status ? ai.status.state : "unknown";
}

function onAiStatus() {
  renderAiControls();
  const available = aiAvailable();
  if (!available) aiNote(aiUnavailableText(), true);
  else if (!wasAvailable) aiNote("AI is back");
  wasAvailable = available;
}

let aiNoteTimer = null;
function aiNote(text, sticky = false) {
  aiEl.textContent = text;
  clearTimeout(aiNoteTimer);
  if (text && !sticky) aiNoteTimer = setTimeout(() => (aiEl.textContent = ""), 4000);
}

/** What the editor extension reports, as this page's short notes. */
function onAiEvent(event) {
  switch (event.type) {
    case "asking":
      if (!event.auto) aiNote("asking…");
      break;
    case "started":
      aiEl.textContent = "";
      break;
    case "empty":
      aiNote("no suggestion here");
      break;
    case "junk":
      // Nothing junk was shown; the kind goes to the console for whoever wonders why no ghost
      // text came.
      console.info(`tether: suggestion ${event.id} dropped as junk (${event.kind})`);
      break;
    case "unavailable":
      aiNote(aiUnavailableText(), true);
      break;
    case "no-selection":
      aiNote("Select some text to rewrite.");
      break;
    case "error":
      onAiError(event);
      break;
    default:
      break;
  }
}

function onAiError({ stage, error, auto }) {
  if (error.code === "unavailable") return; // the status says it (onAiStatus)
  if (stage === "rewrite") return; // the panel shows it
  if (error.code === "timeout") {
    if (!auto) aiNote("no answer from the AI");
  } else if (error.code === "not_connected") {
    if (!auto) aiNote("not connected: suggestions need the server");
  } else if (stage === "accept" && error.code === "bad_request") {
    aiNote("The text there changed; ask again.");
  } else {
    aiNote(`AI: ${error.message || error.code}`);
  }
}

/** The options the editor extensions get (null: AI off on this page). */
function aiOptions(ghostClass) {
  if (!ai) return null;
  return {
    client: ai,
    enabled: () => !refused && aiEnabled && authenticated && writable,
    onEvent: onAiEvent,
    onRewrite: onRewriteChange,
    ghostClass,
    ghostStyle: null, // editor.css styles it
  };
}

// ---------------------------------------------------------------- rewrite panel

function onRewriteChange(session) {
  if (session.state === "applied") {
    if (rewrite === session) rewrite = null;
    aiNote("rewrite applied");
  } else if (session.state === "closed") {
    if (rewrite === session) rewrite = null;
  } else {
    rewrite = session;
  }
  renderRewrite();
}

function acceptRewrite() {
  if (!rewrite) return;
  // Confirm what it drops only once the panel has shown that list (never from a shortcut).
  if (rewrite.needsConfirm && rewriteDroppedShown !== rewrite.dropped) return;
  rewrite.accept({ confirmDropped: rewrite.needsConfirm });
}

function closeRewrite() {
  if (rewrite) rewrite.reject();
  rewrite = null;
  renderRewrite();
}

function renderRewrite() {
  if (!rewrite) {
    rewritePanel.hidden = true;
    rewritePanel.replaceChildren();
    return;
  }
  const diff = h(
    "div",
    { class: "diff", id: "tether-rewrite-diff" },
    rewrite.diff().map((p) =>
      p.op === "same" ? h("span", {}, p.text) : h(p.op === "del" ? "del" : "ins", {}, p.text),
    ),
  );
  const drops = rewrite.dropped.length > 0;
  const label = {
    streaming: "writing…",
    ready: drops ? "check what it drops" : "ready",
    accepting: "applying…",
    ended: rewrite.note,
    error: `error: ${withoutPrefix(rewrite.note) || rewrite.note}`,
  }[rewrite.state] || "";
  const canAccept = writable && rewrite.canAccept;
  const droppedEl = drops
    ? h(
        "div",
        { class: "dropped", id: "tether-rewrite-dropped", role: "alert" },
        h("strong", {}, "Would drop: "),
        rewrite.dropped.flatMap((item, i) => [
          i ? ", " : "",
          h("span", { class: `dropped-item dropped-${item.kind}`, title: item.kind, "data-kind": item.kind }, item.text),
        ]),
      )
    : null;
  rewritePanel.replaceChildren(
    h("h2", {}, "Rewrite ", h("small", { class: `rewrite-state ${rewrite.state}` }, label)),
    droppedEl,
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
          onclick: acceptRewrite,
        },
        drops ? "Accept anyway" : "Accept",
      ),
      h("button", { type: "button", id: "tether-rewrite-reject", onclick: closeRewrite }, "Reject"),
    ),
  );
  rewritePanel.hidden = false;
  // On screen, above the diff and the Accept button: only now may Accept confirm it.
  rewriteDroppedShown = drops ? rewrite.dropped : null;
  document.body.dataset.rewriteDropped = String(rewrite.dropped.length);
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
  if (surface || refused || !provider) return;
  const kind = chooseKind();
  // Each editor is a chunk of its own: a page loads only the one it shows.
  const module = kind === "rich" ? await import("./rich_editor.js") : await import("./plain_editor.js");
  if (surface || refused) return;
  editorEl.dataset.kind = kind;
  document.body.dataset.editor = kind;
  const ctx = {
    ydoc,
    provider,
    awareness: provider.awareness,
    user,
    field: RICH_FIELD,
    ai: aiOptions(kind === "rich" ? "tt-ghost" : "cm-ghost"),
  };
  surface = kind === "rich" ? module.mountRich(editorEl, ctx) : module.mountPlain(editorEl, ctx);
  // Offline, before the server says: editable where the last grant was read-write (the
  // server refuses the edits later if that changed, and the page says so).
  surface.setEditable(authenticated ? writable : rememberedScope === "read-write");
  Object.assign(window.tether, { surface, view: surface.view, editor: surface.editor });
  renderAiControls();
}


suggestButton.addEventListener("click", () => {
  const suggestions = surface && surface.suggestions();
  if (!suggestions) return;
  surface.focus();
  suggestions.request({ auto: false });
});
rewriteButton.addEventListener("mousedown", (e) => e.preventDefault()); // keep the selection
rewriteButton.addEventListener("click", () => {
  const suggestions = surface && surface.suggestions();
  if (suggestions) suggestions.rewrite();
});

nameInput.addEventListener("change", () => {
  rememberName(nameInput.value);
  setUser(nameInput.value.trim().slice(0, MAX_NAME) || displayName(token));
  nameInput.value = user.name;
  if (provider && !refused) provider.setAwarenessField("user", { ...user });
  renderPresence();
});

renderConnection();
renderPending();
renderAiControls();

// For scripted browser tests and debugging (the provider is set once the local copy is merged,
// the editor's fields once it is mounted).
window.tether = {
  provider,
  websocketProvider,
  ydoc,
  ytext,
  user,
  local,
  documentName,
  surface: null,
  view: null,
  editor: null,
};
