import assert from "node:assert/strict";
import { test } from "node:test";
import { TetherAI, RewriteSession } from "../dist/index.js";
import { FakeProvider } from "./fake_provider.mjs";

test("a completion streams into its suggestion and its result carries the end", async () => {
  const provider = new FakeProvider();
  const client = new TetherAI(provider);
  const suggestion = client.suggest({ anchor: "AAEEAA==", maxTokens: 8 });
  assert.deepEqual(provider.last("suggest"), {
    type: "suggest",
    id: suggestion.id,
    kind: "complete",
    anchor: "AAEEAA==",
    max_tokens: 8,
  });
  const deltas = [];
  suggestion.on("delta", ({ text }) => deltas.push(text));
  const id = suggestion.id;
  provider.deliver({ type: "suggestion.start", id, source: "model" });
  assert.equal(suggestion.state, "streaming");
  provider.deliver({ type: "suggestion.delta", id, text: " and" });
  provider.deliver({ type: "suggestion.delta", id, text: " the gulls" });
  provider.deliver({ type: "suggestion.end", id, reason: "done", tokens: 3, ttft_ms: 4.5 });
  const outcome = await suggestion.result;
  assert.deepEqual(deltas, [" and", " the gulls"]);
  assert.equal(outcome.ok, true);
  assert.deepEqual(outcome.value, { text: " and the gulls", reason: "done", tokens: 3, ttftMs: 4.5, dropped: [], source: "model" });
  assert.equal(suggestion.state, "ended");
  client.destroy();
});

test("the status is watched from the start and again after each authentication", () => {
  const provider = new FakeProvider();
  const client = new TetherAI(provider);
  assert.deepEqual(provider.sent, [{ type: "status", id: "ai-status" }]);
  const seen = [];
  client.on("status", (status) => seen.push(status.state));
  provider.deliver({ type: "ai.status", id: "ai-status", state: "degraded", reason: "self-test failed" });
  assert.equal(client.available, false);
  assert.deepEqual(client.status, { state: "degraded", reason: "self-test failed" });
  provider.emit("authenticated", { scope: "read-write" });
  assert.equal(provider.sent.filter((m) => m.type === "status").length, 2);
  provider.deliver({ type: "ai.status", id: "someone-else", state: "ready", reason: "" });
  assert.deepEqual(seen, ["degraded"]);
  client.destroy();
});

test("an unavailable error marks AI unavailable at once and asks the status again", () => {
  const provider = new FakeProvider();
  const client = new TetherAI(provider);
  provider.deliver({ type: "ai.status", id: "ai-status", state: "ready", reason: "" });
  const suggestion = client.suggest({ pos: 3 });
  provider.deliver({ type: "suggestion.start", id: suggestion.id, source: "model" });
  provider.deliver({
    type: "suggestion.error",
    id: suggestion.id,
    code: "unavailable",
    message: "AI is unavailable: the model worker crashed with SIGSEGV",
  });
  assert.equal(suggestion.state, "failed");
  assert.equal(suggestion.error.code, "unavailable");
  assert.equal(client.available, false);
  assert.match(client.status.reason, /SIGSEGV/);
  assert.equal(provider.sent.filter((m) => m.type === "status").length, 2);
  provider.deliver({ type: "ai.status", id: "ai-status", state: "ready", reason: "" });
  assert.equal(client.available, true);
  client.destroy();
});

test("errors are values: not connected, no answer, and a destroyed client", async () => {
  const offline = new FakeProvider({ synced: false });
  const client = new TetherAI(offline, { answerTimeoutMs: 20 });
  const refused = await client.suggest({ pos: 0 }).result;
  assert.equal(refused.ok, false);
  assert.equal(refused.error.code, "not_connected");
  assert.equal(offline.sent.filter((m) => m.type === "suggest").length, 0);
  assert.equal((await client.accept("g1")).error.code, "not_connected");
  offline.isSynced = true;
  const late = client.suggest({ pos: 0 });
  const silent = await late.result;
  assert.equal(silent.error.code, "timeout");
  assert.deepEqual(offline.last("cancel"), { type: "cancel", id: late.id }); // stop the model
  let errors = 0;
  late.on("error", () => errors++);
  offline.deliver({ type: "suggestion.error", id: late.id, code: "bad_request", message: "unknown id" });
  assert.equal(errors, 0); // over already: the answer to that cancel changes nothing
  const pending = client.suggest({ pos: 0 });
  client.destroy();
  assert.equal((await pending.result).error.code, "closed");
});

test("a socket that is not connected counts as not connected, even if synced before", async () => {
  const provider = new FakeProvider();
  provider.configuration = { websocketProvider: { status: "disconnected" } };
  const client = new TetherAI(provider);
  assert.equal(client.connected, false);
  provider.configuration.websocketProvider.status = "connected";
  assert.equal(client.connected, true);
  client.destroy();
});

