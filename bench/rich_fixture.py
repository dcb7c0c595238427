"""The rich documents and Markdown texts the attacks of issue 37 send, built with pycrdt in the
bench's process as y-prosemirror writes them (elements named after Tiptap's nodes, marks as
formatting attributes of ``Y.XmlText``), each a Yjs update.

The big one, ``rich_document``: 50,000 paragraphs at scale 1 (a heading every 20, a bold word
in every 10th paragraph), about 3.1 MB of text. Appending blocks one by one costs yrs a walk
from the first each time (quadratic: 15 s here), so the blocks are inserted last first at
index 0 (0.7 s), and the update is kept on disk under the temp directory for the next run.
"""

from __future__ import annotations

import os
import random
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pycrdt import Doc, XmlElement, XmlFragment, XmlText

from tether.protocol.wire.lib0 import Decoder

ROOT = "default"  # Tiptap's fragment, the server's default --rich-fragment
CACHE_DIR = Path(tempfile.gettempdir()) / "tether-bench-cache"
_VERSION = 2  # bump when the document's shape changes: older cached files are not read
_FIXTURE_CLIENT = 37_000_001
_SUBJECTS = ("harbour", "market", "captain", "storm", "lighthouse", "ferry", "garden", "mill")
_VERBS = ("watched", "repaired", "described", "remembered", "crossed", "painted", "counted")
_OBJECTS = ("the old pier", "a broken net", "the evening tide", "the long road", "a letter")
_MOODS = ("quiet", "cold", "bright", "late", "busy", "grey")


def rich_document(paragraphs: int, cache_dir: Path = CACHE_DIR) -> bytes:
    """The update of a rich document of ``paragraphs`` paragraphs, from the cache if built."""
    path = cache_dir / f"rich-{paragraphs}-v{_VERSION}.yjs"
    try:
        return path.read_bytes()
    except OSError:
        pass
    update = build_rich_document(paragraphs)
    cache_dir.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    partial.write_bytes(update)
    os.replace(partial, path)  # a concurrent run reads a whole file or none
    return update


def build_rich_document(paragraphs: int) -> bytes:
    rng = random.Random(37)
    blocks: list[tuple[str, str]] = []
    for index in range(paragraphs):
        if index % 20 == 0:
            blocks.append(("heading", f"Part {index // 20 + 1}"))
        text = (
            f"The {rng.choice(_SUBJECTS)} keeper {rng.choice(_VERBS)} {rng.choice(_OBJECTS)}"
            f" on day {rng.randrange(1, 10_000)}."
        )
        if index % 2:
            text += f" It was {rng.choice(_MOODS)}."
        blocks.append(("paragraph", text))
    doc = Doc(client_id=_FIXTURE_CLIENT)
    fragment = doc.get(ROOT, type=XmlFragment)
    with doc.transaction():
        for number, (tag, text) in enumerate(reversed(blocks)):
            attrs = {"level": 2} if tag == "heading" else {}
            element = fragment.children.insert(0, XmlElement(tag, attrs, [XmlText(text)]))
            if tag == "paragraph" and number % 10 == 0:
                subject = text.split(" ", 2)[1]
                element.children[0].format(4, 4 + len(subject), {"bold": {}})
    return doc.get_update()


def state_vector(doc: Doc) -> dict[int, int]:
    """Each client's next clock in ``doc``."""
    decoder = Decoder(doc.get_state())
    return {
        decoder.read_var_uint(): decoder.read_var_uint() for _ in range(decoder.read_var_uint())
    }


def opened(update: bytes, client_id: int) -> Doc:
    """A document holding ``update``, writing as ``client_id``."""
    doc = Doc(client_id=client_id)
    doc.apply_update(update)
    return doc


def last_text(doc: Doc) -> tuple[int, XmlText]:
    """The last block of the fragment and its text (a paragraph's ``XmlText``)."""
    children = doc.get(ROOT, type=XmlFragment).children
    index = len(children) - 1
    element = children[index]
    assert isinstance(element, XmlElement)
    text = element.children[0]
    assert isinstance(text, XmlText)
    return index, text


