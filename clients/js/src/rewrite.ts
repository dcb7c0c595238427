// A rewrite of a selection as a writer reviews it: the passage, the text streaming in, its
// word diff, what the server says it would drop, and accept / reject. Accept of a rewrite that
// drops content needs `confirmDropped`, which a host passes only once it has shown that list:
// the server applies no flagged rewrite unseen, and neither does this.
import type { Suggestion, TetherAI } from "./client.js";
import { Emitter } from "./emitter.js";
import { wordDiff, type DiffPart } from "./diff.js";
import type { AIError, Loss, Outcome, RewriteOf } from "./protocol.js";

export type RewriteState =
  | "streaming" // text arriving
  | "ready" // done: accept or reject
  | "ended" // stopped early (see `note`); what came can still be accepted
  | "accepting" // accept sent
  | "applied" // the server wrote it into the document
  | "error" // failed (see `error`)
  | "closed"; // rejected, or replaced by a newer rewrite

export interface RewriteEvents {
  change: RewriteSession;
}

export class RewriteSession extends Emitter<RewriteEvents> {
  state: RewriteState = "streaming";
  /** Why it stopped early, or the error's message. */
  note = "";
  /** What the rewrite would lose of the passage: show it before accepting. */
  dropped: Loss[] = [];
  error: AIError | null = null;

  constructor(
    readonly suggestion: Suggestion,
    /** The selected passage, as the editor shows it. */
    readonly old: string,
    /** Where it is in the document (as sent). */
    readonly at: RewriteOf,
  ) {
    super();
    if (suggestion.error) {
      // Refused before it was sent (not connected): nothing will stream.
      this.error = suggestion.error;
      this.state = "error";
      this.note = suggestion.error.message;
    }
    suggestion.on("delta", () => this.changed());
    suggestion.on("end", (end) => {
      this.takeDropped(end.dropped);
      if (this.state === "streaming") {
        this.state = end.reason === "done" ? "ready" : "ended";
        if (end.reason !== "done") this.note = `stopped (${end.reason})`;
      } else if (this.error?.code === "confirm_required" && this.dropped.length) {
        this.state = "ready"; // refused unconfirmed before the list came: now it can be
      }
      this.changed();
    });
    suggestion.on("accepted", () => {
      this.state = "applied";
      this.changed();
    });
    suggestion.on("error", (error) => {
      if (this.state === "closed") return;
      this.error = error;
      if (error.code === "confirm_required") {
        // Accepted before the list of what it drops came: show it, then accept confirms.
        this.takeDropped(error.dropped ?? suggestion.dropped);
        this.state = this.dropped.length ? "ready" : "error";
        this.note = this.dropped.length ? "" : error.message || "it would drop content of the original";
      } else {
        this.state = "error";
        this.note = error.message || error.code;
      }
      this.changed();
    });
  }

  /** Start a rewrite of `at` (the passage `old`) through `client`. */
  static start(client: TetherAI, at: RewriteOf, old: string, maxTokens?: number): RewriteSession {
    const request = maxTokens === undefined ? at : { ...at, maxTokens };
    return new RewriteSession(client.rewrite(request), old, at);
  }

  get id(): string {
    return this.suggestion.id;
  }

  /** The rewrite so far. */
  get text(): string {
    return this.suggestion.text;
  }

  get streaming(): boolean {
    return this.suggestion.streaming;
  }

  /** The passage against the rewrite so far, word by word. */
  diff(): DiffPart[] {
    return wordDiff(this.old, this.text);
  }

  /** Accepting needs `confirmDropped: true` (after showing `dropped`). */
  get needsConfirm(): boolean {
    return this.dropped.length > 0;
  }

  get canAccept(): boolean {
    return this.text.length > 0 && (this.state === "streaming" || this.state === "ready" || this.state === "ended");
  }

  /**
   * Apply it. With `dropped` known and no `confirmDropped`, nothing is sent and the answer is a
   * `confirm_required` error carrying the list: show it, then accept again with the flag.
   */
  async accept(options: { confirmDropped?: boolean } = {}): Promise<Outcome<undefined>> {
    if (!this.canAccept) {
      const error: AIError = { code: "bad_request", message: "nothing to accept", id: this.id };
      return { ok: false, error };
    }
    if (this.needsConfirm && !options.confirmDropped) {
      const what = this.dropped.map((loss) => `the ${loss.kind} '${loss.text}'`).join(", ");
      const error: AIError = {
        code: "confirm_required",
        message: `this rewrite drops ${what}: accept it with confirmDropped once that is shown`,
        id: this.id,
        dropped: this.dropped,
      };
      return { ok: false, error };
    }
    this.state = "accepting";
    this.changed();
    return this.suggestion.accept({ confirmDropped: this.needsConfirm && options.confirmDropped === true });
  }

  /** Drop it: cancelled on the server if still streaming. */
  reject(): void {
    if (this.state === "closed") return;
    if (this.suggestion.streaming) this.suggestion.cancel();
    this.state = "closed";
    this.changed();
    this.clearListeners();
  }

  private takeDropped(dropped: Loss[]): void {
    if (dropped.length) this.dropped = dropped;
  }

  private changed(): void {
    this.emit("change", this);
  }
}
