// The plain editor: CodeMirror 6 (Markdown) bound to the document's Y.Text "content" through
// y-codemirror.next, for documents that hold plain text (Markdown, code), with AI ghost text and
// rewrites from tether-client's CodeMirror extension. Mounted by main.js, which owns the socket,
// presence and what the AI reports; this is the surface it drives (see `surface` in main.js).
import { EditorState, Compartment } from "@codemirror/state";
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
import { suggestionsOf, tetherSuggestions } from "tether-client/codemirror";

/**
 * Mount on `parent`. `ctx`: {ydoc, awareness, ai (the extension's options, or null when AI is
 * off here)}.
 */
export function mountPlain(parent, ctx) {
  const ytext = ctx.ydoc.getText("content");
  const editable = new Compartment();
  const editableExtensions = (canWrite) => [EditorState.readOnly.of(!canWrite), EditorView.editable.of(canWrite)];
  const view = new EditorView({
    parent,
    state: EditorState.create({
      doc: ytext.toString(),
      extensions: [
        // Before the other keymaps: Tab/Esc go to the ghost first.
        ctx.ai ? tetherSuggestions({ ...ctx.ai, ytext }) : [],
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
    suggestions: () => suggestionsOf(view),
  };
}
