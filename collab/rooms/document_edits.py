"""Changes that come from outside any connection (a REST import, a version restore), applied to
a loaded room as ordinary CRDT changes: broadcast to its editors, stored, durable when awaited.

Knows nothing of HTTP. An imported update goes through the same checks, in the same order, as
a peer's update in ``Room.receive_update``: the scan (runs merged), the update guard (nesting,
dependencies), the origin-order checks before and after applying; a refusal leaves the document
unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

from pycrdt import Doc, Text, XmlElement, XmlFragment

from tether.protocol.updates.update_merge import scan_merged
from tether.protocol.updates.update_scan import MalformedUpdate

from ..content.html_in import HtmlSource
from ..content.markdown_in import MarkdownLimits, MarkdownRefused, MarkdownSource
from ..content.prosemirror_json import ProseMirrorSource, TreeLimits, TreeRefused
from ..content.reading import TEXT_NAME, Content, read_content
from ..content.tree import Node, Run, inline_runs, read_fragment
from ..content.tree_write import insert_blocks, replace_fragment
from ..runtime import pools
from ..runtime.gc_hold import full_collections_held
from ..updates.applying import InvalidUpdate, apply_update
from ..updates.guard import UpdateRefused, check_applied_origin_order, check_origin_order
from ..updates.slicing import broadcast_pieces, load_slices, slice_update, wants_slices
from ..updates.update_reads import ReadUpdate, read_update, reads_off_loop
from .import_budget import Charge, budget_of, estimate, estimate_tree
from .room import Room
from .room_settings import RoomSettings


@dataclass(frozen=True, slots=True)
class RestOrigin:
    """The origin of a change made over REST (hooks see it in ``on_change``)."""

    action: str  # "import" or "restore"
    subject: str  # the token's subject


@dataclass(frozen=True, slots=True)
class TreeBody:
    """A request body read into a tree in the imports pool: ``kind`` "json" (ProseMirror JSON)
    or "html"; ``shape`` (json) "doc" for a whole document, "nodes" for content to add."""

    kind: str
    data: bytes
    shape: str = "doc"


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a tree goes in the document's: ``mode`` "replace" (the whole tree), "blocks"
    (only the top-level blocks that differ are replaced, so an editor's edits in the others
    stay), "append" (after the last block), "node" (the element whose ``attribute`` is
    ``value`` is replaced, as Tiptap's UniqueID extension names nodes)."""

    mode: str = "replace"
    attribute: str = ""
    value: str = ""


# A change inserts blocks at an index: yrs walks that many siblings for each block inserted
# (about 14 ns a step here; 1,000 blocks after 50,000 took 0.7 s). Past this many steps a
# PATCH is refused rather than held in the imports pool for minutes.
MAX_INSERT_STEPS = 20_000_000

Source = MarkdownSource | ProseMirrorSource | HtmlSource


class ImportRefused(Exception):
    """The update is not applied; ``limit`` names the check (as in tether_update_refusals_total),
    ``str(exc)`` is safe to show the client."""

    def __init__(self, limit: str, reason: str) -> None:
        super().__init__(reason)
        self.limit = limit


def import_update(
    room: Room, update: bytes, origin: object, *, under_way: bool = False
) -> asyncio.Future[int]:
    """Apply a Yjs update to ``room`` as one change; raises ImportRefused (nothing applied),
    at once or, for a big update read in a worker thread first, from the future.
    ``under_way``: the request already had work done in the imports pool (a tree built)."""
    if reads_off_loop(update):
        return asyncio.ensure_future(_import_off_loop(room, update, origin, under_way))
    try:
        read = scan_merged(update)  # runs merged, as on the socket path
    except MalformedUpdate as exc:
        raise ImportRefused("malformed", f"malformed update: {exc}") from exc
    return _import(room, read, origin)


