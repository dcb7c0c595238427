// The rich editor: Tiptap 3 (StarterKit) bound to the document's Y.XmlFragment "default"
// through Tiptap's Collaboration extension (y-prosemirror), other editors' carets with their
// names and colours, a small toolbar, and AI ghost text at the cursor. Mounted by main.js, which
// owns the socket, presence and the AI protocol; this is the surface it drives (the interface
// both editors implement is described at `surface` in main.js).
//
// A cursor goes to the server as a Yjs relative position inside the paragraph's Y.XmlText
// (what y-prosemirror's absolutePositionToRelativePosition makes), so it stays right while edits
// cross on the wire. An accepted suggestion is the server's own edit: it arrives through sync,
// and y-prosemirror keeps our cursor after it.
import * as Y from "yjs";
import { Editor, Extension } from "@tiptap/core";
import StarterKit from "@tiptap/starter-kit";
import Collaboration from "@tiptap/extension-collaboration";
import CollaborationCaret from "@tiptap/extension-collaboration-caret";
import Placeholder from "@tiptap/extension-placeholder";
import { TextSelection } from "@tiptap/pm/state";
import { absolutePositionToRelativePosition, ySyncPluginKey } from "@tiptap/y-tiptap";
import { ghostAction, richGhostKey, richGhostPlugin, richGhostRest } from "./rich_ghost.js";
import { h, toBase64 } from "./common.js";

const TOOLS = [
  { id: "bold", label: "B", title: "Bold (Ctrl/Cmd+B)", run: (c) => c.toggleBold(), active: ["bold"] },
  { id: "italic", label: "I", title: "Italic (Ctrl/Cmd+I)", run: (c) => c.toggleItalic(), active: ["italic"] },
  { id: "code", label: "</>", title: "Inline code (Ctrl/Cmd+E)", run: (c) => c.toggleCode(), active: ["code"] },
  { id: "h1", label: "H1", title: "Heading 1", run: (c) => c.toggleHeading({ level: 1 }), active: ["heading", { level: 1 }] },
  { id: "h2", label: "H2", title: "Heading 2", run: (c) => c.toggleHeading({ level: 2 }), active: ["heading", { level: 2 }] },
  { id: "bullets", label: "• List", title: "Bulleted list", run: (c) => c.toggleBulletList(), active: ["bulletList"] },
  { id: "numbers", label: "1. List", title: "Numbered list", run: (c) => c.toggleOrderedList(), active: ["orderedList"] },
  { id: "quote", label: "❝", title: "Quote", run: (c) => c.toggleBlockquote(), active: ["blockquote"] },
  { id: "codeblock", label: "{ }", title: "Code block", run: (c) => c.toggleCodeBlock(), active: ["codeBlock"] },
];

/**
 * Mount on `parent`. `ctx`: {ydoc, provider, user, field (the Y.XmlFragment's name),
 * request({auto}), rewrite(), sendAccept(id), cancel(id), typed()}.
 */
