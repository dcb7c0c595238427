"""What the AI reads of a big rich document costs what changed, not the document (issue 37):
windows of blocks around a cursor, kept block by block and read again only where an update
touched them; prompts cut before anything reads them; anchors refused without reading and
resolved with the clock read at every step. Work is counted (blocks rendered, characters a
tokenizer saw, yrs walks), never timed."""

from __future__ import annotations

import random

import pytest
from pycrdt import Doc, Text, XmlElement, XmlFragment, XmlText

from tether.ai.errors import BadRequest
from tether.ai.suggest.document_text import DocumentText
from tether.ai.text import relative
from tether.ai.text.anchors import TextAnchor, Where
from tether.ai.text.context import COMPLETE_PREFIX, ContextBuilder, most_tokens
from tether.ai.text.regions import RegionIndex
from tether.ai.text.relative import locate
from tether.ai.text.rich_view import RichReader
from tether.collab.updates.guard import UpdateGuard
from tether.protocol.updates.update_scan import scan_update
from tether.protocol.wire.relative_position import RelativePosition


def sentence(number: int) -> str:
    return f"The harbour keeper watched the old pier on day {number}."


def rich_update(paragraphs: list[str]) -> bytes:
    """A y-prosemirror-shaped document of ``paragraphs``, written last first (each insert at
    the fragment's start: appending one by one walks the whole fragment every time)."""
    doc = Doc()
    fragment = doc.get("default", type=XmlFragment)
    with doc.transaction() as txn:
        native, raw = fragment.integrated, txn._txn
        for text in reversed(paragraphs):
            native.insert_element_prelim(raw, 0, "paragraph").insert_str(raw, 0, text)
    return doc.get_update()


class Served:
    """The server's side: a document, its update guard and the AI's reading of it, following
    each update as the AI engine's ``on_change`` hook does."""

    def __init__(self, update: bytes, *, before: int = 5_600) -> None:
        self.doc = Doc()
        self.doc.apply_update(update)
        self.guard = UpdateGuard(128)
        scan = scan_update(update)
        self.guard.admit(scan, self.guard.check(scan))
        self.document = DocumentText("default", before=before)

    def apply(self, update: bytes, peer_id: int | None = 1) -> None:
        scan = scan_update(update)
        parents = self.guard.check(scan)
        self.doc.apply_update(update)
        self.guard.admit(scan, parents)
        self.document.changed(self.doc, update, self.guard, peer_id)


class Editor:
    """An editor's replica: each edit is one transaction whose update (as Yjs clients send
    it: its own items and deletes) is applied to the server at once."""

    def __init__(self, served: Served, update: bytes) -> None:
        self.served = served
        self.doc = Doc()
        self.doc.apply_update(update)
        self.fragment = self.doc.get("default", type=XmlFragment)
        self.updates: list[bytes] = []
        self.doc.observe(lambda event: self.updates.append(event.update))

    def edit(self, change) -> bytes:  # type: ignore[no-untyped-def]
        with self.doc.transaction():
            change(self.fragment)
        if not self.updates:
            return b""  # nothing changed
        update = self.updates.pop()
        self.served.apply(update)
        return update

    def type_at_end(self, block: int, text: str) -> int:
        """Type ``text`` at the end of block ``block``'s text; the clock of its last unit."""
        node = self.fragment.children[block].children[0]
        update = self.edit(lambda _f: node.insert(len(node), text))
        return scan_update(update).items[-1].clock + len(text.encode("utf-16-le")) // 2 - 1


def whole(doc: Doc) -> list[str]:
    """Every top-level block's text as a fresh read of the whole tree renders it."""
    fragment = doc.get("default", type=XmlFragment)
    with doc.transaction() as txn:
        view = RichReader().read(fragment.integrated, txn._txn, fresh=True)
    return view.text.split("\n\n") if view.text else []


COLD: dict[int, int] = {}  # blocks a first read rendered, by document size


