// tetherSuggestions(): tether's AI in a CodeMirror 6 editor of a plain document (its Y.Text
// `content`, bound with y-codemirror.next). The same behaviour as the Tiptap extension: ghost
// text after a pause, Tab accepts (the server inserts it), Esc dismisses, typing the ghost's
// next characters keeps the rest, the selection can be rewritten with its diff handed to
// `onRewrite`. The cursor goes as a Yjs relative position in `ytext` (and its UTF-16 offset).
import {
  EditorSelection,
  EditorState,
  Prec,
  StateEffect,
  StateField,
  Transaction,
  type Extension,
  type TransactionSpec,
} from "@codemirror/state";
import { Decoration, EditorView, ViewPlugin, WidgetType, keymap, type KeyBinding } from "@codemirror/view";
import type * as Y from "yjs";
import { textAnchor } from "./anchors.js";
import { SuggestionDriver, type GhostSurface, type SuggestionsOptions } from "./driver.js";
import { ended, ghostRest, newGhost, typedThrough, withDelta, type Ghost } from "./ghost.js";

export { DEFAULT_MAX_TOKENS, DEFAULT_PAUSE_MS, SuggestionDriver } from "./driver.js";
export type { SuggestionEvent, SuggestionsOptions } from "./driver.js";

/** Key names as CodeMirror writes them (`Mod-Space`); null turns a key off. */
export interface SuggestionKeys {
  accept?: string | null;
  dismiss?: string | null;
  suggest?: string | null;
  rewrite?: string | null;
}

export interface CodeMirrorSuggestionsOptions extends SuggestionsOptions {
  /** The document's Y.Text (`ydoc.getText("content")`): cursors go as relative positions in
   * it. Without it, as UTF-16 offsets alone. */
  ytext?: Y.Text | null;
  keys?: SuggestionKeys;
  /** The ghost widget's class (default "tether-ghost", styled by a base theme). */
  ghostClass?: string;
  /** The ghost widget's inline style; default none (the base theme styles `.tether-ghost`). */
  ghostStyle?: string | null;
}

export const DEFAULT_KEYS: Required<SuggestionKeys> = {
  accept: "Tab",
  dismiss: "Escape",
  suggest: "Mod-Space",
  rewrite: "Mod-Shift-r",
};
const ACCEPT_LANDS_WITHIN_MS = 10000;

/** A new ghost at the cursor for request `id` (replaces any: the server supersedes it). */
const startGhost = StateEffect.define<{ id: string; pos: number }>();
const ghostDelta = StateEffect.define<{ id: string; text: string }>();
const ghostEnded = StateEffect.define<{ id: string }>();
/** Drop the ghost; `silent` when no `cancel` should follow (accepted, superseded, ended). */
const clearGhost = StateEffect.define<{ silent: boolean }>();
/** The server is inserting an accepted suggestion at `pos`. */
const expectAccept = StateEffect.define<{ pos: number; text: string; until: number } | null>();

/** Typed by the writer right at the ghost: the inserted text, or null for any other change. */
function typedAt(tr: Transaction, pos: number): string | null {
  let inserted: string | null = null;
  let single = true;
  tr.changes.iterChanges((fromA, toA, _fromB, _toB, text) => {
    if (inserted !== null || fromA !== pos || toA !== pos) single = false;
    inserted = text.toString();
  });
  return single ? inserted : null;
}

function mapThroughChanges(ghost: Ghost, tr: Transaction): Ghost | null {
  if (tr.annotation(Transaction.userEvent) === undefined) {
    // A remote edit (ySync) or a programmatic one: the ghost follows its spot.
    return { ...ghost, pos: tr.changes.mapPos(ghost.pos, -1) };
  }
  if (!tr.isUserEvent("input.type")) return null;
  const typed = typedAt(tr, ghost.pos);
  return typed ? typedThrough(ghost, typed) : null;
}

