// Ghost text, whatever the editor: a completion drawn after the cursor until Tab takes it or
// Esc / other typing / moving away drops it. Typing the ghost's own next characters keeps the
// rest. These are the rules; tiptap.ts and codemirror.ts keep the state in their editor's.

/** A ghost in an editor's state. */
export interface Ghost {
  id: string;
  /** Where the rest is drawn: the cursor, mapped through edits. */
  pos: number;
  /** Everything the server streamed for this id so far. */
  received: string;
  /** What the writer has typed of it since (`received.startsWith(consumed)`). */
  consumed: string;
  streaming: boolean;
}

/** The part of the ghost still to show (and that Tab takes). */
export function ghostRest(ghost: Ghost | null | undefined): string {
  return ghost ? ghost.received.slice(ghost.consumed.length) : "";
}

export function newGhost(id: string, pos: number): Ghost {
  return { id, pos, received: "", consumed: "", streaming: true };
}

/**
 * The ghost after the writer typed `inserted` at it: kept (with the typed part consumed) while
 * what is typed is a strict prefix of what has arrived, else null (dropped). Typing at the
 * cursor also makes the server stop the stream, so nothing more will come.
 */
export function typedThrough(ghost: Ghost, inserted: string): Ghost | null {
  if (!inserted) return null;
  const consumed = ghost.consumed + inserted;
  if (!ghost.received.startsWith(consumed) || consumed.length >= ghost.received.length) return null;
  return { ...ghost, consumed, pos: ghost.pos + inserted.length };
}

/** The ghost after more streamed text (only for its own id). */
export function withDelta(ghost: Ghost, id: string, text: string): Ghost {
  return id === ghost.id ? { ...ghost, received: ghost.received + text } : ghost;
}

/** The ghost once its stream is over: gone if everything was typed through already. */
export function ended(ghost: Ghost, id: string): Ghost | null {
  if (id !== ghost.id) return ghost;
  const done = { ...ghost, streaming: false };
  return done.consumed.length >= done.received.length ? null : done;
}
