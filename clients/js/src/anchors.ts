// Cursors as tether reads them: Yjs relative positions, base64-encoded (lib0's
// `buffer.toBase64` alphabet: standard, padded). A relative position names a character, not an
// offset, so it stays right while other editors' edits cross this request on the wire.
import * as Y from "yjs";

/** Standard, padded base64 of `bytes` (as the server decodes an `anchor`). */
export function toBase64(bytes: Uint8Array): string {
  let binary = "";
  for (const byte of bytes) binary += String.fromCharCode(byte);
  return btoa(binary);
}

/** The `anchor` of a relative position. */
export function encodeAnchor(position: Y.RelativePosition): string {
  return toBase64(Y.encodeRelativePosition(position));
}

/** The `anchor` of UTF-16 offset `index` in a plain document's `Y.Text` (`content`). */
export function textAnchor(ytext: Y.Text, index: number): string {
  return encodeAnchor(Y.createRelativePositionFromTypeIndex(ytext, index));
}
