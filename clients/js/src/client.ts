// The AI client: tether's AI messages over a provider's Stateless channel (any
// HocuspocusProvider, whatever socket it runs on). It sends suggest / rewrite / accept /
// cancel / status, routes every answer to its Suggestion by id, follows ai.status, and reports
// every failure as an AIError value. It knows nothing of editors (tiptap.ts, codemirror.ts).
import { Emitter } from "./emitter.js";
import {
  decode,
  encode,
  isJunk,
  type AIError,
  type AIStatus,
  type ClientMessage,
  type CompleteAt,
  type ErrorCode,
  type Loss,
  type Outcome,
  type RewriteOf,
  type ServerMessage,
} from "./protocol.js";

/**
 * What the client needs of a provider: HocuspocusProvider (3.x, 4.x) has all of it. `on`/`off`
 * are used for `stateless` ({payload}) and, when the provider emits it, `authenticated`.
 */
export interface StatelessProvider {
  sendStateless(payload: string): void;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  on(event: string, listener: (...args: any[]) => void): unknown;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  off(event: string, listener: (...args: any[]) => void): unknown;
  /** False while the first sync is not done (positions would not mean the same text). */
  isSynced?: boolean;
  isAuthenticated?: boolean;
  /** "read-write" | "readonly" once authenticated. */
  authorizedScope?: string;
  configuration?: { websocketProvider?: { status?: string } };
  /** Hocuspocus 4 with `flushDelay` buffers document updates: sent before a request, so the
   * server has the text its positions name. */
  flushPendingUpdates?: () => void;
}

export interface ClientOptions {
  /** Follow ai.status from the start and after every (re)authentication. Default true. */
  watchStatus?: boolean;
  /** The id of the status subscription. Default "ai-status". */
  statusId?: string;
  /** A suggestion with no answer at all this long fails with `timeout`. Default 15000 ms. */
  answerTimeoutMs?: number;
  /** An accept with no answer this long resolves with `timeout`. Default 15000 ms. */
  acceptTimeoutMs?: number;
}

export interface CompleteRequest extends CompleteAt {
  /** The most model tokens to generate (1..1024); absent: the server's default. */
  maxTokens?: number;
  /** Your own id (1..128 characters); default: a fresh one. */
  id?: string;
}

export interface RewriteRequest extends RewriteOf {
  maxTokens?: number;
  id?: string;
}

export interface AcceptOptions {
  /** The writer has been shown what the rewrite drops (its `dropped`): apply it anyway. */
  confirmDropped?: boolean;
}

export type SuggestionState =
  | "waiting" // sent, no answer yet
  | "streaming" // started; text arriving
  | "ended" // the stream is over (see `reason`); acceptable if it has text
  | "failed" // suggestion.error (see `error`)
  | "accepting" // accept sent
  | "accepted"; // applied and stored by the server

/** How a suggestion's stream ended. */
export interface SuggestionEnd {
  text: string;
  /** done, cancelled, superseded, junk:<kind>, or "accepted" (accepted while streaming). */
  reason: string;
  tokens: number;
  ttftMs: number | null;
  dropped: Loss[];
  source: string | null;
}

export interface SuggestionEvents {
  start: { source: string };
  delta: { text: string };
  end: SuggestionEnd;
  error: AIError;
  accepted: undefined;
  /** Any of the above, and the state changes they make. */
  change: Suggestion;
}

/** One suggestion (a completion or a rewrite) and what the server has said of it. */
export class Suggestion extends Emitter<SuggestionEvents> {
  /** Everything streamed so far: the text `accept` inserts (or the rewrite's replacement). */
  text = "";
  state: SuggestionState = "waiting";
  source: string | null = null;
  reason: string | null = null;
  /** What a rewrite would lose of its passage (from its end, or a `confirm_required`). */
  dropped: Loss[] = [];
  error: AIError | null = null;
  tokens = 0;
  ttftMs: number | null = null;
  /** Resolves once the stream is over: its end, or the error that stopped it. */
  readonly result: Promise<Outcome<SuggestionEnd>>;
  private settle!: (outcome: Outcome<SuggestionEnd>) => void;

  constructor(
    private readonly client: TetherAI,
    readonly id: string,
    readonly kind: "complete" | "rewrite",
  ) {
    super();
    this.result = new Promise((resolve) => (this.settle = resolve));
  }

  /** True until the stream is over (waiting or streaming). */
  get streaming(): boolean {
    return this.state === "waiting" || this.state === "streaming";
  }

