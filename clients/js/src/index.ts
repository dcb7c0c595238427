// tether-client: tether's AI messages for your own editor. The client (TetherAI) works over
// any HocuspocusProvider; the editor extensions are in "tether-client/tiptap" and
// "tether-client/codemirror".
export { TetherAI, Suggestion } from "./client.js";
export type {
  AcceptOptions,
  ClientEvents,
  ClientOptions,
  CompleteRequest,
  RewriteRequest,
  StatelessProvider,
  SuggestionEnd,
  SuggestionEvents,
  SuggestionState,
} from "./client.js";
export { decode, encode, isJunk, lossesOf } from "./protocol.js";
export type {
  AIError,
  AIState,
  AIStatus,
  ClientMessage,
  CompleteAt,
  EndReason,
  ErrorCode,
  Loss,
  LossKind,
  Outcome,
  RewriteOf,
  ServerErrorCode,
  ServerMessage,
  Source,
} from "./protocol.js";
export { RewriteSession } from "./rewrite.js";
export type { RewriteEvents, RewriteState } from "./rewrite.js";
export { wordDiff } from "./diff.js";
export type { DiffPart } from "./diff.js";
export { ghostRest, typedThrough } from "./ghost.js";
export type { Ghost } from "./ghost.js";
export { encodeAnchor, textAnchor, toBase64 } from "./anchors.js";
export { DEFAULT_MAX_TOKENS, DEFAULT_PAUSE_MS, SuggestionDriver } from "./driver.js";
export type { GhostSurface, SuggestionEvent, SuggestionsOptions } from "./driver.js";
export { Emitter } from "./emitter.js";
export type { Listener } from "./emitter.js";
