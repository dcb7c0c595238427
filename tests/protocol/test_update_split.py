"""protocol.updates.update_split: every piece is an update pycrdt and Yjs apply, the pieces together
are the whole document, and only an indivisible struct may exceed the budget."""

from __future__ import annotations

import base64
import random

from pycrdt import Doc, Map, Text

from tests.jsclient import yjs_applied
from tether.protocol.updates.update_scan import STRING, scan_update
from tether.protocol.updates.update_split import split_update, utf16_length
from tether.protocol.wire.lib0 import Decoder


def edited_document(seed: int) -> Doc:
    """Three editors' interleaved history: inserts, deletes, map values, merged back and forth."""
    rnd = random.Random(seed)
    docs = [Doc(client_id=1000 + i) for i in range(3)]
    for step in range(300):
        doc = rnd.choice(docs)
        text = doc.get("content", type=Text)
        roll = rnd.random()
        if roll < 0.6 or len(text) < 10:
            piece = rnd.choice(["hello ", "x" * rnd.randint(1, 3000), "abc"])
            text.insert(rnd.randint(0, len(text)), piece)
        elif roll < 0.8:
            start = rnd.randint(0, len(text) - 5)
            del text[start : start + rnd.randint(1, 4)]
        else:
            doc.get("meta", type=Map)[f"k{step}"] = {"v": step, "s": "y" * rnd.randint(0, 2000)}
        if rnd.random() < 0.3:
            a, b = rnd.sample(docs, 2)
            b.apply_update(a.get_update(b.get_state()))
    for a in docs:
        for b in docs:
            b.apply_update(a.get_update(b.get_state()))
    return docs[0]


def state_of(state_vector: bytes) -> dict[int, int]:
    d = Decoder(state_vector)
    return {d.read_var_uint(): d.read_var_uint() for _ in range(d.read_var_uint())}


def applied(pieces: list[bytes]) -> Doc:
    doc = Doc()
    for piece in pieces:
        doc.apply_update(piece)
    return doc


def assert_only_indivisible_pieces_are_over(pieces: list[bytes], cap: int) -> None:
    for piece in pieces:
        if len(piece) > cap:
            scan = scan_update(piece)
            assert len(scan.items) + len(scan.ranges) == 1, len(piece)
            assert scan.items[0].content != STRING  # strings are always cut


def test_pieces_applied_in_order_rebuild_the_document_in_pycrdt():
    for seed in range(8):
        source = edited_document(seed)
        full = source.get_update()
        for cap in (200, 1000, 4096, 50_000):
            pieces = list(split_update(full, cap))
            assert len(pieces) > 1
            assert_only_indivisible_pieces_are_over(pieces, cap)
            rebuilt = applied(pieces)
            assert str(rebuilt.get("content", type=Text)) == str(source.get("content", type=Text))
            assert rebuilt.get("meta", type=Map).to_py() == source.get("meta", type=Map).to_py()
            assert state_of(rebuilt.get_state()) == state_of(source.get_state())


def test_an_update_that_fits_is_one_piece_unchanged():
    doc = Doc()
    doc.get("content", type=Text).insert(0, "small")
    update = doc.get_update()
    assert list(split_update(update, len(update))) == [update]


def test_a_long_string_is_cut_between_characters_never_inside_one():
    doc = Doc()
    text = doc.get("content", type=Text)
    text.insert(0, "é日😀x" * 20_000)  # 1-, 2-, 3- and 4-byte UTF-8: cuts fall everywhere
    full = doc.get_update()
    for cap in (200, 257, 1000, 65_536):
        pieces = list(split_update(full, cap))
        assert all(len(p) <= cap for p in pieces), cap
        for piece in pieces:
            for item in scan_update(piece).items:  # each head decodes as whole characters
                assert item.length >= 1
        assert str(applied(pieces).get("content", type=Text)) == str(text)
        assert sum(len(scan_update(p).items) for p in pieces) >= len(full) // cap


def test_an_indivisible_value_larger_than_the_budget_is_sent_alone():
    doc = Doc()
    doc.get("meta", type=Map)["blob"] = "z" * 10_000  # one ContentAny: not cut
    doc.get("content", type=Text).insert(0, "t" * 5_000)
    pieces = list(split_update(doc.get_update(), 2_000))
    over = [p for p in pieces if len(p) > 2_000]
    assert len(over) == 1 and len(over[0]) > 10_000
    assert_only_indivisible_pieces_are_over(pieces, 2_000)
    assert applied(pieces).get("meta", type=Map)["blob"] == "z" * 10_000


def test_the_delete_set_comes_last_and_is_split_too():
    doc = Doc()
    text = doc.get("content", type=Text)
    text.insert(0, "ab" * 5_000)
    for k in range(2_000):  # 2,000 separate deleted ranges
        del text[k : k + 1]
    full = doc.get_update()
    pieces = list(split_update(full, 300))
    ds_pieces = [p for p in pieces if not scan_update(p).items and not scan_update(p).ranges]
    assert len(ds_pieces) > 1
    assert pieces[-len(ds_pieces) :] == ds_pieces  # after every struct
    assert all(len(p) <= 300 for p in pieces)
    assert str(applied(pieces).get("content", type=Text)) == str(text)


def test_utf16_length_counts_code_units():
    assert utf16_length("aé日😀".encode()) == 5


def test_yjs_applies_the_pieces_in_order_and_shuffled():
    source = edited_document(1)
    pieces = list(split_update(source.get_update(), 1000))
    # Structs in any order (Yjs parks what misses a dependency); the delete set last, as sent.
    shuffled = pieces[:-1]
    random.Random(0).shuffle(shuffled)
    shuffled.append(pieces[-1])
    for order in (pieces, shuffled):
        seen = yjs_applied(order)
        assert seen["text"] == str(source.get("content", type=Text))
        assert seen["map"] == source.get("meta", type=Map).to_py()
        assert not seen["pending"]
        assert state_of(base64.b64decode(seen["stateVector"])) == state_of(source.get_state())
