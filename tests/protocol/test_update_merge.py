"""protocol.updates.update_merge: a run of one client's items that Yjs would have sent as one item
is re-encoded as one, and applying the merged update makes exactly the document the original makes
(pycrdt's state and update, and Yjs's text), emoji and deletes included."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pycrdt import Array, Doc, Map, Text, merge_updates

from tests.jsclient import yjs_applied
from tether.bench.shape_updates import (
    ATTACKER,
    OWNER,
    any_integer,
    item,
    long_item,
    string,
    unmerged_any_run,
    unmerged_run,
    update,
)
from tether.protocol.updates.update_merge import merge_runs, scan_merged
from tether.protocol.updates.update_scan import (
    ANY,
    DELETED,
    STRING,
    read_item_header,
    scan_update,
    skip_content,
    skip_values,
)
from tether.protocol.wire.lib0 import Decoder, write_var_uint

_ORIGIN, _RIGHT = 0x80, 0x40


def explode(source: bytes, rnd: random.Random) -> bytes:
    """``source`` with its text, array and deleted items cut at random places into runs of
    items, each continuing the one before: what a client that never merges would send."""
    d = Decoder(source)
    clients = d.read_var_uint()
    out = [write_var_uint(clients)]
    for _ in range(clients):
        count, client, first = d.read_var_uint(), d.read_var_uint(), d.read_var_uint()
        structs = _exploded_structs(d, source, client, first, count, rnd)
        out += [write_var_uint(len(structs)), write_var_uint(client), write_var_uint(first)]
        out += structs
    out.append(source[d.pos :])
    return b"".join(out)


def _exploded_structs(
    d: Decoder, source: bytes, client: int, clock: int, count: int, rnd: random.Random
) -> list[bytes]:
    structs: list[bytes] = []
    for _ in range(count):
        start = d.pos
        info = d.read_bytes(1)[0]
        kind = info & 0x1F
        if kind in (0, 10):  # GC, Skip
            clock += d.read_var_uint()
            structs.append(source[start : d.pos])
            continue
        right = read_item_header(d, info)[1]
        header = source[start : d.pos]
        units = _units(d, source, kind, info)
        if units is None:
            clock += skip_content(d, kind)
            structs.append(source[start : d.pos])
            continue
        for index, (content, length) in enumerate(_grouped(kind, units, rnd)):
            if index:
                header = bytes([kind | _ORIGIN | (_RIGHT if right else 0)])
                header += write_var_uint(client) + write_var_uint(clock - 1)
                if right:
                    header += write_var_uint(right[0]) + write_var_uint(right[1])
            structs.append(header + content)
            clock += length
    return structs


def _units(d: Decoder, source: bytes, kind: int, info: int) -> list[bytes] | None:
    """An item's content as the units it may be cut between, or None if it is not cut."""
    if info & 0x20:
        return None  # a map entry
    if kind == STRING:
        return [char.encode() for char in d.read_bytes(d.read_var_uint()).decode()]
    if kind == DELETED:
        return [b""] * d.read_var_uint()
    if kind == ANY:
        values = []
        for _ in range(d.read_var_uint()):
            start = d.pos
            skip_values(d, 1)
            values.append(source[start : d.pos])
        return values
    return None


def _grouped(kind: int, units: list[bytes], rnd: random.Random) -> list[tuple[bytes, int]]:
    """Consecutive units in groups of random size, each as an item's content and length."""
    groups: list[tuple[bytes, int]] = []
    at = 0
    while at < len(units):
        chunk = units[at : at + rnd.randint(1, 3)]
        at += len(chunk)
        if kind == STRING:
            text = b"".join(chunk)
            length = len(text.decode().encode("utf-16-le")) // 2
            groups.append((write_var_uint(len(text)) + text, length))
        else:
            groups.append((write_var_uint(len(chunk)) + b"".join(chunk), len(chunk)))
    return groups


def applied(*updates: bytes) -> Doc:
    doc = Doc()
    for each in updates:
        doc.apply_update(each)
    return doc


def assert_same_document(left: Doc, right: Doc) -> None:
    assert left.get_state() == right.get_state()
    assert left.get_update() == right.get_update()
    assert str(left.get("content", type=Text)) == str(right.get("content", type=Text))


def test_a_run_of_one_character_items_becomes_one_item_of_the_same_text() -> None:
    attack = unmerged_run(500).attack
    merged, scan = scan_merged(attack)
    assert len(scan.items) == 1 and scan.items[0].length == 500
    assert len(merged) < len(attack) // 5
    assert_same_document(applied(attack), applied(merged))