async def _import_off_loop(room: Room, update: bytes, origin: object, under_way: bool) -> int:
    # An import's later jobs go ahead of requests still waiting for their first: each one
    # admitted finishes before the next starts, rather than all of them at the end.
    imports = pools.current().imports
    with full_collections_held():  # its objects would make each full pass long
        try:
            read = await read_update(update, imports, first=under_way)
        except MalformedUpdate as exc:
            raise ImportRefused("malformed", f"malformed update: {exc}") from exc
        if not wants_slices(*read):
            return await _import(room, read, origin)
        # Many structs: applied in slices, the loop free between them, as on the socket path.
        sliced = await imports.run(slice_update, *read)
        if sliced is None:
            raise ImportRefused("malformed", "update refused: its structs cannot be put in order")
        pieces = None
        if len(read[0]) > room.settings.max_message_bytes:  # the peers' copy, cut off the loop
            pieces = await imports.run(broadcast_pieces, read[0], room.settings.max_message_bytes)
        try:
            return await room.import_sliced(read[0], sliced, origin, pieces)
        except (InvalidUpdate, UpdateRefused) as exc:
            limit = exc.limit if isinstance(exc, UpdateRefused) else "apply_failed"
            raise ImportRefused(limit, f"update refused: {exc}") from exc


def _import(room: Room, read: ReadUpdate, origin: object) -> asyncio.Future[int]:
    update, scan = read
    try:
        room.guard.check(scan)  # MissingDependencies is an UpdateRefused too
        applied_pairs = check_origin_order(room.doc, scan, room.guard)
    except UpdateRefused as exc:
        raise ImportRefused(exc.limit, str(exc)) from exc

    def change(doc: Doc) -> None:
        apply_update(doc, update, origin)
        if applied_pairs:
            check_applied_origin_order(doc, applied_pairs)

    try:
        # Room.edit re-scans and admits what actually changed, broadcasts and stores it.
        return room.edit(change, origin)
    except (InvalidUpdate, UpdateRefused) as exc:
        # yrs may have applied part of it before failing, and nothing of it was broadcast or
        # stored: rebuild the document from the store, as the socket path does.
        room.rebuild()
        limit = exc.limit if isinstance(exc, UpdateRefused) else "apply_failed"
        raise ImportRefused(limit, f"update refused: {exc}") from exc


def set_text(room: Room, target: str, origin: object) -> asyncio.Future[int]:
    """Make the room's plain text (``content``) equal ``target`` with one new change that
    replaces only the part that differs."""

    def change(doc: Doc) -> None:
        text = doc.get(TEXT_NAME, type=Text)
        current = str(text)
        start, end_current, end_target = _differing_span(current, target)
        # pycrdt indexes Text by UTF-8 bytes
        first = _utf8_len(current[:start])
        last = first + _utf8_len(current[start:end_current])
        if last > first:
            del text[first:last]
        if end_target > start:
            text.insert(first, target[start:end_target])

    return room.edit(change, origin)


async def set_tree(
    room: Room,
    blocks: tuple[Node | Run, ...] | str | Source | TreeBody,
    origin: object,
    placement: Placement = Placement(),
) -> int:
    """Make the room's rich tree hold ``blocks`` (or the blocks of a Markdown text, or of a
    ProseMirror JSON or HTML body), placed as ``placement`` says, with one new change, built in
    a worker thread on a copy of the document and then imported as any update is (checked,
    sliced if big); returns once it is durable. A change made meanwhile by an editor stays:
    only what the copy held is replaced. Raises ``ImportRefused`` (a limit of the content or
    of the update) or ``ImportBusy`` (an import that the memory budget has no room for;
    collab.rooms.import_budget)."""
    name = room.settings.rich_fragment
    charge: contextlib.AbstractContextManager[object] = contextlib.nullcontext()
    if isinstance(blocks, str):
        blocks, charge = await _charged(room.settings, blocks)
    elif isinstance(blocks, TreeBody):
        blocks, charge = await _charged_body(room.settings, blocks)
    with full_collections_held(), charge:
        imports = pools.current().imports
        state = room.doc.get_update()
        update = await imports.run(_tree_update, state, blocks, name, placement, first=False)
        return await import_update(room, update, origin, under_way=True)


