"""A rich tree (``collab.content.tree`` values) written into a ``Y.XmlFragment`` as y-prosemirror
would: one ``Y.XmlElement`` per node with its attributes, the runs of a block in one ``Y.XmlText``
whose formatting attributes are the marks, inline nodes (``hardBreak``) as elements between texts.
Call inside a transaction; pycrdt indexes text by UTF-8 bytes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pycrdt import XmlElement, XmlFragment, XmlText

from .tree import Node, Run


def replace_fragment(fragment: XmlFragment, blocks: tuple[Node | Run, ...]) -> None:
    """Make ``fragment`` hold ``blocks`` (what was there is deleted; text directly under the
    fragment, which ProseMirror never writes, goes in a paragraph)."""
    count = len(fragment.children)
    if count:
        del fragment.children[0:count]
    insert_blocks(fragment, 0, blocks)


def insert_blocks(
    parent: XmlFragment | XmlElement, index: int, blocks: tuple[Node | Run, ...]
) -> None:
    """``blocks`` into ``parent`` before its child at ``index`` (text right under the fragment
    goes in a paragraph). yrs walks ``index`` children for each block inserted: the caller
    bounds ``index`` times the blocks."""
    if isinstance(parent, XmlFragment):
        blocks = tuple(b if isinstance(b, Node) else Node("paragraph", {}, (b,)) for b in blocks)
    _write_children(parent, blocks, index)


def _write_children(
    parent: XmlFragment | XmlElement, children: tuple[Node | Run, ...], index: int = 0
) -> None:
    """``children`` into ``parent`` at ``index``, each group of runs as one ``XmlText``.
    Inserted last first, each at ``index``: yrs finds an index by walking the children, so
    appending n children one by one costs O(n²) (60,000 list items: 46 s), and inserting at 0
    costs O(n)."""
    parts: list[Node | list[Run]] = []
    for child in children:
        if isinstance(child, Run):
            if not child.text:
                continue
            if parts and isinstance(parts[-1], list):
                parts[-1].append(child)
            else:
                parts.append([child])
        else:
            parts.append(child)  # an element between runs: the next run starts a new text
    for part in reversed(parts):
        if isinstance(part, list):
            text = parent.children.insert(index, XmlText())
            # Last run first, each at the front, for the same reason: yrs walks a text from
            # its start to find an index, so appending run after run is O(runs²) (64 KiB of
            # "*a* " took 15-30 s), and a format range per run walks as far. At the front each
            # insert is O(1) and the runs' marks read back as written (tests/collab).
            for run in reversed(part):
                text.insert(0, run.text, _marks(run))
            continue
        element = parent.children.insert(index, XmlElement(part.tag))
        for key, value in part.attrs.items():
            element.attributes[key] = dict(value) if isinstance(value, Mapping) else value
        _write_children(element, part.children)


def _marks(run: Run) -> dict[str, Any] | None:
    """A run's marks as the plain dicts pycrdt takes (the tree may hold read-only mappings)."""
    if not run.marks:
        return None
    return {
        name: dict(value) if isinstance(value, Mapping) else value
        for name, value in run.marks.items()
    }
