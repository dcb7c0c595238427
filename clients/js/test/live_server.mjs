// The client against a real tether server (started by tests/test_client_js.py with the
// scripted AI): a real HocuspocusProvider in Node over `ws`, TetherAI on it, and what each step
// gave, one JSON line per check, for the Python test to assert.
// Usage: TETHER_WS=ws://127.0.0.1:PORT/ws TETHER_TOKEN=... TETHER_READONLY_TOKEN=... node test/live_server.mjs
import { HocuspocusProvider, HocuspocusProviderWebsocket } from "@hocuspocus/provider";
import WebSocket from "ws";
import { RewriteSession, TetherAI, textAnchor } from "../dist/index.js";

const url = process.env.TETHER_WS;
const timeout = (ms, what) =>
  new Promise((_, reject) => setTimeout(() => reject(new Error(`timed out: ${what}`)), ms).unref());
const within = (promise, what, ms = 15000) => Promise.race([promise, timeout(ms, what)]);
const report = (check, value) => process.stdout.write(JSON.stringify({ check, value }) + "\n");

async function open(name, token) {
  const socket = new HocuspocusProviderWebsocket({ url, WebSocketPolyfill: WebSocket, maxAttempts: 1 });
  const provider = new HocuspocusProvider({ websocketProvider: socket, name, token });
  provider.attach();
  const ai = TetherAI.for(provider);
  const synced = new Promise((resolve) => provider.on("synced", resolve));
  const ready = new Promise((resolve) => {
    const stop = ai.on("status", (status) => {
      stop();
      resolve(status);
    });
  });
  const status = await within(Promise.all([synced, ready]), `${name} synced and status`);
  return { socket, provider, ai, ytext: provider.document.getText("content"), status: status[1] };
}

function close({ provider, socket, ai }) {
  ai.destroy();
  provider.destroy();
  socket.destroy();
}

const writer = await open("live-doc", process.env.TETHER_TOKEN);
report("status", writer.status.state);

// A completion at the end, by anchor; streamed, then accepted: the server writes it.
writer.ytext.insert(0, "The boats came home");
const suggestion = writer.ai.suggest({ anchor: textAnchor(writer.ytext, writer.ytext.length), maxTokens: 8 });
const deltas = [];
suggestion.on("delta", ({ text }) => deltas.push(text));
const end = await within(suggestion.result, "completion");
report("completion", { ok: end.ok, text: end.ok ? end.value.text : null, reason: end.ok ? end.value.reason : null, deltas: deltas.length });
const landed = new Promise((resolve) => writer.ytext.observe(() => writer.ytext.toString().includes("gulls") && resolve()));
const accepted = await within(suggestion.accept(), "accept");
await within(landed, "accepted text");
report("accepted", { ok: accepted.ok, text: writer.ytext.toString(), state: suggestion.state });

// The same id again: forgotten on the server, a bad_request as a value.
const again = await within(writer.ai.accept(suggestion.id), "second accept");
report("accept_again", again.ok ? "ok" : again.error.code);

// A rewrite that drops content: refused unconfirmed (here, then by the server), applied when confirmed.
writer.ytext.delete(0, writer.ytext.length);
writer.ytext.insert(0, "We decided to ship it on Friday.");
const session = RewriteSession.start(writer.ai, { from: 0, to: writer.ytext.length }, writer.ytext.toString());
await within(session.suggestion.result, "rewrite");
report("rewrite", { state: session.state, dropped: session.dropped.map((loss) => loss.kind), text: session.text });
const local = await session.accept();
report("rewrite_unconfirmed_here", local.ok ? "ok" : local.error.code);
const server = await within(writer.ai.accept(session.id), "unconfirmed accept");
report("rewrite_unconfirmed_server", server.ok ? "ok" : server.error.code);
const confirmed = await within(session.accept({ confirmDropped: true }), "confirmed accept");
await within(new Promise((resolve) => (writer.ytext.toString().includes("gulls") ? resolve() : writer.ytext.observe(resolve))), "rewrite lands");
report("rewrite_confirmed", { ok: confirmed.ok, state: session.state, text: writer.ytext.toString() });

// A cursor that is not a position in this document: an error value, not an exception.
const bad = await within(writer.ai.suggest({ anchor: "AAEEAA==" }).result, "bad anchor");
report("bad_anchor", bad.ok ? "ok" : bad.error.code);

// A reader gets no suggestions: forbidden, as a value.
const reader = await open("live-doc", process.env.TETHER_READONLY_TOKEN);
report("reader_writable", reader.ai.writable);
const refused = await within(reader.ai.suggest({ pos: 0 }).result, "reader suggest");
report("reader_suggest", refused.ok ? "ok" : refused.error.code);
close(reader);
close(writer);
process.exit(0);