async def _charged(settings: RoomSettings, markdown: str) -> tuple[MarkdownSource, Charge]:
    """The Markdown with the limits it is read under (as deep as the update guard lets a tree
    nest), and its worst case charged to the process's import memory budget (waits, or raises
    ``ImportBusy``)."""
    limits = settings.imports
    read_as = MarkdownLimits(max_nodes=limits.max_nodes, max_depth=settings.max_nesting_depth)
    worst = estimate(len(markdown.encode("utf-8")), limits.max_nodes)
    return MarkdownSource(markdown, read_as), await budget_of(limits).charge(worst)


async def _charged_body(settings: RoomSettings, body: TreeBody) -> tuple[Source, Charge]:
    """The body with the limits it is read under, and its worst case charged to the import
    memory budget, as a Markdown import is (``_charged``)."""
    limits = settings.imports
    read_as = TreeLimits(max_nodes=limits.max_nodes, max_depth=settings.max_nesting_depth)
    worst = estimate_tree(body.kind, len(body.data), limits.max_nodes)
    source: Source
    if body.kind == "html":
        try:
            text = body.data.decode("utf-8")
        except UnicodeDecodeError:
            raise ImportRefused("malformed", "the body is not UTF-8 text") from None
        source = HtmlSource(text, read_as)
    else:
        source = ProseMirrorSource(body.data, read_as, body.shape)
    return source, await budget_of(limits).charge(worst)


def _tree_update(
    state: bytes,
    blocks: tuple[Node | Run, ...] | Source,
    fragment_name: str,
    placement: Placement = Placement(),
) -> bytes:
    if isinstance(blocks, MarkdownSource | ProseMirrorSource | HtmlSource):
        try:
            blocks = blocks.parse()  # first: its tokens are gone before the copy is made
        except (MarkdownRefused, TreeRefused) as exc:
            raise ImportRefused(exc.limit, str(exc)) from exc
    doc = Doc()  # a fresh client id: the change is this one's own
    layers = load_slices(state) if reads_off_loop(state) else None
    apply_update(doc, state, origin=None, layers=layers)  # slices: the GIL is let go between
    before = doc.get_state()
    try:
        fragment = doc.get(fragment_name, type=XmlFragment)
    except Exception as exc:  # the name holds another kind of shared type
        raise ImportRefused(
            "kind", f"this document's {fragment_name!r} is not a rich-text fragment"
        ) from exc
    with doc.transaction():
        _place(fragment, blocks, placement)
    del blocks  # the tree, before the update is encoded beside the copy
    return doc.get_update(before)


def _place(fragment: XmlFragment, blocks: tuple[Node | Run, ...], placement: Placement) -> None:
    if placement.mode == "replace":
        replace_fragment(fragment, blocks)
    elif placement.mode == "append":
        at = len(fragment.children)
        _check_steps(at, len(blocks))
        insert_blocks(fragment, at, blocks)
    elif placement.mode == "blocks":
        _replace_differing(fragment, blocks)
    else:
        _replace_node(fragment, blocks, placement.attribute, placement.value)


def _replace_differing(fragment: XmlFragment, blocks: tuple[Node | Run, ...]) -> None:
    """Only the top-level blocks between those the document and ``blocks`` share at the start
    and at the end are replaced (what Tiptap Cloud's PATCH of a whole document does: an edit
    an editor is making in a block the new tree leaves as it was is not undone)."""
    held = [_flat(block) for block in read_fragment(fragment)]
    wanted = [_flat(block) for block in blocks]
    start = 0
    while start < min(len(held), len(wanted)) and held[start] == wanted[start]:
        start += 1
    end = 0
    while end < min(len(held), len(wanted)) - start and held[-1 - end] == wanted[-1 - end]:
        end += 1
    _check_steps(start, len(wanted) - start - end)
    if len(held) - end > start:
        del fragment.children[start : len(held) - end]
    insert_blocks(fragment, start, tuple(wanted[start : len(wanted) - end]))