test("accept resolves with the server's answer for that id", async () => {
  const provider = new FakeProvider();
  const client = new TetherAI(provider);
  const suggestion = client.suggest({ pos: 0 });
  const id = suggestion.id;
  provider.deliver({ type: "suggestion.start", id, source: "exact" });
  provider.deliver({ type: "suggestion.delta", id, text: "x" });
  provider.deliver({ type: "suggestion.end", id, reason: "done", tokens: 0 });
  const answer = suggestion.accept();
  assert.deepEqual(provider.last("accept"), { type: "accept", id });
  provider.deliver({ type: "suggestion.accepted", id: "someone-elses" });
  provider.deliver({ type: "suggestion.accepted", id });
  assert.deepEqual(await answer, { ok: true, value: undefined });
  assert.equal(suggestion.state, "accepted");

  const stale = client.suggest({ pos: 0 });
  provider.deliver({ type: "suggestion.delta", id: stale.id, text: "y" });
  provider.deliver({ type: "suggestion.end", id: stale.id, reason: "done", tokens: 1 });
  const refused = stale.accept();
  provider.deliver({ type: "suggestion.error", id: stale.id, code: "bad_request", message: "the text changed; ask again" });
  const outcome = await refused;
  assert.equal(outcome.ok, false);
  assert.equal(outcome.error.code, "bad_request");
  assert.equal(stale.state, "ended"); // as it was: the refusal is the accept's, not the stream's
  client.destroy();
});

test("a rewrite that drops content is refused unconfirmed here, and sent with confirm_dropped once confirmed", async () => {
  const provider = new FakeProvider();
  const client = new TetherAI(provider);
  const changes = [];
  const session = RewriteSession.start(client, { from: 0, to: 31 }, "We decided to ship it on Friday.");
  session.on("change", (s) => changes.push(s.state));
  assert.deepEqual(provider.last("suggest"), { type: "suggest", id: session.id, kind: "rewrite", from: 0, to: 31 });
  provider.deliver({ type: "suggestion.start", id: session.id, source: "model" });
  provider.deliver({ type: "suggestion.delta", id: session.id, text: "We decided to ship it." });
  provider.deliver({
    type: "suggestion.end",
    id: session.id,
    reason: "done",
    tokens: 6,
    dropped: [{ kind: "weekday", text: "Friday" }],
  });
  assert.equal(session.state, "ready");
  assert.equal(session.needsConfirm, true);
  assert.deepEqual(
    session.diff().filter((p) => p.op !== "same"),
    [{ op: "del", text: " on Friday" }],
  );
  const unconfirmed = await session.accept();
  assert.equal(unconfirmed.ok, false);
  assert.equal(unconfirmed.error.code, "confirm_required");
  assert.deepEqual(unconfirmed.error.dropped, [{ kind: "weekday", text: "Friday" }]);
  assert.equal(provider.last("accept"), undefined); // nothing was sent
  const confirmed = session.accept({ confirmDropped: true });
  assert.deepEqual(provider.last("accept"), { type: "accept", id: session.id, confirm_dropped: true });
  provider.deliver({ type: "suggestion.accepted", id: session.id });
  assert.equal((await confirmed).ok, true);
  assert.equal(session.state, "applied");
  assert.deepEqual(changes.slice(-2), ["accepting", "applied"]);
  client.destroy();
});

test("a rewrite accepted mid-stream that the server refuses for its drops becomes ready with the list", async () => {
  const provider = new FakeProvider();
  const client = new TetherAI(provider);
  const session = RewriteSession.start(client, { anchor: "AAcMAA==", anchorEnd: "AgcDAA==" }, "three ships on Friday");
  const id = session.id;
  provider.deliver({ type: "suggestion.start", id, source: "model" });
  provider.deliver({ type: "suggestion.delta", id, text: "ships" });
  const answer = session.accept();
  assert.deepEqual(provider.last("accept"), { type: "accept", id }); // no list yet: no confirm
  provider.deliver({
    type: "suggestion.end",
    id,
    reason: "cancelled",
    tokens: 0,
    dropped: [{ kind: "number", text: "three" }, { kind: "weekday", text: "Friday" }],
  });
  provider.deliver({ type: "suggestion.error", id, code: "confirm_required", message: "this rewrite drops ..." });
  const outcome = await answer;
  assert.equal(outcome.error.code, "confirm_required");
  assert.equal(outcome.error.dropped.length, 2);
  assert.equal(session.state, "ready");
  assert.equal(session.dropped.length, 2);
  assert.equal(session.canAccept, true);
  client.destroy();
});

test("the client keeps a bounded number of suggestions", () => {
  const provider = new FakeProvider();
  const client = new TetherAI(provider);
  const ids = Array.from({ length: 100 }, () => client.suggest({ pos: 0 }).id);
  assert.equal(client.get(ids[0]), undefined);
  assert.notEqual(client.get(ids[99]), undefined);
  client.destroy();
});

test("one client per provider, and a destroyed one is replaced", () => {
  const provider = new FakeProvider();
  const first = TetherAI.for(provider);
  assert.equal(TetherAI.for(provider), first);
  first.destroy();
  const second = TetherAI.for(provider);
  assert.notEqual(second, first);
  assert.equal(provider.handlers.get("stateless").size, 1);
  second.destroy();
});

test("a throwing listener does not stop the others", () => {
  const provider = new FakeProvider();
  const client = new TetherAI(provider);
  const seen = [];
  const original = console.error;
  console.error = () => {};
  try {
    client.on("status", () => {
      throw new Error("host bug");
    });
    client.on("status", (s) => seen.push(s.state));
    provider.deliver({ type: "ai.status", id: "ai-status", state: "ready", reason: "" });
  } finally {
    console.error = original;
  }
  assert.deepEqual(seen, ["ready"]);
  client.destroy();
});
