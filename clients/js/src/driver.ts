// What both editor extensions do the same way: ask for a completion after a pause in typing
// (or when told), stream it into the editor's ghost, accept it (the server writes it, or the
// rest is typed here after a type-through), cancel a dismissed one, start rewrites, and stay
// quiet while AI is unavailable. An editor provides a GhostSurface; the host hears of what
// happened through `onEvent` and of rewrites through `onRewrite`.
import { TetherAI, type StatelessProvider, type Suggestion, type ClientOptions } from "./client.js";
import { ghostRest, type Ghost } from "./ghost.js";
import type { AIError, AIStatus, CompleteAt, RewriteOf } from "./protocol.js";
import { RewriteSession } from "./rewrite.js";

/** What the driver needs of an editor (tiptap.ts and codemirror.ts implement it). */
export interface GhostSurface {
  ghost(): Ghost | null;
  startGhost(id: string): void;
  ghostDelta(id: string, text: string): void;
  ghostEnded(id: string): void;
  /** Drop the ghost; `silent`: no `cancel` follows (accepted, superseded, ended). */
  clearGhost(silent: boolean): void;
  /** The request fields for a completion at the cursor, or null (a selection, no text there). */
  cursor(): CompleteAt | null;
  /** The selection to rewrite: where, and its text; null when nothing is selected. */
  selection(): { at: RewriteOf; old: string } | null;
  hasFocus(): boolean;
  editable(): boolean;
  /** The server is inserting `text` at the ghost's place: put the cursor after it when it lands. */
  expectAccepted(ghost: Ghost): void;
  /** Type `text` at `pos` here (the rest of a ghost partly typed by hand). */
  insertRest(pos: number, text: string): void;
}

/** What happened, for the host to show (or not). `auto`: it came from a pause in typing. */
export type SuggestionEvent =
  | { type: "asking"; id: string; auto: boolean }
  | { type: "started"; id: string; source: string; auto: boolean }
  /** The stream ended with nothing to show. */
  | { type: "empty"; id: string; auto: boolean }
  /** The server's junk filter dropped it (`kind`: echo, loop...); nothing junk was shown. */
  | { type: "junk"; id: string; kind: string; auto: boolean }
  | { type: "accepted"; id: string }
  /** An ask, a stream or an accept failed. */
  | { type: "error"; stage: "suggest" | "accept" | "rewrite"; error: AIError; auto: boolean }
  /** Asked while AI is not ready (the status says why). */
  | { type: "unavailable"; status: AIStatus; auto: boolean }
  /** A rewrite was asked with nothing selected. */
  | { type: "no-selection" };

export interface SuggestionsOptions {
  /** The document's provider (a HocuspocusProvider); or pass `client`. */
  provider?: StatelessProvider | null;
  /** The AI client to use (default: `TetherAI.for(provider)`). */
  client?: TetherAI | null;
  /** Options for the client made from `provider`. */
  clientOptions?: ClientOptions;
  /** Ask this long after typing stops; 0 never asks on its own. Default 600 ms. */
  pauseMs?: number;
  /** A completion's most tokens. Default 24. */
  maxTokens?: number;
  /** A rewrite's most tokens; default: the server's (room for the whole passage). */
  rewriteMaxTokens?: number;
  /** The host's own gate (signed in, allowed to write...): false asks nothing. */
  enabled?: () => boolean;
  onEvent?: (event: SuggestionEvent) => void;
  /** A rewrite started or changed (streamed text, its end, what it drops, accepted, closed). */
  onRewrite?: (session: RewriteSession) => void;
}

export const DEFAULT_PAUSE_MS = 600;
export const DEFAULT_MAX_TOKENS = 24;

export class SuggestionDriver {
  readonly client: TetherAI;
  /** The rewrite under review, if any. */
  rewriteSession: RewriteSession | null = null;
  private pauseTimer: ReturnType<typeof setTimeout> | null = null;
  /** Ids accepted by Tab: their errors are the accept's answer, reported there. */
  private readonly accepting = new Set<string>();
  private readonly stopStatus: () => void;
  private destroyed = false;

  constructor(
    private readonly surface: GhostSurface,
    private readonly options: SuggestionsOptions,
  ) {
    const client = options.client ?? (options.provider ? TetherAI.for(options.provider, options.clientOptions) : null);
    if (!client) throw new TypeError("tether-client: give the extension a `provider` or a `client`");
    this.client = client;
    // AI gone: a ghost that shows nothing yet never will.
    this.stopStatus = client.on("status", () => {
      if (client.available) return;
      const ghost = surface.ghost();
      if (ghost && !ghost.received) surface.clearGhost(true);
    });
  }

  /** The editor changed by the writer's hand: ask again after the pause. */
  typed(): void {
    this.clearPause();
    const pause = this.options.pauseMs ?? DEFAULT_PAUSE_MS;
    if (pause <= 0 || this.surface.ghost()) return; // typing into the ghost keeps it
    this.pauseTimer = setTimeout(() => {
      this.pauseTimer = null;
      if (!this.surface.ghost()) this.request({ auto: true });
    }, pause);
  }

