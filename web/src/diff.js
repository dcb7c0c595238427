// A small word-level diff for the rewrite panel: [{op: "same"|"del"|"ins", text}].

function tokens(text) {
  return text.match(/\s+|[\p{L}\p{N}_'’-]+|[^\s\p{L}\p{N}_'’-]/gu) || [];
}

export function wordDiff(before, after) {
  const a = tokens(before);
  const b = tokens(after);
  // Trim the common ends first: rewrites usually keep most of the passage.
  let start = 0;
  while (start < a.length && start < b.length && a[start] === b[start]) start++;
  let endA = a.length;
  let endB = b.length;
  while (endA > start && endB > start && a[endA - 1] === b[endB - 1]) {
    endA--;
    endB--;
  }
  const midA = a.slice(start, endA);
  const midB = b.slice(start, endB);
  const out = [];
  const push = (op, text) => {
    if (!text) return;
    const last = out[out.length - 1];
    if (last && last.op === op) last.text += text;
    else out.push({ op, text });
  };
  push("same", a.slice(0, start).join(""));
  if (midA.length * midB.length > 250000) {
    // Too big for the table: show it as one replacement.
    push("del", midA.join(""));
    push("ins", midB.join(""));
  } else {
    // LCS table over the middle.
    const n = midA.length;
    const m = midB.length;
    const lcs = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
    for (let i = n - 1; i >= 0; i--) {
      for (let j = m - 1; j >= 0; j--) {
        lcs[i][j] = midA[i] === midB[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
      }
    }
    let i = 0;
    let j = 0;
    while (i < n && j < m) {
      if (midA[i] === midB[j]) {
        push("same", midA[i]);
        i++;
        j++;
      } else if (lcs[i + 1][j] >= lcs[i][j + 1]) {
        push("del", midA[i++]);
      } else {
        push("ins", midB[j++]);
      }
    }
    while (i < n) push("del", midA[i++]);
    while (j < m) push("ins", midB[j++]);
  }
  push("same", a.slice(endA).join(""));
  return out;
}

// What a rewrite would lose that the original had (`suggestion.end`'s `dropped`, see
// protocol/PROTOCOL.md): [{kind, text}], checked and bounded, since it comes off the wire.
const DROPPED_KINDS = new Set(["number", "date", "weekday", "name", "negation", "clause"]);
const MAX_DROPPED = 32;
const MAX_DROPPED_CHARS = 200;

export function droppedItems(value) {
  if (!Array.isArray(value)) return [];
  const items = [];
  for (const item of value.slice(0, MAX_DROPPED)) {
    if (!item || typeof item !== "object" || typeof item.text !== "string" || !item.text.trim()) continue;
    const kind = DROPPED_KINDS.has(item.kind) ? item.kind : "content";
    items.push({ kind, text: item.text.trim().slice(0, MAX_DROPPED_CHARS) });
  }
  return items;
}
