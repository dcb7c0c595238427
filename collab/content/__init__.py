"""What a document says, read for people: its plain text (``Y.Text "content"``) or its rich tree
(``Y.XmlFragment``, "default" by default, as y-prosemirror and Tiptap write it), as plain text,
Markdown or HTML. The tree is read once into plain Python (``tree``), then rendered by pure
functions (``markdown``, ``html``, ``plain``); ``reading`` picks the kind a document is."""
