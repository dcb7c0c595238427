// The plain editor: CodeMirror 6 (Markdown) bound to the document's Y.Text "content" through
// y-codemirror.next, for documents that hold plain text (Markdown, code). Mounted by main.js,
// which owns the socket, presence and the AI protocol; this is the surface it drives (see
// `surface` in main.js for the interface both editors implement).
import * as Y from "yjs";
import { EditorState, EditorSelection, Compartment, Transaction } from "@codemirror/state";
import {
  EditorView,
  keymap,
  lineNumbers,
  highlightActiveLine,
  highlightActiveLineGutter,
  drawSelection,
  dropCursor,
  highlightSpecialChars,
  rectangularSelection,
  crosshairCursor,
  placeholder,
} from "@codemirror/view";
import { defaultKeymap, indentWithTab } from "@codemirror/commands";
import { syntaxHighlighting, defaultHighlightStyle, bracketMatching, indentOnInput } from "@codemirror/language";
import { searchKeymap, highlightSelectionMatches } from "@codemirror/search";
import { markdown } from "@codemirror/lang-markdown";
import { yCollab, yUndoManagerKeymap } from "y-codemirror.next";
import {
  ghostExtension,
  ghostField,
  ghostRest,
  startGhost,
  ghostDelta,
  ghostEnded,
  clearGhost,
} from "./ghost.js";
import { toBase64 } from "./common.js";

/**
 * Mount on `parent`. `ctx`: {ydoc, awareness, request({auto}), rewrite(), sendAccept(id),
 * cancel(id), typed()}.
 */
export function mountPlain(parent, ctx) {
  const ytext = ctx.ydoc.getText("content");
  // A completion accepted on the server: when its insert arrives at our cursor, put the cursor
  // after it (a remote insert at the cursor would otherwise leave it before the text).
  let pendingAccept = null; // {id, pos, text, until}

  const ctl = {
    request: (_view, opts) => ctx.request(opts),
    rewrite: () => ctx.rewrite(),
    dropped: (ghost) => ctx.cancel(ghost.id),
    typed: () => ctx.typed(),
    accept(view, ghost) {
      const rest = ghostRest(ghost);
      if (!ghost.consumed) {
        // The server inserts it; everyone (us included) sees it through sync.
        ctx.sendAccept(ghost.id);
        pendingAccept = { id: ghost.id, pos: ghost.pos, text: ghost.received, until: Date.now() + 10000 };
        view.dispatch({ effects: clearGhost.of({ silent: true }) });
      } else {
        // Part of it was typed by hand: the server would insert it all at the original cursor,
        // so type the rest locally (it syncs like any edit) and stop the stream.
        if (ghost.streaming) ctx.cancel(ghost.id);
        view.dispatch({
          changes: { from: ghost.pos, insert: rest },
          selection: EditorSelection.cursor(ghost.pos + rest.length),
          effects: clearGhost.of({ silent: true }),
          userEvent: "input.complete",
          scrollIntoView: true,
        });
      }
    },
    filter(tr) {
      if (!pendingAccept || !tr.docChanged) return null;
      if (Date.now() > pendingAccept.until) {
        pendingAccept = null;
        return null;
      }
      const local = tr.annotation(Transaction.userEvent) !== undefined;
      const cursor = tr.startState.selection.main;
      let hit = null;
      if (!local) {
        tr.changes.iterChanges((fromA, toA, _fromB, _toB, text) => {
          const inserted = text.toString();
          if (hit === null && fromA === pendingAccept.pos && toA === fromA && inserted &&
              (inserted.startsWith(pendingAccept.text) || pendingAccept.text.startsWith(inserted))) {
            hit = inserted;
          }
        });
      }
      if (hit !== null) {
        const at = pendingAccept.pos;
        pendingAccept = null;
        if (cursor.empty && cursor.head === at) {
          return [tr, { selection: EditorSelection.cursor(tr.changes.mapPos(at, 1)), sequential: true }];
        }
        return null;
      }
      pendingAccept.pos = tr.changes.mapPos(pendingAccept.pos, -1);
      return null;
    },
  };

  const editable = new Compartment();
  const editableExtensions = (canWrite) => [EditorState.readOnly.of(!canWrite), EditorView.editable.of(canWrite)];
  const view = new EditorView({
    parent,
    state: EditorState.create({
      doc: ytext.toString(),
      extensions: [
        ghostExtension(ctl), // before the other keymaps: Tab/Esc go to the ghost first
        keymap.of([...yUndoManagerKeymap, ...defaultKeymap, ...searchKeymap, indentWithTab]),
        lineNumbers(),
        highlightActiveLineGutter(),
        highlightSpecialChars(),
        drawSelection(),
        dropCursor(),
        indentOnInput(),
        bracketMatching(),
        rectangularSelection(),
        crosshairCursor(),
        highlightActiveLine(),
        highlightSelectionMatches(),
        syntaxHighlighting(defaultHighlightStyle, { fallback: true }),
        markdown(),
        EditorView.lineWrapping,
        placeholder("Start writing…"),
        editable.of(editableExtensions(false)), // until the server says read-write
        yCollab(ytext, ctx.awareness),
      ],
    }),
  });

  return {
    kind: "plain",
    view,
    ytext,
    hasFocus: () => view.hasFocus,
    focus: () => view.focus(),
    setEditable: (canWrite) => view.dispatch({ effects: editable.reconfigure(editableExtensions(canWrite)) }),
    destroy: () => view.destroy(),
    ghost: () => view.state.field(ghostField, false),
    startGhost: (id) => view.dispatch({ effects: startGhost.of({ id, pos: view.state.selection.main.head }) }),
    ghostDelta: (id, text) => view.dispatch({ effects: ghostDelta.of({ id, text }) }),
    ghostEnded: (id) => view.dispatch({ effects: ghostEnded.of({ id }) }),
    clearGhost: (silent) => view.dispatch({ effects: clearGhost.of({ silent }) }),
    /** Where a completion goes: {pos, anchor} at a collapsed cursor, else null. */
    cursor() {
      const sel = view.state.selection.main;
      if (!sel.empty) return null;
      const fields = { pos: sel.head };
      // The anchor stays right while edits cross on the wire; only when the editor's text is
      // the Y.Text's (it always is once synced).
      if (ytext.length === view.state.doc.length) {
        try {
          fields.anchor = toBase64(Y.encodeRelativePosition(Y.createRelativePositionFromTypeIndex(ytext, sel.head)));
        } catch {
          // pos alone is right as well
        }
      }
      return fields;
    },
    /** A rewrite's selection: {fields, old}, or null when nothing is selected. */
    selection() {
      const sel = view.state.selection.main;
      if (sel.empty) return null;
      return { fields: { from: sel.from, to: sel.to }, old: view.state.sliceDoc(sel.from, sel.to) };
    },
  };
}
