"""A rich document's tree, read out of its ``Y.XmlFragment`` into plain values.

y-prosemirror writes each ProseMirror node as a ``Y.XmlElement`` named after its type (``heading``
with a ``level`` attribute, ``paragraph``, ``bulletList``, ``listItem``, ``codeBlock``...), inline
nodes (``hardBreak``, ``image``) as elements beside the text, and text as ``Y.XmlText`` whose
formatting attributes are the marks (``{"bold": {}}``, ``{"link": {"href": ...}}``). Numbers come
back as floats (yrs stores JSON numbers): whole ones are given back as ints.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pycrdt import XmlElement, XmlFragment, XmlText


@dataclass(frozen=True, slots=True)
class Run:
    """Text with the same marks all through (mark name → its attributes, ``{}`` for none)."""

    text: str
    marks: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Node:
    """An element: its type name, attributes and children (nodes and runs, in order)."""

    tag: str
    attrs: Mapping[str, Any] = field(default_factory=dict)
    children: tuple[Node | Run, ...] = ()


def read_fragment(fragment: XmlFragment) -> tuple[Node | Run, ...]:
    """The fragment's top-level nodes (a document's blocks); empty for an empty fragment."""
    return tuple(_read(child) for child in fragment.children)


def _read(node: XmlElement | XmlText | Any) -> Node | Run:
    if isinstance(node, XmlText):
        runs = [Run(text, _marks(attrs)) for text, attrs in node.diff() if isinstance(text, str)]
        if len(runs) == 1:
            return runs[0]
        return Node("#text", {}, tuple(runs))  # several runs: flattened by the renderers
    if isinstance(node, XmlElement):
        attrs = {key: _number(value) for key, value in node.attributes}
        return Node(str(node.tag or ""), attrs, tuple(_read(child) for child in node.children))
    return Run("")  # an embed of another kind: nothing to read


def _marks(attrs: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
    if not attrs:
        return {}
    return {name: value if isinstance(value, Mapping) else {} for name, value in attrs.items()}


def _number(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def inline_runs(children: tuple[Node | Run, ...]) -> list[Run | Node]:
    """A block's inline content with multi-run texts flattened: runs, and inline nodes."""
    out: list[Run | Node] = []
    for child in children:
        if isinstance(child, Node) and child.tag == "#text":
            out.extend(child.children)
        else:
            out.append(child)
    return out
