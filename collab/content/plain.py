"""A rich tree as plain text: each block's text, blocks separated by a blank line, a hard break
as a line break; no markers of any kind (what a search index or a word count wants)."""

from __future__ import annotations

from .markdown import INLINE_TAGS
from .tree import Node, Run, inline_runs


def to_plain(blocks: tuple[Node | Run, ...]) -> str:
    return "\n\n".join(_leaves(blocks))


def _leaves(blocks: tuple[Node | Run, ...] | list[Node | Run]) -> list[str]:
    out: list[str] = []
    for block in blocks:
        if isinstance(block, Run) or block.tag == "#text" or _holds_text(block):
            out.append(_text(block))
        elif block.tag not in INLINE_TAGS:
            out.extend(_leaves(block.children))
    return out


def _holds_text(node: Node) -> bool:
    return any(
        isinstance(child, Run) or child.tag == "#text" or child.tag in INLINE_TAGS
        for child in node.children
    )


def _text(block: Node | Run) -> str:
    if isinstance(block, Run):
        return block.text
    parts: list[str] = []
    for piece in inline_runs(block.children):
        if isinstance(piece, Run):
            parts.append(piece.text)
        elif piece.tag == "hardBreak":
            parts.append("\n")
        else:
            parts.append(_text(piece))
    return "".join(parts)
