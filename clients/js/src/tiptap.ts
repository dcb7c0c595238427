// TetherSuggestions: tether's AI in a Tiptap 3 editor bound to a Yjs document with
// Collaboration. Ghost text after a pause in typing (a ProseMirror widget after the cursor),
// Tab accepts (the server inserts it with the marks of the text it continues), Esc dismisses,
// typing the ghost's next characters keeps the rest, and the selection can be rewritten with
// its diff handed to `onRewrite`. Cursors go to the server as Yjs relative positions inside
// the paragraph's Y.XmlText, so they stay right while edits cross on the wire.
import { Extension, type Editor } from "@tiptap/core";
import { Plugin, PluginKey, TextSelection, type EditorState, type Transaction } from "@tiptap/pm/state";
import { ReplaceStep } from "@tiptap/pm/transform";
import { Decoration, DecorationSet } from "@tiptap/pm/view";
import { absolutePositionToRelativePosition, ySyncPluginKey } from "@tiptap/y-tiptap";
import type * as Y from "yjs";
import { encodeAnchor } from "./anchors.js";
import { SuggestionDriver, type GhostSurface, type SuggestionsOptions } from "./driver.js";
import { ended, ghostRest, newGhost, typedThrough, withDelta, type Ghost } from "./ghost.js";

export { DEFAULT_MAX_TOKENS, DEFAULT_PAUSE_MS, SuggestionDriver } from "./driver.js";
export type { SuggestionEvent, SuggestionsOptions } from "./driver.js";

/** Key names as Tiptap writes them (`Mod-Space`); null turns a key off. */
export interface SuggestionKeys {
  accept?: string | null;
  dismiss?: string | null;
  suggest?: string | null;
  rewrite?: string | null;
}

export interface TetherSuggestionsOptions extends SuggestionsOptions {
  keys: SuggestionKeys;
  /** The ghost widget's class. */
  ghostClass: string;
  /** The ghost widget's inline style; null leaves styling to your CSS (`.tether-ghost`). */
  ghostStyle: string | null;
}

export interface TetherSuggestionsStorage {
  /** The running driver (ask, accept, rewrite from your own buttons); null before create. */
  driver: SuggestionDriver | null;
}

export const DEFAULT_KEYS: Required<SuggestionKeys> = {
  accept: "Tab",
  dismiss: "Escape",
  suggest: "Mod-Space",
  rewrite: "Mod-Shift-r",
};
export const DEFAULT_GHOST_STYLE = "color: #9aa0a6; font-style: italic; pointer-events: none; white-space: pre-wrap";
// How long after an accept its insert may arrive and still move the cursor after it.
const ACCEPT_LANDS_WITHIN_MS = 10000;

declare module "@tiptap/core" {
  interface Commands<ReturnType> {
    tetherSuggestions: {
      /** Ask for a completion at the cursor now. */
      requestSuggestion: () => ReturnType;
      /** Accept the ghost (false when there is none). */
      acceptSuggestion: () => ReturnType;
      /** Drop the ghost (false when there is none). */
      dismissSuggestion: () => ReturnType;
      /** Ask for a rewrite of the selection (its session goes to `onRewrite`). */
      rewriteSelection: () => ReturnType;
    };
  }
  interface Storage {
    tetherSuggestions: TetherSuggestionsStorage;
  }
}

export const ghostKey = new PluginKey<Ghost | null>("tetherGhost");

/** The ghost in an editor state, or null. */
export function ghostOf(state: EditorState): Ghost | null {
  return ghostKey.getState(state) ?? null;
}

/** The driver of an editor with TetherSuggestions, or null. */
export function suggestionsOf(editor: Editor): SuggestionDriver | null {
  return editor.storage.tetherSuggestions?.driver ?? null;
}

type GhostAction =
  | { type: "start"; id: string }
  | { type: "delta"; id: string; text: string }
  | { type: "end"; id: string }
  | { type: "clear"; silent: boolean };

function fromSync(tr: Transaction): boolean {
  return Boolean(tr.getMeta(ySyncPluginKey)); // a remote edit applied by y-prosemirror
}