def _replace_node(
    fragment: XmlFragment, blocks: tuple[Node | Run, ...], attribute: str, value: str
) -> None:
    """The first element (in document order) whose ``attribute`` reads as ``value`` is
    replaced by ``blocks``, where it stands."""
    found = _find_element(fragment, attribute, value)
    if found is None:
        raise ImportRefused(
            "node_not_found", f"no node of this document has {attribute[:64]}={value[:64]!r}"
        )
    parent, index = found
    _check_steps(index, len(blocks))
    del parent.children[index]
    insert_blocks(parent, index, blocks)


def _find_element(
    fragment: XmlFragment, attribute: str, value: str
) -> tuple[XmlFragment | XmlElement, int] | None:
    """(its parent, its index there), walking the tree without recursion."""
    waiting: list[XmlFragment | XmlElement] = [fragment]
    while waiting:
        parent = waiting.pop()
        found: list[XmlElement] = []
        for index, child in enumerate(parent.children):
            if not isinstance(child, XmlElement):
                continue
            held = child.attributes.get(attribute)
            if held is not None and _reads_as(held, value):
                return parent, index
            found.append(child)
        waiting.extend(reversed(found))  # the first child is looked in first
    return None


def _reads_as(held: object, value: str) -> bool:
    if isinstance(held, float) and held.is_integer():
        held = int(held)
    return str(held) == value if isinstance(held, str | int) else False


def _check_steps(index: int, inserted: int) -> None:
    if index * inserted > MAX_INSERT_STEPS:
        raise ImportRefused(
            "max_insert_steps",
            f"this change inserts {inserted} blocks after {index} others; each insert walks"
            " the blocks before it: insert fewer at once, or PUT the whole document",
        )


def _flat(block: Node | Run) -> Node | Run:
    """``block`` with texts of several runs read as the runs themselves (as trees are written),
    and empty runs left out: a tree read back compares equal to the one written."""
    if isinstance(block, Run):
        return block
    children = tuple(
        _flat(child)
        for child in inline_runs(block.children)
        if not isinstance(child, Run) or child.text
    )
    return Node(block.tag, block.attrs, children)


def content_of_state(state: bytes, rich_name: str) -> Content:
    """What a saved full update (a version) says, read as ``collab.content`` reads a room.
    O(document): run it in a worker thread (the renders or imports pool). A big state is
    applied in slices, so the thread lets the GIL go to the loop between them (yrs holds it
    through one apply)."""
    doc = Doc()
    layers = load_slices(state) if reads_off_loop(state) else None
    apply_update(doc, state, origin=None, layers=layers)
    return read_content(doc, rich_name)


def _differing_span(current: str, target: str) -> tuple[int, int, int]:
    """(start, end in current, end in target) of the part between the common prefix and
    suffix. Runs on the loop (``set_text`` is a room edit): compared a block at a time by
    slice equality, so a 3 MB text costs milliseconds, not a Python step per character."""
    start = _common_prefix(current, target)
    limit = min(len(current), len(target)) - start
    tail = min(_common_prefix(current[::-1], target[::-1]), limit)
    return start, len(current) - tail, len(target) - tail


def _common_prefix(a: str, b: str, block: int = 4096) -> int:
    """How many leading characters ``a`` and ``b`` share."""
    limit = min(len(a), len(b))
    low = 0
    while low < limit:
        high = min(low + block, limit)
        if a[low:high] != b[low:high]:
            while high - low > 1:  # the first difference is in [low, high)
                middle = (low + high) // 2
                if a[low:middle] == b[low:middle]:
                    low = middle
                else:
                    high = middle
            return low
        low = high
    return limit


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8"))