def test_emoji_runs_merge_with_their_utf16_lengths() -> None:
    attack = unmerged_run(300, "\N{GRINNING FACE}").attack
    merged, scan = scan_merged(attack)
    assert [(i.length, len(i.pairs)) for i in scan.items] == [(600, 300)]
    assert_same_document(applied(attack), applied(merged))


def test_array_values_and_deleted_runs_merge_too() -> None:
    values = unmerged_any_run(200).attack
    merged, scan = scan_merged(values)
    assert len(scan.items) == 1 and scan.items[0].length == 200
    assert applied(merged).get("list", type=Array).to_py() == list(range(64)) * 3 + list(range(8))
    assert applied(values).get_update() == applied(merged).get_update()
    deleted = [item(DELETED, write_var_uint(1), root="content")]
    deleted += [item(DELETED, write_var_uint(1), origin=(ATTACKER, i - 1)) for i in range(1, 50)]
    run = update([(ATTACKER, 0, deleted)])
    merged, scan = scan_merged(run)
    assert [(i.content, i.length) for i in scan.items] == [(DELETED, 50)]
    assert_same_document(applied(run), applied(merged))


def test_a_run_typed_before_other_text_keeps_its_right_origin() -> None:
    right = (OWNER, 5)
    structs = [item(STRING, string("x"), origin=(OWNER, 4), right=right)]
    structs += [
        item(STRING, string("x"), origin=(ATTACKER, i - 1), right=right) for i in range(1, 40)
    ]
    attack = update([(ATTACKER, 0, structs)])
    merged, scan = scan_merged(attack)
    assert len(scan.items) == 1 and scan.items[0].right_origin == right
    setup = long_item(10)
    assert_same_document(applied(setup, attack), applied(setup, merged))
    assert str(applied(setup, merged).get("content", type=Text)) == "aaaaa" + "x" * 40 + "aaaaa"


def test_a_run_partly_deleted_in_the_same_update_makes_the_same_document() -> None:
    attack = unmerged_run(100).attack[:-1]  # drop its empty delete set
    attack += write_var_uint(1) + write_var_uint(ATTACKER) + write_var_uint(2)
    attack += write_var_uint(3) + write_var_uint(10) + write_var_uint(50) + write_var_uint(7)
    merged, scan = scan_merged(attack)
    assert_same_document(applied(attack), applied(merged))
    assert len(str(applied(merged).get("content", type=Text))) == 83
    # Held apart where the deletes start and end: deleted and kept text never squash, and a
    # merged item would only be cut there again.
    assert [(i.clock, i.length) for i in scan.items] == [
        (0, 3),
        (3, 10),
        (13, 37),
        (50, 7),
        (57, 43),
    ]


def test_an_item_typed_between_two_items_of_a_run_holds_them_apart() -> None:
    """What a full-state update holds where another editor typed into a run: the two halves
    stay two items (yrs would cut a merged one there again, copying its tail)."""
    run = [item(STRING, string("a"), root="content")]
    run += [item(STRING, string("a"), origin=(ATTACKER, i - 1)) for i in range(1, 10)]
    between = item(STRING, string("b"), origin=(ATTACKER, 4), right=(ATTACKER, 5))
    both = update([(ATTACKER, 0, run), (OWNER, 0, [between])])
    merged, scan = scan_merged(both)
    assert [(i.client, i.clock, i.length) for i in scan.items] == [
        (ATTACKER, 0, 5),
        (ATTACKER, 5, 5),
        (OWNER, 0, 1),
    ]
    assert_same_document(applied(both), applied(merged))
    assert str(applied(merged).get("content", type=Text)) == "aaaaabaaaaa"


def test_map_entries_never_merge() -> None:
    """Each set of a key continues the one before it, but replaces it: never one item."""
    entries = [bytes([ANY | 0x20]) + write_var_uint(1) + string("m") + string("k") + any_integer(0)]
    entries += [
        bytes([ANY | _ORIGIN | 0x20])
        + write_var_uint(ATTACKER)
        + write_var_uint(i - 1)
        + any_integer(i)
        for i in range(1, 20)
    ]
    sets = update([(ATTACKER, 0, entries)])
    assert merge_runs(sets) is None
    merged, _ = scan_merged(sets)
    assert merged is sets
    assert applied(sets).get("m", type=Map).to_py() == {"k": 19.0}