@pytest.mark.parametrize("paragraphs", [2_000, 20_000])
def test_typing_in_a_big_rich_document_renders_one_block_per_keystroke(paragraphs: int) -> None:
    update = rich_update([sentence(n) for n in range(paragraphs)])
    served = Served(update)
    editor = Editor(served, update)
    document = served.document
    last = paragraphs - 1
    reading = document.at(served.doc, last)
    cold = document.reader.rendered
    # The window: the opening block and what a prompt may use before the cursor's, however
    # long the document (about 100 of these 60-character paragraphs, not 20,000).
    assert 80 <= cold <= 130, cold
    COLD[paragraphs] = cold
    assert max(COLD.values()) <= 1.1 * min(COLD.values()), COLD  # not 10 times more
    assert len(reading.text) <= document.before + 2 * 100
    assert reading.text.startswith(sentence(0) + "\n\n") and reading.text.endswith(sentence(last))
    spot = document.spot(reading, TextAnchor.at(reading.text, len(reading.text)))
    for key in range(20):
        editor.type_at_end(last, "x")
        rendered = document.reader.rendered
        again, anchor = document.find(served.doc, spot)  # the staleness check's read
        assert document.reader.rendered == rendered + 1  # the touched block, nothing else
        assert again.text.endswith(sentence(last) + "x" * (key + 1))
        assert anchor.typed(again.text) == "x" * (key + 1)
    # Another editor typing far away costs this window nothing.
    editor.type_at_end(paragraphs // 2, " far off")
    rendered = document.reader.rendered
    document.find(served.doc, spot)
    assert document.reader.rendered == rendered


def test_a_new_paragraph_and_a_joined_one_move_the_window_along() -> None:
    update = rich_update([sentence(n) for n in range(3_000)])
    served = Served(update)
    editor = Editor(served, update)
    document = served.document
    reading = document.at(served.doc, 2_000)
    spot = document.spot(reading, TextAnchor.at(reading.text, reading.view.block_start(2_000)))
    cold = document.reader.rendered
    # Enter just above the spot: one block inserted; everything kept moves down by one.
    new = XmlElement("paragraph", contents=[XmlText("new")])
    editor.edit(lambda f: f.children.insert(1_990, new))
    again, anchor = document.find(served.doc, spot)
    assert document.reader.rendered == cold + 1  # the new paragraph only
    assert again.text[anchor.resolve(again.text) :].startswith(sentence(2_000))
    # Far above it: nothing in the window changes.
    editor.edit(lambda f: f.children.insert(10, XmlElement("paragraph")))
    again, anchor = document.find(served.doc, spot)
    assert document.reader.rendered == cold + 1
    assert again.text[anchor.resolve(again.text) :].startswith(sentence(2_000))
    # A paragraph deleted above it (joined into the one before).
    rendered = document.reader.rendered
    editor.edit(lambda f: f.children.__delitem__(1_985))
    again, anchor = document.find(served.doc, spot)
    assert document.reader.rendered <= rendered + 1
    assert again.text[anchor.resolve(again.text) :].startswith(sentence(2_000))
    assert again.view is not None and again.view.block_text(2_001) == sentence(2_000)  # +2 -1


def test_windows_say_what_the_whole_document_says_through_random_edits() -> None:
    rng = random.Random(37)
    update = rich_update([sentence(n) for n in range(300)])
    served = Served(update, before=400)
    editor = Editor(served, update)
    document = served.document
    for step in range(300):
        count = len(editor.fragment.children)
        block = rng.randrange(count)
        kind = rng.choice(["type", "type", "type", "enter", "join", "bold", "heading", "paste"])
        element = editor.fragment.children[block]
        node = element.children[0] if len(element.children) else None
        if kind == "type" and isinstance(node, XmlText):
            at = rng.randrange(len(node) + 1)
            editor.edit(lambda _f, node=node, at=at, word=f"w{step}": node.insert(at, word))
        elif kind == "enter":
            paragraph = XmlElement("paragraph", contents=[XmlText(f"new {step}")])
            editor.edit(lambda f, p=paragraph, at=block: f.children.insert(at, p))
        elif kind == "join" and count > 10:
            editor.edit(lambda f, at=block: f.children.__delitem__(at))
        elif kind == "bold" and isinstance(node, XmlText):
            editor.edit(lambda _f, node=node: node.format(0, min(3, len(node)), {"bold": {}}))
        elif kind == "heading":
            editor.edit(lambda _f, e=element: e.attributes.__setitem__("level", "2"))
        elif kind == "paste":  # more blocks than one update is followed for: read afresh
            pasted = [XmlElement("paragraph", contents=[XmlText(f"p{k}")]) for k in range(20)]

            def paste(f: XmlFragment, pasted: list[XmlElement] = pasted, at: int = block) -> None:
                for offset, element in enumerate(pasted):
                    f.children.insert(at + offset, element)

            editor.edit(paste)
        center = rng.randrange(len(editor.fragment.children))
        reading = document.around(served.doc, Where(center, document.reader.epoch))
        truth = whole(served.doc)
        view = reading.view
        assert view is not None
        for index in {0, *range(max(0, center - 12), min(len(truth), center + 4))}:
            shown = view.block_text(index)
            assert shown is None or shown == truth[index], (step, kind, index)
        assert view.block_text(center) == truth[center], (step, kind)


def test_a_prompt_in_a_2_mb_paragraph_is_cut_before_anything_reads_it() -> None:
    read: list[int] = []

    def counted(text: str) -> int:
        read.append(len(text))
        return max(1, len(text) // 4)

    builder = ContextBuilder(counted, budget_tokens=700)
    paragraph = " ".join(sentence(n) for n in range(40_000))[:2_000_000]
    shapes = (
        "Title\n\n" + paragraph,
        paragraph + "\n\nThe writer types here",
        paragraph,
        paragraph + "\n\n" + paragraph,  # was two budgets' worth: the opening's and the cursor's
    )
    for text in shapes:
        read.clear()
        regions = RegionIndex(counted)
        prompt = builder.complete(regions, text, len(text))
        body = prompt.text[len(COMPLETE_PREFIX) :]
        # The whole prompt within the budget (the opening included), the cursor's text last.
        assert most_tokens(body) <= builder.budget_tokens + 2, len(body)
        assert text.endswith(prompt.window[-20:]) and body.endswith(prompt.window[-20:])
        # Nothing was split, hashed or counted beyond what a prompt could hold.
        assert sum(len(region.text) for region in regions.regions) <= 2 * builder.context_chars
        assert sum(read) <= 2 * builder.context_chars + len(COMPLETE_PREFIX), read


def test_resolving_an_anchor_reads_the_clock_before_every_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each step back through one long insertion walks the text's items twice (milliseconds
    in a text of very many); the budget must hold at every step, not every 64th."""
    writer = Doc()
    writer.get("content", type=Text).insert(0, "é" + "a" * 3_000)  # one item, non-ASCII first
    update = writer.get_update()
    served = Served(update)
    now = [0.0]
    walks = [0]
    walk = relative._offset

    def clock() -> float:
        now[0] += 0.001  # every reading of the clock finds a millisecond gone
        return now[0]

    def counted_walk(*args):  # type: ignore[no-untyped-def]
        walks[0] += 1
        return walk(*args)

    monkeypatch.setattr(relative.time, "perf_counter", clock)
    monkeypatch.setattr(relative, "_offset", counted_walk)
    position = RelativePosition(item=(writer.client_id, 2_500))
    with pytest.raises(BadRequest, match="too costly"):
        locate(served.doc, position, served.guard, "default", "content")
    steps = relative.STEP_BUDGET_SECONDS / 0.001
    assert walks[0] <= 2 * steps + 6, walks[0]  # 2,500 steps otherwise (or 64 before a check)
    monkeypatch.setattr(relative.time, "perf_counter", lambda: 0.0)
    near = RelativePosition(item=(writer.client_id, 12))
    assert locate(served.doc, near, served.guard, "default", "content").offset == 12


def test_a_block_seen_before_is_found_without_walking_to_it_and_a_wrong_hint_is_not_trusted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    update = rich_update([sentence(n) for n in range(2_000)])
    served = Served(update)
    editor = Editor(served, update)
    clock = editor.type_at_end(1_500, " typed")
    position = RelativePosition(item=(editor.doc.client_id, clock), assoc=-1)
    walks = [0]
    walk = relative._offset

    def counted_walk(*args):  # type: ignore[no-untyped-def]
        walks[0] += 1
        return walk(*args)

    monkeypatch.setattr(relative, "_offset", counted_walk)

    def located(seen) -> tuple[relative.Place, int]:  # type: ignore[no-untyped-def]
        walks[0] = 0
        found = locate(served.doc, position, served.guard, "default", "content", seen)
        return found, walks[0]

    place, walked = located(None)
    assert place.path == (1_500, 0) and place.offset == len(sentence(1_500) + " typed")
    assert place.block_hash is not None
    digest = place.block_hash
    hinted, fewer = located(lambda ident: (1_500, digest) if ident == place.block else None)
    assert hinted == place and fewer == walked - 1  # no walk of the fragment to block 1,500
    for wrong in ((1_499, digest), (1_500, digest + 1), (5_000, digest)):
        assert located(lambda ident, wrong=wrong: wrong) == (place, walked)