/** The ghost: {id, pos, received, consumed, streaming} or null. */
export const ghostField = StateField.define<Ghost | null>({
  create: () => null,
  update(value, tr) {
    let ghost = value;
    if (ghost && tr.docChanged) ghost = mapThroughChanges(ghost, tr);
    if (ghost && tr.selection) {
      const sel = tr.state.selection.main;
      if (!sel.empty || sel.head !== ghost.pos) ghost = null;
    }
    for (const effect of tr.effects) {
      if (effect.is(startGhost)) ghost = newGhost(effect.value.id, effect.value.pos);
      else if (effect.is(ghostDelta) && ghost) ghost = withDelta(ghost, effect.value.id, effect.value.text);
      else if (effect.is(ghostEnded) && ghost) ghost = ended(ghost, effect.value.id);
      else if (effect.is(clearGhost)) ghost = null;
    }
    return ghost;
  },
});

/** An accepted suggestion on its way from the server: {pos, text, until} or null. */
const acceptField = StateField.define<{ pos: number; text: string; until: number } | null>({
  create: () => null,
  update(value, tr) {
    let accept = value;
    for (const effect of tr.effects) if (effect.is(expectAccept)) accept = effect.value;
    if (accept && tr.docChanged) accept = { ...accept, pos: tr.changes.mapPos(accept.pos, -1) };
    return accept;
  },
});

/** When the accepted text arrives at our cursor (a remote insert would leave the cursor before
 * it), the same transaction moves the cursor after it. */
const cursorAfterAccepted = EditorState.transactionFilter.of((tr): TransactionSpec | readonly TransactionSpec[] => {
  const accept = tr.startState.field(acceptField, false);
  if (!accept || !tr.docChanged || tr.annotation(Transaction.userEvent) !== undefined) return tr;
  if (Date.now() > accept.until) return tr;
  let hit = false;
  tr.changes.iterChanges((fromA, toA, _fromB, _toB, text) => {
    const inserted = text.toString();
    if (!hit && fromA === accept.pos && toA === fromA && inserted &&
        (inserted.startsWith(accept.text) || accept.text.startsWith(inserted))) {
      hit = true;
    }
  });
  if (!hit) return tr;
  const cursor = tr.startState.selection.main;
  const effects = expectAccept.of(null); // landed: forget it
  if (!cursor.empty || cursor.head !== accept.pos) return [tr, { effects, sequential: true }];
  return [tr, { selection: EditorSelection.cursor(tr.changes.mapPos(accept.pos, 1)), effects, sequential: true }];
});

class GhostWidget extends WidgetType {
  constructor(
    readonly text: string,
    readonly className: string,
    readonly style: string | null,
  ) {
    super();
  }
  override eq(other: GhostWidget): boolean {
    return other.text === this.text && other.className === this.className && other.style === this.style;
  }
  toDOM(): HTMLElement {
    const span = document.createElement("span");
    span.className = this.className;
    if (this.style) span.style.cssText = this.style;
    span.setAttribute("aria-hidden", "true");
    span.setAttribute("data-testid", "ghost");
    span.textContent = this.text;
    return span;
  }
  override ignoreEvent(): boolean {
    return false;
  }
}

const ghostTheme = EditorView.baseTheme({
  ".tether-ghost": { color: "#9aa0a6", fontStyle: "italic", pointerEvents: "none", whiteSpace: "pre-wrap" },
});