  /** A junk end (`junk:*`): nothing more is coming; what came before is clean. */
  get junk(): boolean {
    return this.reason !== null && isJunk(this.reason);
  }

  accept(options: AcceptOptions = {}): Promise<Outcome<undefined>> {
    return this.client.accept(this.id, options);
  }

  /** Stop it if still streaming (the server answers `cancelled`); else nothing to do. */
  cancel(): void {
    this.client.cancel(this.id);
  }

  /** @internal */
  handle(msg: ServerMessage): void {
    switch (msg.type) {
      case "suggestion.start":
        this.source = msg.source;
        if (this.state === "waiting") this.state = "streaming";
        this.emit("start", { source: msg.source });
        break;
      case "suggestion.delta":
        if (!this.streaming && this.state !== "accepting") return;
        if (this.state === "waiting") this.state = "streaming";
        this.text += msg.text;
        this.emit("delta", { text: msg.text });
        break;
      case "suggestion.end":
        this.reason = msg.reason;
        this.tokens = msg.tokens;
        this.ttftMs = msg.ttftMs;
        if (msg.dropped.length) this.dropped = msg.dropped;
        if (this.state !== "accepting") this.state = "ended";
        this.emit("end", this.summary(msg.reason));
        this.settle({ ok: true, value: this.summary(msg.reason) });
        break;
      case "suggestion.error":
        if (this.state === "failed") return; // over already (e.g. the answer to our cancel)
        if (msg.code === "confirm_required" && this.dropped.length === 0) {
          this.dropped = this.client.pendingDropped(this.id);
        }
        this.fail(errorOf(msg.code, msg.message, this.id, this.dropped));
        return;
      case "suggestion.accepted":
        this.state = "accepted";
        this.emit("accepted", undefined);
        this.settle({ ok: true, value: this.summary(this.reason ?? "accepted") });
        break;
      default:
        return;
    }
    this.emit("change", this);
  }

  /** @internal An error for this suggestion: from the server, or the client's own. */
  fail(error: AIError): void {
    // A refused accept (context changed, confirm_required...) leaves the suggestion as it was:
    // a rewrite refused for confirmation can be accepted again.
    if (this.state === "accepting") {
      this.state = this.reason === null ? "streaming" : "ended";
    } else {
      this.state = "failed";
    }
    this.error = error;
    this.emit("error", error);
    this.settle({ ok: false, error });
    this.emit("change", this);
  }

  /** @internal */
  markAccepting(): void {
    if (this.state !== "accepted") this.state = "accepting";
    this.emit("change", this);
  }

  private summary(reason: string): SuggestionEnd {
    return {
      text: this.text,
      reason,
      tokens: this.tokens,
      ttftMs: this.ttftMs,
      dropped: this.dropped,
      source: this.source,
    };
  }
}

export interface ClientEvents {
  /** Every AI message the server sent on this document, decoded. */
  message: ServerMessage;
  /** ai.status changed (or the client learnt AI is unavailable from an error). */
  status: AIStatus;
  /** A server error no suggestion of this client owns (a request it could not read). */
  error: AIError;
}

function errorOf(code: string, message: string, id: string | null, dropped: Loss[] = []): AIError {
  const error: AIError = { code: code as ErrorCode, message: message || code, id };
  if (code === "confirm_required" && dropped.length) error.dropped = dropped;
  return error;
}

// The server remembers an editor's 16 latest suggestions; a little more here, and a bound.
const KEPT_SUGGESTIONS = 32;
const NOT_CONNECTED = "not connected: suggestions need the server";
const clients = new WeakMap<StatelessProvider, TetherAI>();

/**
 * tether's AI over one provider (one document). Create it with `TetherAI.for(provider)` so
 * the page and the editor extensions share one client (one status watch, one id space).
 */
export class TetherAI extends Emitter<ClientEvents> {
  /** What the server last said of its AI; null until it says (an old server never does). */
  status: AIStatus | null = null;
  private readonly suggestions = new Map<string, Suggestion>();
  private readonly accepts = new Map<string, (outcome: Outcome<undefined>) => void>();
  private readonly options: Required<ClientOptions>;
  private counter = 0;
  private destroyed = false;
  private readonly onStateless = ({ payload }: { payload: string }) => this.receive(payload);
  private readonly onAuthenticated = () => {
    if (this.options.watchStatus) this.watchStatus();
  };

  /** The one client of `provider` (made on first use with `options`). */
  static for(provider: StatelessProvider, options: ClientOptions = {}): TetherAI {
    let client = clients.get(provider);
    if (!client || client.destroyed) {
      client = new TetherAI(provider, options);
      clients.set(provider, client);
    }
    return client;
  }

