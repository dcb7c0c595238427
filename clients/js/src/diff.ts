// A word-level diff of a rewrite against its passage, for showing it: [{op, text}] where op is
// "same", "del" (in the passage, not the rewrite) or "ins" (new in the rewrite).

export interface DiffPart {
  op: "same" | "del" | "ins";
  text: string;
}

// Beyond this many cells the LCS table costs more than a rewrite's diff is worth: the middle
// is shown as one replacement.
const MAX_TABLE_CELLS = 250_000;

function tokens(text: string): string[] {
  return text.match(/\s+|[\p{L}\p{N}_'’-]+|[^\s\p{L}\p{N}_'’-]/gu) ?? [];
}

/** The passage `before` against its rewrite `after`, word by word. */
export function wordDiff(before: string, after: string): DiffPart[] {
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
  const out: DiffPart[] = [];
  const push = (op: DiffPart["op"], text: string) => {
    if (!text) return;
    const last = out[out.length - 1];
    if (last && last.op === op) last.text += text;
    else out.push({ op, text });
  };
  push("same", a.slice(0, start).join(""));
  if (midA.length * midB.length > MAX_TABLE_CELLS) {
    push("del", midA.join(""));
    push("ins", midB.join(""));
  } else {
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