/** The text typed by `tr` right at `pos` (one step inserting plain text there), or null. */
function typedAt(tr: Transaction, pos: number): string | null {
  if (tr.steps.length !== 1) return null;
  const step = tr.steps[0];
  if (!(step instanceof ReplaceStep)) return null;
  // (ReplaceStep's from/to/slice are public in prosemirror-transform, typed as such.)
  const { from, to, slice } = step as unknown as { from: number; to: number; slice: ReplaceStep["slice"] };
  if (from !== pos || to !== pos || slice.openStart !== 0 || slice.content.childCount !== 1) return null;
  const node = slice.content.firstChild;
  return node && node.isText ? (node.text ?? null) : null;
}

function mapThrough(ghost: Ghost, tr: Transaction, state: EditorState): Ghost | null {
  if (fromSync(tr)) {
    // y-prosemirror applies a remote edit as one replacement of the whole document, then puts
    // the selection back where it was (by relative positions). The ghost is always at the
    // cursor: it goes where the cursor went.
    return { ...ghost, pos: state.selection.head };
  }
  const typed = typedAt(tr, ghost.pos);
  return typed ? typedThrough(ghost, typed) : null;
}

function ghostPlugin(options: TetherSuggestionsOptions, dropped: (ghost: Ghost) => void): Plugin<Ghost | null> {
  let droppedGhost: Ghost | null = null; // a streaming ghost dropped without a silent clear
  return new Plugin<Ghost | null>({
    key: ghostKey,
    state: {
      init: () => null,
      apply(tr, value, _old, state) {
        let ghost = value;
        const before = ghost;
        if (ghost && tr.docChanged) ghost = mapThrough(ghost, tr, state);
        if (ghost && tr.selectionSet && !fromSync(tr)) {
          const sel = state.selection;
          if (!sel.empty || sel.head !== ghost.pos) ghost = null;
        }
        const action = tr.getMeta(ghostKey) as GhostAction | undefined;
        let silent = false;
        if (action) {
          if (action.type === "start") {
            ghost = newGhost(action.id, state.selection.head);
            silent = true;
          } else if (action.type === "delta" && ghost) {
            ghost = withDelta(ghost, action.id, action.text);
          } else if (action.type === "end" && ghost) {
            ghost = ended(ghost, action.id);
          } else if (action.type === "clear") {
            ghost = null;
            silent = action.silent;
          }
        }
        if (before && before.streaming && (!ghost || ghost.id !== before.id) && !silent) droppedGhost = before;
        return ghost;
      },
    },
    props: {
      decorations(state) {
        const ghost = ghostKey.getState(state);
        const rest = ghostRest(ghost);
        if (!ghost || !rest) return DecorationSet.empty;
        const widget = () => {
          const span = document.createElement("span");
          span.className = options.ghostClass;
          if (options.ghostStyle) span.style.cssText = options.ghostStyle;
          // Not part of the text: the browser must never type into it, nor ProseMirror read
          // it back as content.
          span.contentEditable = "false";
          span.setAttribute("aria-hidden", "true");
          span.setAttribute("data-testid", "ghost");
          span.textContent = rest;
          return span;
        };
        return DecorationSet.create(state.doc, [
          Decoration.widget(ghost.pos, widget, { side: 1, key: `${ghost.id}:${rest}`, ignoreSelection: true, marks: [] }),
        ]);
      },
    },
    view: () => ({
      update() {
        if (!droppedGhost) return;
        const ghost = droppedGhost;
        droppedGhost = null;
        dropped(ghost);
      },
    }),
  });
}