  constructor(
    readonly provider: StatelessProvider,
    options: ClientOptions = {},
  ) {
    super();
    this.options = {
      watchStatus: options.watchStatus ?? true,
      statusId: options.statusId ?? "ai-status",
      answerTimeoutMs: options.answerTimeoutMs ?? 15000,
      acceptTimeoutMs: options.acceptTimeoutMs ?? 15000,
    };
    provider.on("stateless", this.onStateless);
    provider.on("authenticated", this.onAuthenticated);
    if (this.options.watchStatus && provider.isAuthenticated) this.watchStatus();
  }

  /** True unless the server said its AI is not `ready` (null status: assumed available). */
  get available(): boolean {
    return this.status === null || this.status.state === "ready";
  }

  /** Connected and synced: positions mean the same text here and on the server. */
  get connected(): boolean {
    const socket = this.provider.configuration?.websocketProvider?.status;
    return this.provider.isSynced !== false && (socket === undefined || socket === "connected");
  }

  /** False once the server granted only `readonly` (no suggestions for readers). */
  get writable(): boolean {
    return this.provider.authorizedScope !== "readonly";
  }

  /** Ask for the AI's state, and every change of it (the `status` event). */
  watchStatus(): void {
    this.send({ type: "status", id: this.options.statusId });
  }

  /** Ask for a completion at a cursor. Failures arrive on the suggestion, never thrown. */
  suggest(request: CompleteRequest): Suggestion {
    const id = request.id ?? this.newId("g");
    const message: ClientMessage = { type: "suggest", id, kind: "complete" };
    if (request.anchor !== undefined) message.anchor = request.anchor;
    if (request.pos !== undefined) message.pos = request.pos;
    if (request.path !== undefined) message.path = request.path;
    if (request.maxTokens !== undefined) message.max_tokens = request.maxTokens;
    return this.start(new Suggestion(this, id, "complete"), message);
  }

  /** Ask for a rewrite of a passage (two anchors, or from/to). */
  rewrite(request: RewriteRequest): Suggestion {
    const id = request.id ?? this.newId("r");
    const message: ClientMessage = { type: "suggest", id, kind: "rewrite" };
    if (request.anchor !== undefined) message.anchor = request.anchor;
    if (request.anchorEnd !== undefined) message.anchor_end = request.anchorEnd;
    if (request.from !== undefined) message.from = request.from;
    if (request.to !== undefined) message.to = request.to;
    if (request.path !== undefined) message.path = request.path;
    if (request.maxTokens !== undefined) message.max_tokens = request.maxTokens;
    return this.start(new Suggestion(this, id, "rewrite"), message);
  }

  /**
   * Apply suggestion `id` (the server writes it into the document; everyone sees it through
   * sync). A rewrite whose end carried `dropped` needs `confirmDropped: true`, which says the
   * writer was shown what it loses; without it the answer is a `confirm_required` error.
   */
  accept(id: string, options: AcceptOptions = {}): Promise<Outcome<undefined>> {
    const suggestion = this.suggestions.get(id);
    const message: ClientMessage = { type: "accept", id };
    if (options.confirmDropped) message.confirm_dropped = true;
    if (!this.connected) {
      return Promise.resolve({ ok: false, error: errorOf("not_connected", NOT_CONNECTED, id) });
    }
    this.accepts.get(id)?.({ ok: false, error: errorOf("timeout", "superseded by a new accept", id) });
    const answer = new Promise<Outcome<undefined>>((resolve) => {
      const timer = setTimeout(() => {
        if (this.accepts.get(id) !== done) return;
        this.accepts.delete(id);
        resolve({ ok: false, error: errorOf("timeout", "no answer to accept", id) });
      }, this.options.acceptTimeoutMs);
      const done = (outcome: Outcome<undefined>) => {
        clearTimeout(timer);
        resolve(outcome);
      };
      this.accepts.set(id, done);
    });
    suggestion?.markAccepting();
    this.send(message);
    return answer;
  }

  /** Stop a streaming suggestion (the server ends it `cancelled`). */
  cancel(id: string): void {
    const suggestion = this.suggestions.get(id);
    if (suggestion && !suggestion.streaming) return; // over: nothing to stop, no reply
    this.send({ type: "cancel", id });
  }

  /** Cancel if streaming, and forget it here. */
  dismiss(id: string): void {
    this.cancel(id);
    this.suggestions.delete(id);
  }

