"""A rich tree (``collab.content.tree`` values) written into a ``Y.XmlFragment`` as y-prosemirror
would: one ``Y.XmlElement`` per node with its attributes, the runs of a block in one ``Y.XmlText``
whose formatting attributes are the marks, inline nodes (``hardBreak``) as elements between texts.
Call inside a transaction; pycrdt indexes text by UTF-8 bytes."""

from __future__ import annotations

from pycrdt import XmlElement, XmlFragment, XmlText

from .tree import Node, Run


def replace_fragment(fragment: XmlFragment, blocks: tuple[Node | Run, ...]) -> None:
    """Make ``fragment`` hold ``blocks`` (what was there is deleted; text directly under the
    fragment, which ProseMirror never writes, goes in a paragraph)."""
    count = len(fragment.children)
    if count:
        del fragment.children[0:count]
    for block in blocks:
        _write(fragment, block if isinstance(block, Node) else Node("paragraph", {}, (block,)))


def _write(parent: XmlFragment | XmlElement, node: Node) -> None:
    element = parent.children.append(XmlElement(node.tag))
    for key, value in node.attrs.items():
        element.attributes[key] = value
    text: XmlText | None = None
    at = 0
    for child in node.children:
        if isinstance(child, Run):
            if not child.text:
                continue
            if text is None:
                text, at = element.children.append(XmlText()), 0
            text.insert(at, child.text, dict(child.marks) or None)
            at += len(child.text.encode("utf-8"))
        else:
            text = None  # an element between runs: the next run starts a new text
            _write(element, child)
