// tether's AI messages (protocol/PROTOCOL.md, "AI messages"): what an editor sends, what the
// server answers, and the one place a server message is read and checked. No I/O here: the
// client (client.ts) sends and receives; this only encodes and decodes.

/** Where a completion's text comes from (`suggestion.start`'s `source`). */
export type Source = "model" | "exact" | "typeahead" | "semantic" | "prefetch";

/** Why a suggestion ended. `junk:*`: the server's filter dropped the rest (treat like `done`). */
export type EndReason =
  | "done"
  | "cancelled"
  | "superseded"
  | "junk:empty"
  | "junk:echo"
  | "junk:loop"
  | "junk:language"
  | "junk:chat";

/** The server's error codes (`suggestion.error`'s `code`). */
export type ServerErrorCode =
  | "busy"
  | "quota"
  | "bad_request"
  | "forbidden"
  | "confirm_required"
  | "provider_error"
  | "provider_timeout"
  | "provider_unavailable"
  | "unavailable"
  | "internal";

/**
 * Every error this package reports: the server's codes, and the client's own:
 * `not_connected` (nothing was sent: the provider is not connected and synced),
 * `timeout` (no answer in time), `closed` (the client was destroyed first).
 */
export type ErrorCode = ServerErrorCode | "not_connected" | "timeout" | "closed";

/** The AI's state (`ai.status`). Only `ready` means suggestions work. */
export type AIState = "starting" | "ready" | "degraded" | "off";

/** What kind of content a rewrite loses (`suggestion.end`'s `dropped`). */
export type LossKind = "number" | "date" | "weekday" | "name" | "negation" | "clause";

/** One thing a rewrite would lose of its passage, as the passage has it. */
export interface Loss {
  kind: LossKind | "content";
  text: string;
}

/** An error as a value: never thrown. */
export interface AIError {
  code: ErrorCode;
  message: string;
  /** The suggestion it concerns, or null when the server could not read the request's id. */
  id: string | null;
  /** On `confirm_required`: what the rewrite would lose, when known. */
  dropped?: Loss[];
}

/** A result that is either a value or an {@link AIError}. */
export type Outcome<T> = { ok: true; value: T } | { ok: false; error: AIError };

export interface AIStatus {
  state: AIState;
  reason: string;
  model?: string;
  quant?: string;
}

// ---------------------------------------------------------------- client → server

/** Where a completion goes: a Yjs relative position (preferred), or a UTF-16 offset. */
export interface CompleteAt {
  /** base64 of `Y.encodeRelativePosition(...)` (see anchors.ts). */
  anchor?: string;
  /** The cursor in UTF-16 code units of the document's text. */
  pos?: number;
  /** Rich documents, with `pos`: child indexes from the fragment to a text. */
  path?: number[];
}

/** What a rewrite replaces: two relative positions, or a UTF-16 range. */
export interface RewriteOf {
  anchor?: string;
  anchorEnd?: string;
  from?: number;
  to?: number;
  path?: number[];
}

export type ClientMessage =
  | ({ type: "suggest"; id: string; kind: "complete"; max_tokens?: number } & CompleteAt)
  | {
      type: "suggest";
      id: string;
      kind: "rewrite";
      anchor?: string;
      anchor_end?: string;
      from?: number;
      to?: number;
      path?: number[];
      max_tokens?: number;
    }
  | { type: "cancel"; id: string }
  | { type: "accept"; id: string; confirm_dropped?: boolean }
  | { type: "status"; id: string };

/** The JSON text of a message, as `provider.sendStateless` takes it. */
export function encode(message: ClientMessage): string {
  return JSON.stringify(message);
}

// ---------------------------------------------------------------- server → client

export type ServerMessage =
  | { type: "suggestion.start"; id: string; source: Source | string }
  | { type: "suggestion.delta"; id: string; text: string }
  | {
      type: "suggestion.end";
      id: string;
      reason: EndReason | string;
      tokens: number;
      ttftMs: number | null;
      dropped: Loss[];
    }
  | { type: "suggestion.error"; id: string | null; code: ErrorCode | string; message: string }
  | { type: "suggestion.accepted"; id: string }
  | ({ type: "ai.status"; id: string } & AIStatus);

const STATES: ReadonlySet<string> = new Set(["starting", "ready", "degraded", "off"]);
const LOSS_KINDS: ReadonlySet<string> = new Set(["number", "date", "weekday", "name", "negation", "clause"]);
// The server sends at most 16 losses of at most 80 characters; a little slack, and a bound, since
// this comes off the wire.
const MAX_LOSSES = 32;
const MAX_LOSS_CHARS = 200;
const MAX_ID_CHARS = 128;

/** What a rewrite loses, checked and bounded: [] for anything that is not a list of losses. */
export function lossesOf(value: unknown): Loss[] {
  if (!Array.isArray(value)) return [];
  const items: Loss[] = [];
  for (const item of value.slice(0, MAX_LOSSES)) {
    if (!item || typeof item !== "object") continue;
    const { kind, text } = item as { kind?: unknown; text?: unknown };
    if (typeof text !== "string" || !text.trim()) continue;
    const known = typeof kind === "string" && LOSS_KINDS.has(kind);
    items.push({ kind: known ? (kind as LossKind) : "content", text: text.trim().slice(0, MAX_LOSS_CHARS) });
  }
  return items;
}

function str(value: unknown): string {
  return typeof value === "string" ? value : "";
}

function isId(value: unknown): value is string {
  return typeof value === "string" && value.length > 0 && value.length <= MAX_ID_CHARS * 2;
}

/**
 * A Stateless payload read as a server AI message, or null when it is not one (not JSON, an
 * unknown type, a field of the wrong type): the protocol says to ignore those.
 */
export function decode(payload: string): ServerMessage | null {
  let raw: unknown;
  try {
    raw = JSON.parse(payload);
  } catch {
    return null;
  }
  if (!raw || typeof raw !== "object" || Array.isArray(raw)) return null;
  const msg = raw as Record<string, unknown>;
  switch (msg.type) {
    case "suggestion.start":
      return isId(msg.id) ? { type: msg.type, id: msg.id, source: str(msg.source) } : null;
    case "suggestion.delta":
      return isId(msg.id) && typeof msg.text === "string" ? { type: msg.type, id: msg.id, text: msg.text } : null;
    case "suggestion.end":
      if (!isId(msg.id)) return null;
      return {
        type: msg.type,
        id: msg.id,
        reason: str(msg.reason),
        tokens: typeof msg.tokens === "number" ? msg.tokens : 0,
        ttftMs: typeof msg.ttft_ms === "number" ? msg.ttft_ms : null,
        dropped: lossesOf(msg.dropped),
      };
    case "suggestion.error":
      if (msg.id !== null && !isId(msg.id)) return null;
      return { type: msg.type, id: msg.id, code: str(msg.code), message: str(msg.message) };
    case "suggestion.accepted":
      return isId(msg.id) ? { type: msg.type, id: msg.id } : null;
    case "ai.status": {
      if (!isId(msg.id) || typeof msg.state !== "string" || !STATES.has(msg.state)) return null;
      const status: ServerMessage = { type: msg.type, id: msg.id, state: msg.state as AIState, reason: str(msg.reason) };
      if (typeof msg.model === "string") status.model = msg.model;
      if (typeof msg.quant === "string") status.quant = msg.quant;
      return status;
    }
    default:
      return null;
  }
}

/** A junk end (`junk:echo`...): the server's filter dropped the rest; like `done` otherwise. */
export function isJunk(reason: string): boolean {
  return reason.startsWith("junk:");
}
