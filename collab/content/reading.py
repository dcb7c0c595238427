"""Which kind a document is, and its text in each format: the rich tree when its fragment holds
anything, else the plain ``Y.Text "content"`` (whose Markdown is the text itself, as users write
Markdown there). Read on the loop from the live document; what is rendered is plain values."""

from __future__ import annotations

from dataclasses import dataclass
from html import escape

from pycrdt import Doc, Text, XmlFragment

from .html import to_html
from .markdown import to_markdown
from .plain import to_plain
from .tree import Node, Run, read_fragment

TEXT_NAME = "content"  # the plain Y.Text every plain tether editor binds to
RICH_NAME = "default"  # Tiptap's (and y-prosemirror's) default XmlFragment field


@dataclass(frozen=True, slots=True)
class Content:
    kind: str  # "rich" or "plain"
    blocks: tuple[Node | Run, ...]  # the rich tree (empty for a plain document)
    plain: str  # the plain document's text ("" for a rich one)

    def text(self) -> str:
        return to_plain(self.blocks) if self.kind == "rich" else self.plain

    def markdown(self) -> str:
        return to_markdown(self.blocks) if self.kind == "rich" else self.plain

    def html(self) -> str:
        if self.kind == "rich":
            return to_html(self.blocks)
        return "".join(f"<p>{escape(p)}</p>" for p in self.plain.split("\n\n") if p)


def read_content(doc: Doc, rich_name: str = RICH_NAME) -> Content:
    """The document's content; only the types it already has are looked at (``get`` would
    create an empty root in a document that has none)."""
    roots = doc.keys()
    if rich_name in roots:
        blocks = read_fragment(doc.get(rich_name, type=XmlFragment))
        if blocks:
            return Content("rich", blocks, "")
    plain = str(doc.get(TEXT_NAME, type=Text)) if TEXT_NAME in roots else ""
    return Content("plain", (), plain)