def test_the_usual_update_comes_back_as_it_was() -> None:
    doc = Doc()
    text = doc.get("content", type=Text)
    text += "hello"
    typed = doc.get_update()
    merged, scan = scan_merged(typed)
    assert merged is typed and len(scan.items) == 1


def test_runs_do_not_merge_across_clients_or_gaps() -> None:
    a, b = ATTACKER, OWNER
    attack = update(
        [
            (a, 0, [item(STRING, string("x"), root="content")]),
            (b, 0, [item(STRING, string("y"), origin=(a, 0))]),
        ]
    )
    assert merge_runs(attack) is None
    skip = b"\x0a\x02"  # clocks 1 and 2 skipped
    gapped = update(
        [(a, 0, [item(STRING, string("x")), skip, item(STRING, string("y"), origin=(a, 2))])]
    )
    assert merge_runs(gapped) is None


edits = st.lists(
    st.tuples(
        st.integers(0, 2),  # which client
        st.sampled_from(["insert", "insert", "delete", "push", "sync"]),
        st.floats(0, 1),  # where
        st.text(alphabet="ab é日\N{GRINNING FACE}", min_size=1, max_size=12),
    ),
    min_size=1,
    max_size=40,
)


def _history(steps: list[tuple[int, str, float, str]]) -> list[bytes]:
    """Each step's update, in the order a server receives them, from three clients that sync
    now and then: inserts and deletes in a text (emoji included), values pushed to an array."""
    clients = [Doc(client_id=101 + i) for i in range(3)]
    received: list[bytes] = []
    for who, kind, where, chars in steps:
        doc = clients[who]
        before = doc.get_state()
        text = doc.get("content", type=Text)
        current = str(text)
        at = int(where * len(current))
        if kind == "insert":
            text.insert(len(current[:at].encode()), chars)
        elif kind == "delete" and current:
            end = min(len(current), at + len(chars))
            del text[len(current[:at].encode()) : len(current[:end].encode())]
        elif kind == "push":
            doc.get("list", type=Array).extend(list(range(len(chars))))
        elif kind == "sync":
            other = clients[(who + 1) % 3]
            doc.apply_update(other.get_update(doc.get_state()))
            continue
        received.append(doc.get_update(before))
    return received


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=edits, seed=st.integers(0, 2**16))
def test_merged_unmerged_updates_make_the_same_document_as_the_originals(
    steps: list[tuple[int, str, float, str]], seed: int
) -> None:
    rnd = random.Random(seed)
    originals = _history(steps)
    exploded = [explode(each, rnd) for each in originals]
    merged = [scan_merged(each)[0] for each in exploded]
    for each in merged:
        scan_update(each)  # still an update the scan reads
    plain, unmerged, remerged = applied(*originals), applied(*exploded), applied(*merged)
    assert_same_document(plain, remerged)
    assert_same_document(unmerged, remerged)
    assert plain.get("list", type=Array).to_py() == remerged.get("list", type=Array).to_py()
    # All of it in one update of several clients and a delete set (a SyncStep2, say). yrs may
    # lay out the blocks of one update differently from the same items applied one update at a
    # time (it squashes what arrives together), so the block layout is compared with the
    # combined update applied as it was, and the content with the history.
    together = merge_updates(*originals)
    combined = applied(scan_merged(explode(together, rnd))[0])
    assert_same_document(applied(together), combined)
    assert combined.get_state() == plain.get_state()
    assert str(combined.get("content", type=Text)) == str(plain.get("content", type=Text))
    assert combined.get("list", type=Array).to_py() == plain.get("list", type=Array).to_py()


def test_yjs_integrates_the_merged_update_to_the_same_text() -> None:
    steps = [
        (0, "insert", 0.0, "hello 😀 world"),
        (1, "sync", 0.0, "x"),
        (1, "insert", 0.5, "日本 é 😀😀"),
        (0, "delete", 0.2, "abc"),
        (0, "sync", 0.0, "x"),
        (2, "insert", 1.0, "tail 😀"),
        (1, "delete", 0.6, "ab"),
    ]
    originals = _history(steps)
    rnd = random.Random(3)
    exploded = [explode(each, rnd) for each in originals]
    merged = [scan_merged(each)[0] for each in exploded]
    assert sum(len(scan_update(m).items) for m in merged) < sum(
        len(scan_update(e).items) for e in exploded
    )
    expected = str(applied(*originals).get("content", type=Text))
    for updates in (merged, exploded):
        seen = yjs_applied(updates)
        assert seen["text"] == expected
        assert not seen["pending"]
