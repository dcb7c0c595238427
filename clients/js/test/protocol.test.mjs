import assert from "node:assert/strict";
import { test } from "node:test";
import { decode, encode, lossesOf, wordDiff, typedThrough, ghostRest, textAnchor } from "../dist/index.js";
import * as Y from "yjs";

test("every server message decodes to its typed form, ttft_ms as ttftMs", () => {
  assert.deepEqual(decode('{"type":"suggestion.start","id":"s1","source":"model"}'), {
    type: "suggestion.start",
    id: "s1",
    source: "model",
  });
  assert.deepEqual(decode('{"type":"suggestion.delta","id":"s1","text":" wörld 😀"}'), {
    type: "suggestion.delta",
    id: "s1",
    text: " wörld 😀",
  });
  assert.deepEqual(
    decode(
      '{"type":"suggestion.end","id":"s2","reason":"done","ttft_ms":212.5,"tokens":9,' +
        '"dropped":[{"kind":"clause","text":"decide ship it friday"},{"kind":"weekday","text":"friday"}]}',
    ),
    {
      type: "suggestion.end",
      id: "s2",
      reason: "done",
      tokens: 9,
      ttftMs: 212.5,
      dropped: [
        { kind: "clause", text: "decide ship it friday" },
        { kind: "weekday", text: "friday" },
      ],
    },
  );
  assert.deepEqual(decode('{"type":"suggestion.error","id":null,"code":"bad_request","message":"payload is not JSON"}'), {
    type: "suggestion.error",
    id: null,
    code: "bad_request",
    message: "payload is not JSON",
  });
  assert.deepEqual(decode('{"type":"suggestion.accepted","id":"s1"}'), { type: "suggestion.accepted", id: "s1" });
  assert.deepEqual(
    decode('{"type":"ai.status","id":"st","state":"ready","reason":"","model":"m.gguf","quant":"Q4_0"}'),
    { type: "ai.status", id: "st", state: "ready", reason: "", model: "m.gguf", quant: "Q4_0" },
  );
});

test("payloads that are not AI messages decode to null and are ignored", () => {
  for (const payload of [
    "hello?",
    "[]",
    "null",
    '{"type":"suggestion.delta","id":"s1"}',
    '{"type":"suggestion.delta","id":"","text":"x"}',
    '{"type":"suggestion.start","id":5}',
    '{"type":"ai.status","id":"st","state":"sleepy","reason":""}',
    '{"type":"something.new","id":"s1"}',
    '{"id":"s1"}',
  ]) {
    assert.equal(decode(payload), null, payload);
  }
});

test("a dropped list off the wire is checked and bounded", () => {
  const many = Array.from({ length: 100 }, (_, i) => ({ kind: "number", text: String(i) }));
  assert.equal(lossesOf(many).length, 32);
  assert.deepEqual(lossesOf([{ kind: "planet", text: " Mars " }, { kind: "name" }, "x", null, { text: "y".repeat(500) }]), [
    { kind: "content", text: "Mars" },
    { kind: "content", text: "y".repeat(200) },
  ]);
  assert.deepEqual(lossesOf("not a list"), []);
});

test("requests encode as the protocol writes them", () => {
  assert.equal(
    encode({ type: "suggest", id: "s1", kind: "complete", pos: 5, max_tokens: 8 }),
    '{"type":"suggest","id":"s1","kind":"complete","pos":5,"max_tokens":8}',
  );
  assert.equal(encode({ type: "accept", id: "s2", confirm_dropped: true }), '{"type":"accept","id":"s2","confirm_dropped":true}');
});

test("the word diff keeps common words and marks the changed ones", () => {
  assert.deepEqual(wordDiff("We ship it on Friday.", "We ship it soon."), [
    { op: "same", text: "We ship it " },
    { op: "del", text: "on Friday" },
    { op: "ins", text: "soon" },
    { op: "same", text: "." },
  ]);
  assert.deepEqual(wordDiff("", "new words"), [{ op: "ins", text: "new words" }]);
});

test("the word diff of two long unrelated passages is one replacement, not a huge table", () => {
  const before = Array.from({ length: 2000 }, (_, i) => `a${i}`).join(" ");
  const after = Array.from({ length: 2000 }, (_, i) => `b${i}`).join(" ");
  const parts = wordDiff(before, after);
  assert.deepEqual(
    parts.map((p) => p.op),
    ["del", "ins"],
  );
});

test("typing a ghost's next characters keeps its rest; anything else drops it", () => {
  const ghost = { id: "g1", pos: 10, received: " and the gulls", consumed: "", streaming: true };
  const typed = typedThrough(ghost, " and");
  assert.equal(ghostRest(typed), " the gulls");
  assert.equal(typed.pos, 14);
  assert.equal(typedThrough(typed, " x"), null);
  assert.equal(typedThrough(ghost, " and the gulls"), null); // all of it typed: nothing left
});

test("a text anchor is the base64 of a Yjs relative position in that text", () => {
  const doc = new Y.Doc();
  const text = doc.getText("content");
  text.insert(0, "Hello");
  const anchor = textAnchor(text, 4);
  const decoded = Y.decodeRelativePosition(Uint8Array.from(Buffer.from(anchor, "base64")));
  assert.equal(Y.createAbsolutePositionFromRelativePosition(decoded, doc).index, 4);
});