  /** Ask for a completion at the cursor now (`auto`: because typing paused). */
  request({ auto = false }: { auto?: boolean } = {}): Suggestion | null {
    if (this.destroyed || !this.usable()) return null;
    if (!this.client.available) {
      if (!auto && this.client.status) this.event({ type: "unavailable", status: this.client.status, auto });
      return null;
    }
    if (auto && (this.rewriteSession || !this.surface.hasFocus())) return null;
    const at = this.surface.cursor();
    if (!at) return null;
    const maxTokens = this.options.maxTokens ?? DEFAULT_MAX_TOKENS;
    const suggestion = this.client.suggest({ ...at, maxTokens });
    if (suggestion.error) {
      // Not sent (not connected): positions need the server in sync.
      this.event({ type: "error", stage: "suggest", error: suggestion.error, auto });
      return null;
    }
    const id = suggestion.id;
    this.surface.startGhost(id);
    this.follow(suggestion, auto);
    this.event({ type: "asking", id, auto });
    return suggestion;
  }

  /** Tab on a ghost with text to show: accept it. True when there was one. */
  accept(): boolean {
    const ghost = this.surface.ghost();
    if (!ghost || !ghostRest(ghost)) return false;
    const rest = ghostRest(ghost);
    if (!ghost.consumed) {
      // The server inserts it (with the marks typing there would carry); everyone, us
      // included, sees it through sync.
      this.surface.expectAccepted(ghost);
      this.surface.clearGhost(true);
      this.accepting.add(ghost.id);
      void this.client.accept(ghost.id).then((outcome) => {
        this.accepting.delete(ghost.id);
        if (outcome.ok) this.event({ type: "accepted", id: ghost.id });
        else this.event({ type: "error", stage: "accept", error: outcome.error, auto: false });
      });
    } else {
      // Part of it was typed by hand: the server would insert all of it at the first cursor,
      // so the rest is typed here (it syncs like any edit) and the stream stopped.
      if (ghost.streaming) this.client.cancel(ghost.id);
      this.surface.clearGhost(true);
      this.surface.insertRest(ghost.pos, rest);
    }
    return true;
  }

  /** Esc: drop the ghost (a streaming one is cancelled). True when there was one. */
  dismiss(): boolean {
    if (!this.surface.ghost()) return false;
    this.surface.clearGhost(false);
    return true;
  }

  /** The editor dropped a streaming ghost (Esc, typing elsewhere, moving away): stop it. */
  dropped(ghost: Ghost): void {
    this.client.cancel(ghost.id);
  }

  /** Rewrite the selection: the session goes to `onRewrite` as it changes. */
  rewrite(): RewriteSession | null {
    if (this.destroyed || !this.usable()) return null;
    if (!this.client.available) {
      if (this.client.status) this.event({ type: "unavailable", status: this.client.status, auto: false });
      return null;
    }
    const selected = this.surface.selection();
    if (!selected) {
      this.event({ type: "no-selection" });
      return null;
    }
    this.rewriteSession?.reject();
    this.surface.clearGhost(true); // superseded by this request on the server
    const session = RewriteSession.start(this.client, selected.at, selected.old, this.options.rewriteMaxTokens);
    this.rewriteSession = session;
    session.on("change", () => {
      if (session.state === "closed" || session.state === "applied") {
        if (this.rewriteSession === session) this.rewriteSession = null;
      }
      if (session.error && session.state === "error" && session.error.code !== "confirm_required") {
        this.event({ type: "error", stage: "rewrite", error: session.error, auto: false });
      }
      this.options.onRewrite?.(session);
    });
    this.options.onRewrite?.(session);
    return session;
  }

  destroy(): void {
    this.destroyed = true;
    this.clearPause();
    this.stopStatus();
    this.rewriteSession?.reject();
  }

  private usable(): boolean {
    const enabled = this.options.enabled ? this.options.enabled() : true;
    return enabled && this.client.writable && this.surface.editable();
  }

  private follow(suggestion: Suggestion, auto: boolean): void {
    const id = suggestion.id;
    const mine = () => this.surface.ghost()?.id === id;
    suggestion.on("start", ({ source }) => this.event({ type: "started", id, source, auto }));
    suggestion.on("delta", ({ text }) => {
      if (text && mine()) this.surface.ghostDelta(id, text);
    });
    suggestion.on("end", (end) => {
      const junk = suggestion.junk;
      // Junk ends like "done": what came before it (if anything) was clean.
      if (junk) this.event({ type: "junk", id, kind: end.reason.slice(5), auto });
      if (!mine()) return;
      const ghost = this.surface.ghost();
      if (end.reason !== "done" && !junk && !ghost?.consumed) {
        // Cancelled by an edit at the cursor, or superseded: the server cannot accept it now.
        this.surface.clearGhost(true);
      } else {
        this.surface.ghostEnded(id);
        if (!end.text && end.reason === "done") this.event({ type: "empty", id, auto });
      }
    });
    suggestion.on("error", (error) => {
      if (this.accepting.has(id)) return; // the accept's answer: reported by accept()
      if (mine()) this.surface.clearGhost(true);
      this.event({ type: "error", stage: "suggest", error, auto });
    });
  }

  private clearPause(): void {
    if (this.pauseTimer !== null) clearTimeout(this.pauseTimer);
    this.pauseTimer = null;
  }

  private event(event: SuggestionEvent): void {
    try {
      this.options.onEvent?.(event);
    } catch (error) {
      console.error("tether-client: onEvent failed", error);
    }
  }
}