export function mountRich(parent, ctx) {
  const toolbar = h("div", { class: "rich-toolbar", id: "tether-toolbar", role: "toolbar" });
  const body = h("div", { class: "rich-body" });
  parent.append(toolbar, body);

  const keys = Extension.create({
    name: "tetherAi",
    priority: 1000, // before the lists' Tab: a visible ghost takes it
    addProseMirrorPlugins: () => [richGhostPlugin({ dropped: (ghost) => ctx.cancel(ghost.id) })],
    addKeyboardShortcuts() {
      return {
        Tab: () => {
          const ghost = richGhostKey.getState(this.editor.state);
          if (!ghost || !richGhostRest(ghost)) return false;
          accept(ghost);
          return true;
        },
        Escape: () => {
          if (!richGhostKey.getState(this.editor.state)) return false;
          dispatchGhost({ type: "clear", silent: false });
          return true;
        },
        "Mod-Space": () => (ctx.request({ auto: false }), true),
        "Mod-Shift-r": () => (ctx.rewrite(), true),
      };
    },
  });

  const editor = new Editor({
    element: body,
    editable: false, // until the server says read-write
    extensions: [
      StarterKit.configure({ undoRedo: false }), // Collaboration brings its own undo
      Collaboration.configure({ document: ctx.ydoc, field: ctx.field }),
      CollaborationCaret.configure({ provider: ctx.provider, user: ctx.user }),
      Placeholder.configure({ placeholder: "Start writing…" }),
      keys,
    ],
  });

  function dispatchGhost(action) {
    editor.view.dispatch(ghostAction(editor.state.tr, action));
  }

  // A suggestion accepted on the server: when its insert arrives at our cursor, put the cursor
  // after it (y-prosemirror puts a cursor back before text inserted right at it).
  let pendingAccept = null; // {text, until}

  function accept(ghost) {
    const rest = richGhostRest(ghost);
    if (!ghost.consumed) {
      // The server inserts it with the marks typing there would carry; everyone (us included)
      // sees it through sync.
      ctx.sendAccept(ghost.id);
      pendingAccept = { text: ghost.received, until: Date.now() + 10000 };
      dispatchGhost({ type: "clear", silent: true });
    } else {
      // Part of it was typed by hand: type the rest here (it syncs like any edit).
      if (ghost.streaming) ctx.cancel(ghost.id);
      dispatchGhost({ type: "clear", silent: true });
      editor.chain().insertContentAt(ghost.pos, rest).focus().run();
    }
  }

  editor.on("update", ({ transaction }) => {
    if (!transaction.getMeta(ySyncPluginKey)) {
      ctx.typed(); // our own edit, not a remote one
      return;
    }
    if (!pendingAccept) return;
    if (Date.now() > pendingAccept.until) {
      pendingAccept = null;
      return;
    }
    const { selection, doc } = editor.state;
    const end = selection.head + pendingAccept.text.length;
    if (selection.empty && end <= doc.content.size &&
        doc.textBetween(selection.head, end) === pendingAccept.text) {
      pendingAccept = null;
      editor.view.dispatch(editor.state.tr.setSelection(TextSelection.create(doc, end)));
    }
  });

  const buttons = TOOLS.map((tool) =>
    h(
      "button",
      {
        type: "button",
        class: `tool tool-${tool.id}`,
        "data-tool": tool.id,
        title: tool.title,
        "aria-label": tool.title,
        onmousedown: (e) => e.preventDefault(), // keep the editor's selection
        onclick: () => tool.run(editor.chain().focus()).run(),
      },
      tool.label,
    ),
  );
  toolbar.append(...buttons);
  const renderTools = () => {
    TOOLS.forEach((tool, i) => {
      buttons[i].classList.toggle("active", editor.isActive(...tool.active));
      buttons[i].disabled = !editor.isEditable;
    });
  };
  editor.on("transaction", renderTools);
  renderTools();

  /** A relative position (base64) for document position `pos`, as the server resolves it. */
  function anchorAt(pos) {
    const sync = ySyncPluginKey.getState(editor.state);
    if (!sync || !sync.binding) return null;
    const rel = absolutePositionToRelativePosition(pos, sync.type, sync.binding.mapping);
    return toBase64(Y.encodeRelativePosition(rel));
  }

  return {
    kind: "rich",
    editor,
    hasFocus: () => editor.isFocused,
    focus: () => editor.commands.focus(),
    setEditable(canWrite) {
      editor.setEditable(canWrite);
      renderTools();
    },
    destroy: () => editor.destroy(),
    ghost: () => richGhostKey.getState(editor.state),
    startGhost: (id) => dispatchGhost({ type: "start", id }),
    ghostDelta: (id, text) => dispatchGhost({ type: "delta", id, text }),
    ghostEnded: (id) => dispatchGhost({ type: "end", id }),
    clearGhost: (silent) => dispatchGhost({ type: "clear", silent }),
    /** Where a completion goes: {anchor} at a collapsed cursor inside text, else null. */
    cursor() {
      const sel = editor.state.selection;
      if (!sel.empty || !sel.$head.parent.isTextblock) return null;
      const anchor = anchorAt(sel.head);
      return anchor ? { anchor } : null;
    },
    /** A rewrite's selection as two anchors, and its text; null when nothing is selected. */
    selection() {
      const sel = editor.state.selection;
      if (sel.empty) return null;
      const start = anchorAt(sel.from);
      const end = anchorAt(sel.to);
      if (!start || !end) return null;
      const old = editor.state.doc.textBetween(sel.from, sel.to, "\n");
      return { fields: { anchor: start, anchor_end: end }, old };
    },
  };
}
