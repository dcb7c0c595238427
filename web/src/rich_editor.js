// The rich editor: Tiptap 3 (StarterKit) bound to the document's Y.XmlFragment "default"
// through Tiptap's Collaboration extension (y-prosemirror), other editors' carets with their
// names and colours, a small toolbar, and AI ghost text and rewrites from tether-client's
// TetherSuggestions extension. Mounted by main.js, which owns the socket, presence and what the
// AI reports; this is the surface it drives (see `surface` in main.js).
import { Editor } from "@tiptap/core";
import StarterKit from "@tiptap/starter-kit";
import Collaboration from "@tiptap/extension-collaboration";
import CollaborationCaret from "@tiptap/extension-collaboration-caret";
import Placeholder from "@tiptap/extension-placeholder";
import { TetherSuggestions, suggestionsOf } from "tether-client/tiptap";
import { h } from "./common.js";

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
 * Mount on `parent`. `ctx`: {ydoc, provider, user, field (the Y.XmlFragment's name), ai
 * (TetherSuggestions' options, or null when AI is off here)}.
 */
export function mountRich(parent, ctx) {
  const toolbar = h("div", { class: "rich-toolbar", id: "tether-toolbar", role: "toolbar" });
  const body = h("div", { class: "rich-body" });
  parent.append(toolbar, body);

  const editor = new Editor({
    element: body,
    editable: false, // until the server says read-write
    extensions: [
      StarterKit.configure({ undoRedo: false }), // Collaboration brings its own undo
      Collaboration.configure({ document: ctx.ydoc, field: ctx.field }),
      CollaborationCaret.configure({ provider: ctx.provider, user: ctx.user }),
      Placeholder.configure({ placeholder: "Start writing…" }),
      ...(ctx.ai ? [TetherSuggestions.configure(ctx.ai)] : []),
    ],
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
    suggestions: () => suggestionsOf(editor),
  };
}
