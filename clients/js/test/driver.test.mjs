import assert from "node:assert/strict";
import { test } from "node:test";
import { SuggestionDriver, TetherAI, ghostRest } from "../dist/index.js";
import { FakeProvider } from "./fake_provider.mjs";

/** An editor in memory: a text, a cursor and a ghost, with the rules the extensions follow. */
class MemorySurface {
  constructor(text = "") {
    this.text = text;
    this.cursorAt = text.length;
    this.current = null;
    this.focused = true;
    this.canEdit = true;
    this.expected = [];
  }
  ghost() {
    return this.current;
  }
  startGhost(id) {
    this.current = { id, pos: this.cursorAt, received: "", consumed: "", streaming: true };
  }
  ghostDelta(id, text) {
    if (this.current?.id === id) this.current = { ...this.current, received: this.current.received + text };
  }
  ghostEnded(id) {
    if (this.current?.id === id) this.current = { ...this.current, streaming: false };
  }
  clearGhost(silent) {
    const dropped = this.current;
    this.current = null;
    if (dropped?.streaming && !silent) this.onDropped?.(dropped);
  }
  cursor() {
    return { pos: this.cursorAt };
  }
  selection() {
    return this.selected ?? null;
  }
  hasFocus() {
    return this.focused;
  }
  editable() {
    return this.canEdit;
  }
  expectAccepted(ghost) {
    this.expected.push(ghost.received);
  }
  insertRest(pos, text) {
    this.text = this.text.slice(0, pos) + text + this.text.slice(pos);
    this.cursorAt = pos + text.length;
  }
}

function setup(options = {}) {
  const provider = new FakeProvider();
  const client = new TetherAI(provider);
  const surface = new MemorySurface("The boats came home");
  const events = [];
  const driver = new SuggestionDriver(surface, { client, onEvent: (e) => events.push(e), ...options });
  surface.onDropped = (ghost) => driver.dropped(ghost);
  return { provider, client, surface, driver, events };
}

function stream(provider, id, pieces, reason = "done") {
  provider.deliver({ type: "suggestion.start", id, source: "model" });
  for (const text of pieces) provider.deliver({ type: "suggestion.delta", id, text });
  if (reason) provider.deliver({ type: "suggestion.end", id, reason, tokens: pieces.length });
}

test("a pause in typing asks once at the cursor; typing again restarts the wait", async () => {
  const { provider, driver, surface } = setup({ pauseMs: 30 });
  driver.typed();
  driver.typed();
  await new Promise((resolve) => setTimeout(resolve, 80));
  const asks = provider.sent.filter((m) => m.type === "suggest");
  assert.equal(asks.length, 1);
  assert.deepEqual(asks[0], { type: "suggest", id: asks[0].id, kind: "complete", pos: 19, max_tokens: 24 });
  assert.equal(surface.ghost().id, asks[0].id);
  driver.destroy();
});

test("no ask on a pause when the editor has no focus, is read-only, or the host says no", async () => {
  for (const change of [
    (s) => (s.surface.focused = false),
    (s) => (s.surface.canEdit = false),
    (s) => (s.allowed = false),
  ]) {
    const state = { allowed: true };
    Object.assign(state, setup({ pauseMs: 5, enabled: () => state.allowed }));
    change(state);
    state.driver.typed();
    await new Promise((resolve) => setTimeout(resolve, 30));
    assert.equal(state.provider.sent.filter((m) => m.type === "suggest").length, 0);
    state.driver.destroy();
  }
});

test("Tab on a streamed ghost sends accept and clears it; the server writes the text", async () => {
  const { provider, driver, surface, events } = setup();
  const suggestion = driver.request();
  stream(provider, suggestion.id, [" and", " the gulls cried."]);
  assert.equal(ghostRest(surface.ghost()), " and the gulls cried.");
  assert.equal(driver.accept(), true);
  assert.deepEqual(provider.last("accept"), { type: "accept", id: suggestion.id });
  assert.equal(surface.ghost(), null);
  assert.deepEqual(surface.expected, [" and the gulls cried."]);
  provider.deliver({ type: "suggestion.accepted", id: suggestion.id });
  await new Promise((resolve) => setImmediate(resolve));
  assert.deepEqual(events.at(-1), { type: "accepted", id: suggestion.id });
  assert.equal(driver.accept(), false); // nothing left to accept
  driver.destroy();
});

test("after a type-through Tab types the rest here and stops the stream", () => {
  const { provider, driver, surface } = setup();
  const suggestion = driver.request();
  stream(provider, suggestion.id, [" and", " the gulls"], null); // still streaming
  surface.current = { ...surface.current, consumed: " and", pos: surface.current.pos + 4 };
  surface.text += " and";
  driver.accept();
  assert.equal(surface.text, "The boats came home and the gulls");
  assert.deepEqual(provider.last("cancel"), { type: "cancel", id: suggestion.id });
  assert.equal(provider.last("accept"), undefined);
  driver.destroy();
});

test("Esc on a streaming ghost cancels it on the server", () => {
  const { provider, driver, surface } = setup();
  const suggestion = driver.request();
  stream(provider, suggestion.id, [" and"], null);
  assert.equal(driver.dismiss(), true);
  assert.equal(surface.ghost(), null);
  assert.deepEqual(provider.last("cancel"), { type: "cancel", id: suggestion.id });
  assert.equal(driver.dismiss(), false);
  driver.destroy();
});

test("a cancelled or superseded stream clears its ghost; a junk end keeps what came and says so", () => {
  const { provider, driver, surface, events } = setup();
  const first = driver.request();
  stream(provider, first.id, [" and"], "cancelled");
  assert.equal(surface.ghost(), null);
  const second = driver.request();
  stream(provider, second.id, [" the"], "junk:loop");
  assert.equal(ghostRest(surface.ghost()), " the");
  assert.deepEqual(events.find((e) => e.type === "junk"), { type: "junk", id: second.id, kind: "loop", auto: false });
  driver.destroy();
});

test("while AI is not ready nothing is asked, and a manual ask hears why", () => {
  const { provider, driver, events } = setup();
  provider.deliver({ type: "ai.status", id: "ai-status", state: "starting", reason: "loading the model" });
  assert.equal(driver.request({ auto: false }), null);
  assert.equal(provider.sent.filter((m) => m.type === "suggest").length, 0);
  assert.deepEqual(events.at(-1), {
    type: "unavailable",
    status: { state: "starting", reason: "loading the model" },
    auto: false,
  });
  driver.destroy();
});

test("AI going away clears a ghost that shows nothing yet", () => {
  const { provider, driver, surface } = setup();
  driver.request();
  provider.deliver({ type: "ai.status", id: "ai-status", state: "degraded", reason: "crash loop" });
  assert.equal(surface.ghost(), null);
  driver.destroy();
});

test("a rewrite of the selection reaches onRewrite as it streams, and a new one replaces it", () => {
  const sessions = [];
  const { provider, driver, surface } = setup({ onRewrite: (s) => sessions.push([s.id, s.state, s.text]) });
  surface.selected = null;
  assert.equal(driver.rewrite(), null);
  surface.selected = { at: { from: 4, to: 9 }, old: "boats" };
  const session = driver.rewrite();
  stream(provider, session.id, ["ships"]);
  assert.deepEqual(sessions.at(-1), [session.id, "ready", "ships"]);
  assert.deepEqual(session.diff(), [
    { op: "del", text: "boats" },
    { op: "ins", text: "ships" },
  ]);
  const next = driver.rewrite();
  assert.equal(session.state, "closed");
  assert.equal(driver.rewriteSession, next);
  driver.destroy();
});