  /** The suggestion named `id`, while this client keeps it. */
  get(id: string): Suggestion | undefined {
    return this.suggestions.get(id);
  }

  /** Stop listening; pending answers resolve with `closed`. */
  destroy(): void {
    if (this.destroyed) return;
    this.destroyed = true;
    this.provider.off("stateless", this.onStateless);
    this.provider.off("authenticated", this.onAuthenticated);
    for (const [id, done] of this.accepts) done({ ok: false, error: errorOf("closed", "the client was destroyed", id) });
    this.accepts.clear();
    for (const suggestion of this.suggestions.values()) {
      if (suggestion.streaming) suggestion.fail(errorOf("closed", "the client was destroyed", suggestion.id));
    }
    this.suggestions.clear();
    if (clients.get(this.provider) === this) clients.delete(this.provider);
    this.clearListeners();
  }

  /** @internal What a suggestion said it drops (for a confirm_required that names no list). */
  pendingDropped(id: string): Loss[] {
    return this.suggestions.get(id)?.dropped ?? [];
  }

  private newId(prefix: string): string {
    this.counter += 1;
    return `${prefix}${Date.now().toString(36)}-${this.counter}`;
  }

  private send(message: ClientMessage): void {
    if (this.destroyed) return;
    if (message.type === "suggest" || message.type === "accept") this.provider.flushPendingUpdates?.();
    // Looked up at each send: a host (or a test) may wrap the provider's method.
    this.provider.sendStateless(encode(message));
  }

  private start(suggestion: Suggestion, message: ClientMessage): Suggestion {
    if (this.destroyed) {
      suggestion.fail(errorOf("closed", "the client was destroyed", suggestion.id));
      return suggestion;
    }
    if (!this.connected) {
      suggestion.fail(errorOf("not_connected", NOT_CONNECTED, suggestion.id));
      return suggestion;
    }
    this.suggestions.set(suggestion.id, suggestion);
    while (this.suggestions.size > KEPT_SUGGESTIONS) {
      const oldest = this.suggestions.keys().next().value as string;
      this.suggestions.delete(oldest);
    }
    const timer = setTimeout(() => {
      if (suggestion.state === "waiting") {
        suggestion.fail(errorOf("timeout", "no answer from the AI", suggestion.id));
        // If it was only late, the model should not go on writing what nobody will see.
        this.send({ type: "cancel", id: suggestion.id });
      }
    }, this.options.answerTimeoutMs);
    suggestion.result.then(() => clearTimeout(timer));
    this.send(message);
    return suggestion;
  }

  private receive(payload: string): void {
    if (this.destroyed) return;
    const msg = decode(payload);
    if (!msg) return; // not an AI message this client knows: ignored, as the protocol says
    this.emit("message", msg);
    if (msg.type === "ai.status") {
      if (msg.id !== this.options.statusId) return;
      const status: AIStatus = { state: msg.state, reason: msg.reason };
      if (msg.model !== undefined) status.model = msg.model;
      if (msg.quant !== undefined) status.quant = msg.quant;
      this.setStatus(status);
      return;
    }
    if (msg.type === "suggestion.error" && msg.code === "unavailable") this.onUnavailable(msg.message);
    const suggestion = msg.id === null ? undefined : this.suggestions.get(msg.id);
    const accept = msg.id === null ? undefined : this.accepts.get(msg.id);
    if (suggestion) suggestion.handle(msg);
    if (accept && (msg.type === "suggestion.accepted" || msg.type === "suggestion.error")) {
      this.accepts.delete(msg.id as string);
      accept(
        msg.type === "suggestion.accepted"
          ? { ok: true, value: undefined }
          : { ok: false, error: suggestion?.error ?? errorOf(msg.code, msg.message, msg.id) },
      );
    }
    if (msg.type === "suggestion.accepted") this.suggestions.delete(msg.id); // forgotten there too
    if (msg.type === "suggestion.error" && !suggestion && !accept) {
      this.emit("error", errorOf(msg.code, msg.message, msg.id));
    }
  }

  /** The model worker died under a suggestion, or AI is not ready: unavailable until the
   * server's ai.status says ready again, and ask it now, so a status that crossed this error
   * on the wire cannot leave AI marked unavailable. */
  private onUnavailable(message: string): void {
    if (this.available) this.setStatus({ state: "starting", reason: message || "the model is restarting" });
    if (this.options.watchStatus) this.watchStatus();
  }

  private setStatus(status: AIStatus): void {
    this.status = status;
    this.emit("status", status);
  }
}