@dataclass(frozen=True)
class Anchored:
    """An update and a cursor in what it writes: the ID of the character the cursor is
    before (a Yjs relative position's item, assoc 0)."""

    update: bytes
    item: tuple[int, int]


def with_inline_node(base: bytes, client_id: int = 37_000_002) -> Anchored:
    """A paragraph after ``base``'s blocks with an inline node holding text (a mention with
    its label), the cursor inside that label: text the AI reads, but not a paragraph's own."""
    doc = opened(base, client_id)
    before = doc.get_state()
    fragment = doc.get(ROOT, type=XmlFragment)
    paragraph = fragment.children.append(XmlElement("paragraph", {}, [XmlText("See ")]))
    mention = paragraph.children.append(XmlElement("mention", {"id": "ada"}, [XmlText()]))
    paragraph.children.append(XmlText(" for the details."))
    label = mention.children[0]
    assert isinstance(label, XmlText)
    clock = state_vector(doc).get(client_id, 0)
    label.insert(0, "Ada Lovelace")
    return Anchored(doc.get_update(before), (client_id, clock + 4))


def long_items_text(items: int, tail: int = 400, client_id: int = 37_000_003) -> Anchored:
    """One paragraph whose text is ``items`` items: ``items - 1`` characters typed backwards
    (each its own item, "é", so the text before the cursor is not ASCII), then one item of
    ``tail`` ASCII characters; the cursor ``tail // 2`` characters into that last item."""
    doc = Doc(client_id=client_id)
    fragment = doc.get(ROOT, type=XmlFragment)
    with doc.transaction():
        paragraph = fragment.children.append(XmlElement("paragraph", {}, [XmlText()]))
        text = paragraph.children[0]
        assert isinstance(text, XmlText)
        clock = state_vector(doc).get(client_id, 0)
        text.insert(0, "a" * tail)
        for _ in range(items - 1):
            text.insert(0, "é")
    return Anchored(doc.get_update(), (client_id, clock + tail // 2))


def hostile_links() -> bytes:
    """Links and an image whose addresses hold a line break then markup, and a
    ``javascript:`` link: what a Markdown export must not turn into live HTML."""
    doc = Doc(client_id=37_000_004)
    fragment = doc.get(ROOT, type=XmlFragment)
    # A line ending separates a tag's attributes as a space does, and an export that keeps
    # line breaks but encodes spaces still writes these as tags.
    hrefs = (
        "https://example.com/\n<script>alert(1)</script>",
        "x)\n\n<svg\nonload=alert(1)>",
        "javascript:alert(1)",
    )
    with doc.transaction():
        for number, href in enumerate(hrefs):
            paragraph = fragment.children.append(XmlElement("paragraph", {}, [XmlText()]))
            text = paragraph.children[0]
            assert isinstance(text, XmlText)
            text.insert(0, f"Read link {number} here.")
            text.format(5, 11, {"link": {"href": href}})
        source = "pic.png\n<img\nsrc=x\nonerror=alert(1)>"
        image = XmlElement("image", {"src": source, "alt": "pic"})
        fragment.children.append(XmlElement("paragraph", {}, [XmlText("An image: "), image]))
    return doc.get_update()


def ordered_list(start: float) -> bytes:
    """An ordered list whose ``start`` attribute is ``start`` (NaN, infinity)."""
    doc = Doc(client_id=37_000_005)
    item = XmlElement("listItem", {}, [XmlElement("paragraph", {}, [XmlText("first")])])
    doc.get(ROOT, type=XmlFragment).children.append(
        XmlElement("orderedList", {"start": start}, [item])
    )
    return doc.get_update()


def nested_list(depth: int) -> str:
    """A bullet list nested ``depth`` deep, then a paragraph: every word is distinct."""
    lines = [f"{'  ' * level}- level{level + 1} item" for level in range(depth)]
    return "\n".join(lines) + "\n\nclosing paragraph after the list\n"


def nested_quote(depth: int) -> str:
    return "> " * depth + "innermost quote\n\nclosing paragraph after the quote\n"