/** The editor as the driver sees it. */
function surfaceOf(editor: Editor, pending: { accept: { text: string; until: number } | null }): GhostSurface {
  const dispatch = (action: GhostAction) => editor.view.dispatch(editor.state.tr.setMeta(ghostKey, action));
  const anchorAt = (pos: number): string | null => {
    const sync = ySyncPluginKey.getState(editor.state) as
      | { type: Y.XmlFragment; binding: { mapping: Parameters<typeof absolutePositionToRelativePosition>[2] } | null }
      | undefined;
    if (!sync || !sync.binding) return null;
    return encodeAnchor(absolutePositionToRelativePosition(pos, sync.type, sync.binding.mapping) as Y.RelativePosition);
  };
  return {
    ghost: () => ghostOf(editor.state),
    startGhost: (id) => dispatch({ type: "start", id }),
    ghostDelta: (id, text) => dispatch({ type: "delta", id, text }),
    ghostEnded: (id) => dispatch({ type: "end", id }),
    clearGhost: (silent) => dispatch({ type: "clear", silent }),
    cursor() {
      const sel = editor.state.selection;
      if (!sel.empty || !sel.$head.parent.isTextblock) return null;
      const anchor = anchorAt(sel.head);
      return anchor ? { anchor } : null;
    },
    selection() {
      const sel = editor.state.selection;
      if (sel.empty) return null;
      const anchor = anchorAt(sel.from);
      const anchorEnd = anchorAt(sel.to);
      if (!anchor || !anchorEnd) return null;
      return { at: { anchor, anchorEnd }, old: editor.state.doc.textBetween(sel.from, sel.to, "\n") };
    },
    hasFocus: () => editor.isFocused,
    editable: () => editor.isEditable,
    expectAccepted(ghost) {
      pending.accept = { text: ghost.received, until: Date.now() + ACCEPT_LANDS_WITHIN_MS };
    },
    insertRest(pos, text) {
      // As text, with the marks typing there carries (never parsed as HTML: it is the model's).
      editor.view.dispatch(editor.state.tr.insertText(text, pos).scrollIntoView());
      editor.commands.focus();
    },
  };
}

/**
 * An accepted suggestion arrives through sync as the server's edit: when its text lands at our
 * cursor, put the cursor after it (y-prosemirror keeps a cursor before text inserted right at
 * it).
 */
function cursorAfterAccepted(editor: Editor, pending: { accept: { text: string; until: number } | null }): void {
  const accept = pending.accept;
  if (!accept) return;
  if (Date.now() > accept.until) {
    pending.accept = null;
    return;
  }
  const { selection, doc } = editor.state;
  const end = selection.head + accept.text.length;
  if (selection.empty && end <= doc.content.size && doc.textBetween(selection.head, end) === accept.text) {
    pending.accept = null;
    editor.view.dispatch(editor.state.tr.setSelection(TextSelection.create(doc, end)));
  }
}

export const TetherSuggestions = Extension.create<TetherSuggestionsOptions, TetherSuggestionsStorage>({
  name: "tetherSuggestions",
  // Before the lists' Tab: a visible ghost takes it.
  priority: 1000,

  addOptions() {
    return {
      provider: null,
      client: null,
      keys: DEFAULT_KEYS,
      ghostClass: "tether-ghost",
      ghostStyle: DEFAULT_GHOST_STYLE,
    };
  },

  addStorage() {
    return { driver: null };
  },

  onCreate() {
    const pending = { accept: null as { text: string; until: number } | null };
    const driver = new SuggestionDriver(surfaceOf(this.editor, pending), this.options);
    this.storage.driver = driver;
    this.editor.on("update", ({ transaction }) => {
      if (!fromSync(transaction)) driver.typed(); // the writer's own edit, not a remote one
      else cursorAfterAccepted(this.editor, pending);
    });
  },

  onDestroy() {
    this.storage.driver?.destroy();
    this.storage.driver = null;
  },

  addProseMirrorPlugins() {
    return [ghostPlugin(this.options, (ghost) => this.storage.driver?.dropped(ghost))];
  },

  addCommands() {
    return {
      requestSuggestion: () => () => Boolean(this.storage.driver?.request({ auto: false })),
      acceptSuggestion: () => () => this.storage.driver?.accept() ?? false,
      dismissSuggestion: () => () => this.storage.driver?.dismiss() ?? false,
      rewriteSelection: () => () => Boolean(this.storage.driver?.rewrite()),
    };
  },

  addKeyboardShortcuts() {
    const keys = { ...DEFAULT_KEYS, ...this.options.keys };
    const shortcuts: Record<string, () => boolean> = {};
    if (keys.accept) shortcuts[keys.accept] = () => this.storage.driver?.accept() ?? false;
    if (keys.dismiss) shortcuts[keys.dismiss] = () => this.storage.driver?.dismiss() ?? false;
    if (keys.suggest) {
      shortcuts[keys.suggest] = () => {
        this.storage.driver?.request({ auto: false });
        return true;
      };
    }
    if (keys.rewrite) {
      shortcuts[keys.rewrite] = () => {
        this.storage.driver?.rewrite();
        return true;
      };
    }
    return shortcuts;
  },
});

export default TetherSuggestions;