/** The editor as the driver sees it. */
function surfaceOf(view: EditorView, ytext: Y.Text | null): GhostSurface {
  return {
    ghost: () => view.state.field(ghostField, false) ?? null,
    startGhost: (id) => view.dispatch({ effects: startGhost.of({ id, pos: view.state.selection.main.head }) }),
    ghostDelta: (id, text) => view.dispatch({ effects: ghostDelta.of({ id, text }) }),
    ghostEnded: (id) => view.dispatch({ effects: ghostEnded.of({ id }) }),
    clearGhost: (silent) => view.dispatch({ effects: clearGhost.of({ silent }) }),
    cursor() {
      const sel = view.state.selection.main;
      if (!sel.empty) return null;
      const at: { pos: number; anchor?: string } = { pos: sel.head };
      // The anchor stays right while edits cross on the wire; only when the editor's text is
      // the Y.Text's (it always is once synced).
      if (ytext && ytext.length === view.state.doc.length) at.anchor = textAnchor(ytext, sel.head);
      return at;
    },
    selection() {
      const sel = view.state.selection.main;
      if (sel.empty) return null;
      return { at: { from: sel.from, to: sel.to }, old: view.state.sliceDoc(sel.from, sel.to) };
    },
    hasFocus: () => view.hasFocus,
    editable: () => !view.state.readOnly && view.state.facet(EditorView.editable),
    expectAccepted(ghost) {
      view.dispatch({ effects: expectAccept.of({ pos: ghost.pos, text: ghost.received, until: Date.now() + ACCEPT_LANDS_WITHIN_MS }) });
    },
    insertRest(pos, text) {
      view.dispatch({
        changes: { from: pos, insert: text },
        selection: EditorSelection.cursor(pos + text.length),
        userEvent: "input.complete",
        scrollIntoView: true,
      });
    },
  };
}

const drivers = new WeakMap<EditorView, SuggestionDriver>();

/** The driver of a view with tetherSuggestions (ask, accept, rewrite from your own buttons). */
export function suggestionsOf(view: EditorView): SuggestionDriver | null {
  return drivers.get(view) ?? null;
}

/** The extension. Put it before other keymaps, so Tab and Esc reach a ghost first. */
export function tetherSuggestions(options: CodeMirrorSuggestionsOptions): Extension {
  const keys = { ...DEFAULT_KEYS, ...options.keys };
  const ghostClass = options.ghostClass ?? "tether-ghost";
  const ghostStyle = options.ghostStyle ?? null;
  const driverOf = (view: EditorView) => drivers.get(view);
  const bindings: KeyBinding[] = [];
  if (keys.accept) bindings.push({ key: keys.accept, run: (view) => driverOf(view)?.accept() ?? false });
  if (keys.dismiss) bindings.push({ key: keys.dismiss, run: (view) => driverOf(view)?.dismiss() ?? false });
  if (keys.suggest) {
    bindings.push({ key: keys.suggest, run: (view) => (driverOf(view)?.request({ auto: false }), true) });
  }
  if (keys.rewrite) {
    bindings.push({ key: keys.rewrite, run: (view) => (driverOf(view)?.rewrite(), true), preventDefault: true });
  }

  const driverPlugin = ViewPlugin.define((view) => {
    const driver = new SuggestionDriver(surfaceOf(view, options.ytext ?? null), options);
    drivers.set(view, driver);
    return {
      destroy() {
        driver.destroy();
        if (drivers.get(view) === driver) drivers.delete(view);
      },
    };
  });

  const decorations = EditorView.decorations.compute([ghostField], (state) => {
    const ghost = state.field(ghostField);
    const rest = ghostRest(ghost);
    if (!ghost || !rest) return Decoration.none;
    const widget = new GhostWidget(rest, ghostClass, ghostStyle);
    return Decoration.set([Decoration.widget({ widget, side: 1 }).range(ghost.pos)]);
  });

  const listener = EditorView.updateListener.of((update) => {
    const driver = driverOf(update.view);
    if (!driver) return;
    const before = update.startState.field(ghostField, false);
    const after = update.state.field(ghostField, false);
    if (before && before.streaming && (!after || after.id !== before.id)) {
      const silent = update.transactions.some((tr) =>
        tr.effects.some((e) => (e.is(clearGhost) && e.value.silent) || e.is(startGhost)),
      );
      if (!silent) driver.dropped(before);
    }
    if (update.docChanged && update.transactions.some((tr) => tr.isUserEvent("input") || tr.isUserEvent("delete"))) {
      driver.typed();
    }
  });

  return [ghostField, acceptField, decorations, ghostTheme, Prec.highest(keymap.of(bindings)), listener, cursorAfterAccepted, driverPlugin];
}
