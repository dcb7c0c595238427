"""Updates that would crash the server or lose acked edits, against a live server (issue 10,
items 1 and 2), plus a fuzzer over *updates*: for every update the server accepts, the live
document, the stored snapshot after compaction and a reload all agree."""

from __future__ import annotations

import random
import zlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from pycrdt import Array, Doc, Text

from tests.metrics_scrape import metric_value, metrics_text
from tests.rawpeer import TEXT, MuxPeer
from tests.serverproc import ServerProcess
from tether.collab.storage.sqlite import SQLiteStore
from tether.protocol.wire.lib0 import Decoder, write_var_string, write_var_uint
from tether.protocol.wire.sync_payloads import SyncUpdate

pytestmark = pytest.mark.anyio


def nested_arrays(levels: int, client: int = 4242) -> bytes:
    """A hand-written v1 update: a root array "a" holding an array holding an array ...,
    ``levels`` deep (written by hand: building it with pycrdt would put the deep tree in this
    process, and dropping it can overflow this process's stack)."""
    out = bytearray()
    out += write_var_uint(1) + write_var_uint(levels) + write_var_uint(client) + write_var_uint(0)
    for clock in range(levels):
        out.append(7)  # an item with type content; parent written out (no origins)
        if clock == 0:
            out += write_var_uint(1) + write_var_string("a")
        else:
            out += write_var_uint(0) + write_var_uint(client) + write_var_uint(clock - 1)
        out += write_var_uint(0)  # Y.Array
    out += write_var_uint(0)  # empty delete set
    return bytes(out)


async def rest(server: ServerProcess, name: str) -> httpx.Response:
    async with httpx.AsyncClient(timeout=10) as http:
        return await http.get(
            f"{server.http_url}/api/documents/{name}",
            headers={"Authorization": f"Bearer {server.token([name])}"},
        )


@pytest.fixture(scope="module")
def plain_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ServerProcess(tmp_path_factory.mktemp("guard"), ai_provider="none") as server:
        yield server


async def test_deep_nesting_is_refused_before_it_is_applied_and_the_server_lives(
    plain_server: ServerProcess,
) -> None:
    server = plain_server
    token = server.token()
    async with (
        await MuxPeer.connect(server.ws_url) as attacker,
        await MuxPeer.connect(server.ws_url) as bystander,
    ):
        other = await bystander.open("other", token)
        await attacker.open("bomb", token)
        await attacker.send_sync("bomb", SyncUpdate(nested_arrays(50_000)))
        code = await attacker.wait_closed()
        assert code == 1002
        # Everyone else carries on: the process did not die and nothing was stored.
        await other.append("still here")
        await other.wait_acked()
        assert other.statuses and all(other.statuses)
    assert (await rest(server, "bomb")).status_code == 404  # nothing stored: unknown
    metrics = await metrics_text(server)
    assert metric_value(metrics, "tether_update_refusals_total", limit="nesting-depth") >= 1
    # Shallow nesting is ordinary editing and passes.
    async with await MuxPeer.connect(server.ws_url) as editor:
        doc = await editor.open("shallow", token)
        await doc.send_update(nested_arrays(100))
        await doc.wait_acked()
        assert doc.statuses and all(doc.statuses)


async def test_a_stored_armed_document_is_quarantined_not_loaded(tmp_path: Path) -> None:
    # A document stored before the guard existed: 50,000 levels, written straight to SQLite.
    async with SQLiteStore(tmp_path / "tether.db") as store:
        await store.append("armed", nested_arrays(50_000))
    with ServerProcess(tmp_path, ai_provider="none") as server:
        token = server.token()
        async with await MuxPeer.connect(server.ws_url) as editor:
            doc = editor.doc("armed")
            await editor.attach("armed", token)
            await doc.wait(lambda: doc.denied is not None, what="a refusal")
            assert doc.denied == "document quarantined"
            fine = await editor.open("fine", token)
            await fine.append("ok")
            await fine.wait_acked()
        response = await rest(server, "armed")
        assert response.status_code == 409
        assert "quarantined" in response.json()["error"]
    async with SQLiteStore(tmp_path / "tether.db") as store:
        assert len(await store.load("armed")) == 1, "the operator still has the bytes"


async def test_an_update_with_missing_dependencies_is_not_acked_and_nothing_acked_is_lost(
    tmp_path: Path,
) -> None:
    author = Doc()
    text = author.get(TEXT, type=Text)
    text += "hello "
    first = author.get_update()
    before = author.get_state()
    text += "world"
    second = author.get_update(before)
    with ServerProcess(tmp_path, ai_provider="none", compact_threshold=2) as server:
        token = server.token()
        async with await MuxPeer.connect(server.ws_url) as peer:
            doc = await peer.open("ooo", token)
            await doc.send_update(second)  # its dependency has not arrived
            await doc.wait_acked()
            # [our opening step2's ack, this update's]
            assert doc.statuses[:2] == [True, False], "an update it cannot integrate: no ack"
            # The server asks us for what it lacks (our step2 answer is acked too).
            await doc.wait(lambda: doc.sent_updates >= 3, what="the server's resync step1")
            await doc.wait_acked()
            await doc.send_update(first)
            await doc.send_update(second)
            await doc.wait_acked()
            assert doc.statuses[-2:] == [True, True]
            for _ in range(4):  # past the compaction threshold, several times
                await doc.send_update(b"\x00\x00")
            await doc.wait_acked()
    with ServerProcess(tmp_path, ai_provider="none") as server:
        assert (await rest(server, "ooo")).json()["text"] == "hello world"


def crafted_insert(origin: tuple[int, int], right: tuple[int, int], text: str) -> bytes:
    """One string item by client 77 with the given origin and right origin (hand-written:
    no Yjs client writes an inconsistent pair, so no library will)."""
    out = write_var_uint(1) + write_var_uint(1) + write_var_uint(77) + write_var_uint(0)
    out += bytes([0x80 | 0x40 | 4])
    for part in (*origin, *right):
        out += write_var_uint(part)
    return out + write_var_string(text) + write_var_uint(0)


async def test_an_item_whose_right_origin_is_left_of_its_origin_is_refused(
    plain_server: ServerProcess,
) -> None:
    server = plain_server
    token = server.token()
    seed = Doc(client_id=1)
    seed.get(TEXT, type=Text).insert(0, "hello world")
    async with (
        await MuxPeer.connect(server.ws_url) as author,
        await MuxPeer.connect(server.ws_url) as attacker,
    ):
        doc = await author.open("diverge", token)
        await doc.send_update(seed.get_update())
        await doc.wait_acked()
        hostile = await attacker.open("diverge", token)
        # Live this lands after "h"; rebuilt from a snapshot, after "world": divergence.
        await hostile.send_update(crafted_insert((1, 5), (1, 1), " big"))
        assert await attacker.wait_closed() == 1002
        # A consistent item (right origin right after its origin) is ordinary editing.
        await doc.send_update(crafted_insert((1, 4), (1, 5), " big"))
        await doc.wait_acked()
        assert all(doc.statuses)
    assert (await rest(server, "diverge")).json()["text"] == "hello big world"
    metrics = await metrics_text(server)
    assert metric_value(metrics, "tether_update_refusals_total", limit="inconsistent-origins") >= 1


# ---- the update fuzzer ----------------------------------------------------------------------


EMPTY_FORGERY = b"\x00\x00"  # an update of nothing


class Editors:
    """Several pycrdt replicas editing one text at random; their updates are the fuzz input,
    sent in arrival orders that shuffle, drop, duplicate and mutate them."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.docs = [Doc() for _ in range(3)]

    def step(self) -> bytes:
        doc = self.rng.choice(self.docs)
        text = doc.get(TEXT, type=Text)
        before = doc.get_state()
        length = len(text)
        if length and self.rng.random() < 0.3:
            start = self.rng.randrange(length)
            del text[start : min(length, start + self.rng.randint(1, 4))]
        else:
            text.insert(self.rng.randint(0, length), self.rng.choice(["a", "bc", "xyz ", "\n"]))
        update = doc.get_update(before)
        for other in self.docs:  # replicas sync sometimes, so origins cross clients
            if other is not doc and self.rng.random() < 0.5:
                other.apply_update(update)
        return update

    def forge(self, client: int) -> bytes:
        """Two or three string items by a new ``client`` whose origins are drawn at random from
        what the replicas have and from each other: most are inconsistent in some way."""
        known: list[tuple[int, int]] = []
        decoder = Decoder(self.docs[0].get_state())
        for _ in range(decoder.read_var_uint()):
            owner, clock = decoder.read_var_uint(), decoder.read_var_uint()
            known += [(owner, c) for c in range(clock)]
        items: list[tuple[tuple[int, int], tuple[int, int], str]] = []
        clock = 0
        for _ in range(self.rng.randint(2, 3)):
            pool = known + [(client, c) for c in range(clock)]
            if not pool:
                break
            items.append((self.rng.choice(pool), self.rng.choice(pool), "QZ"))
            clock += 2
        return crafted_items(client, items) if items else EMPTY_FORGERY

    def mutate(self, update: bytes) -> bytes:
        data = bytearray(update)
        for _ in range(self.rng.randint(1, 3)):
            data[self.rng.randrange(len(data))] = self.rng.randrange(256)
        return bytes(data)


@pytest.mark.parametrize("seed", [10, 11, 12])
async def test_fuzzed_updates_leave_live_stored_and_reloaded_documents_equal(
    tmp_path: Path, seed: int
) -> None:
    editors = Editors(seed)
    updates = [editors.step() for _ in range(150)]
    with ServerProcess(tmp_path, ai_provider="none", compact_threshold=7) as server:
        token = server.token()
        watcher_socket = await MuxPeer.connect(server.ws_url)
        watcher = await watcher_socket.open("fuzz", token)
        accepted = 0
        sender: MuxPeer | None = None
        for k, update in enumerate(updates):
            roll = editors.rng.random()
            frames = [update]
            if roll < 0.1:
                frames = [editors.forge(client=5000 + k), update]
            elif roll < 0.2:
                frames = [editors.mutate(update)]
            elif roll < 0.25 and k + 1 < len(updates):
                frames = [updates[k + 1], update]  # out of order
            elif roll < 0.3:
                frames = [update, update]  # duplicated
            if sender is None or sender.closed:
                sender = await MuxPeer.connect(server.ws_url)
                await sender.open("fuzz", token)
            doc = sender.doc("fuzz")
            for frame in frames:
                await doc.send_update(frame)
            await doc.wait(
                lambda d=doc, s=sender: len(d.statuses) >= d.sent_updates or s.closed,
                what="acks, or the close of a refused sender",
            )
            accepted += sum(doc.statuses)
        if sender is not None:
            await sender.aclose()
        assert accepted > 50, "the fuzzer must mostly send updates the server accepts"
        # What a live editor sees equals what the server serves...
        async with await MuxPeer.connect(server.ws_url) as late:
            fresh = await late.open("fuzz", token)
            await watcher.wait_text(str(fresh))
            live = str(fresh)
        response = await rest(server, "fuzz")
        assert response.status_code == 200, response.text
        assert response.json()["text"] == live
        await watcher_socket.aclose()
    # ... and what a restart rebuilds from the compacted store.
    with ServerProcess(tmp_path, ai_provider="none") as server:
        response = await rest(server, "fuzz")
        assert response.status_code == 200, response.text
        assert response.json()["text"] == live


# ---- item 4: a refused update leaves no trace ------------------------------------------------


def good_then_orphaned(text_parent_client: int) -> bytes:
    """Two items by client 88: a valid insert into the root text, then one whose parent is a
    *string* item (not a shared type). yrs integrates the first, fails on the second, and does
    not roll back: without the guard "GOOD" stayed in the server's doc, though refused."""
    out = write_var_uint(1) + write_var_uint(2) + write_var_uint(88) + write_var_uint(0)
    out += bytes([4]) + write_var_uint(1) + write_var_string(TEXT) + write_var_string("GOOD")
    out += bytes([4]) + write_var_uint(0) + write_var_uint(text_parent_client) + write_var_uint(0)
    return out + write_var_string("BAD") + write_var_uint(0)


async def test_an_update_yrs_would_half_apply_leaves_no_trace(plain_server: ServerProcess) -> None:
    server = plain_server
    token = server.token()
    seed = Doc(client_id=1)
    seed.get(TEXT, type=Text).insert(0, "hello")
    async with (
        await MuxPeer.connect(server.ws_url) as author,
        await MuxPeer.connect(server.ws_url) as attacker,
    ):
        doc = await author.open("halfway", token)
        await doc.send_update(seed.get_update())
        await doc.wait_acked()
        hostile = await attacker.open("halfway", token)
        await hostile.send_update(good_then_orphaned(text_parent_client=1))
        assert await attacker.wait_closed() == 1002
        await doc.append(" world")  # the author's socket is untouched
        await doc.wait_acked()
        async with await MuxPeer.connect(server.ws_url) as reader:
            fresh = await reader.open("halfway", token)
            await fresh.wait_text("hello world")
            assert "GOOD" not in str(fresh) and "GOOD" not in str(doc)
    assert (await rest(server, "halfway")).json()["text"] == "hello world"


def crafted_delete(client: int, clock: int, length: int) -> bytes:
    """An update of no structs that deletes ``length`` clocks of ``client`` from ``clock``."""
    return (
        write_var_uint(0)
        + write_var_uint(1)
        + write_var_uint(client)
        + write_var_uint(1)
        + (write_var_uint(clock) + write_var_uint(length))
    )


@pytest.mark.parametrize(
    "hostile",
    [
        pytest.param(crafted_insert((1, 1), (1, 2), "X"), id="insert-between-the-halves"),
        pytest.param(crafted_delete(1, 2, 1), id="delete-one-half"),
    ],
)
async def test_an_edit_inside_an_emoji_is_refused_so_live_and_reloaded_agree(
    tmp_path: Path, hostile: bytes
) -> None:
    """Clocks count UTF-16 units; yrs keeps UTF-8 and cannot split a character there: live it
    put "X" after the emoji, rebuilt from storage after the "b" (and a half-delete took the
    "b"). Whole-character edits around an emoji are ordinary editing."""
    seed = Doc(client_id=1)
    seed.get(TEXT, type=Text).insert(0, "a😀b")
    with ServerProcess(tmp_path, ai_provider="none") as server:
        token = server.token()
        async with (
            await MuxPeer.connect(server.ws_url) as author,
            await MuxPeer.connect(server.ws_url) as attacker,
        ):
            doc = await author.open("emoji", token)
            await doc.send_update(seed.get_update())
            await doc.wait_acked()
            await (await attacker.open("emoji", token)).send_update(hostile)
            assert await attacker.wait_closed() == 1002
            await doc.send_update(crafted_insert((1, 2), (1, 3), "X"))  # after the emoji
            await doc.send_update(crafted_delete(1, 0, 1))  # the "a"
            await doc.wait_acked()
            assert all(doc.statuses)
        assert (await rest(server, "emoji")).json()["text"] == "😀Xb"
        metrics = await metrics_text(server)
        assert metric_value(metrics, "tether_update_refusals_total", limit="split-character") == 1
    with ServerProcess(tmp_path, ai_provider="none") as server:
        assert (await rest(server, "emoji")).json()["text"] == "😀Xb"


CraftedItem = tuple[tuple[int, int], tuple[int, int] | None, str]  # origin, right origin, text


def crafted_items(client: int, items: list[CraftedItem]) -> bytes:
    """String items by ``client`` from clock 0, each with an origin and a right origin."""
    return crafted_clients({client: items})


def crafted_clients(items_by_client: dict[int, list[CraftedItem]]) -> bytes:
    """One update of string items by several new clients, each from clock 0."""
    out = write_var_uint(len(items_by_client))
    for client, items in items_by_client.items():
        out += write_var_uint(len(items)) + write_var_uint(client) + write_var_uint(0)
        for origin, right, text in items:
            out += bytes([0x80 | (0x40 if right else 0) | 4])
            for part in (*origin, *(right or ())):
                out += write_var_uint(part)
            out += write_var_string(text)
    return out + write_var_uint(0)


@pytest.mark.parametrize(
    ("hostile", "reloads", "typists"),
    [
        # The second item hangs between two units of the first (origin and right origin both
        # the first's last unit): live yrs wrote "helloABA world", rebuilt from storage
        # "helloAAB world". Refused before it is applied now (origin and right origin equal).
        pytest.param(
            crafted_items(88, [((1, 4), (1, 5), "AA"), ((88, 1), (88, 1), "B")]),
            0,
            ["hello world"],
            id="equal",
        ),
        # Client 90's right origin (88's "A", in "hello") is left of its origin (89's "C", in
        # "world"), which five clients typed one after the other: history cannot tell where 88
        # and 89 land, so the server applies, checks, and rebuilds the doc from storage.
        pytest.param(
            crafted_clients(
                {
                    88: [((1, 1), (1, 2), "AA")],
                    89: [((6, 0), (6, 1), "CC")],
                    90: [((89, 1), (88, 0), "B")],
                }
            ),
            1,
            ["hello", " ", "w", "o", "r", "ld"],
            id="placed-by-the-update",
        ),
        # The same with "hello world" typed by one client: right origins show it (88's "A" sits
        # left of "o", which is left of "r"), so it is refused before it is applied.
        pytest.param(
            crafted_clients(
                {
                    88: [((1, 4), (1, 5), "AA")],
                    89: [((1, 8), (1, 9), "CC")],
                    90: [((89, 1), (88, 0), "B")],
                }
            ),
            0,
            ["hello world"],
            id="shown-by-right-origins",
        ),
    ],
)
async def test_inconsistent_origins_among_one_updates_own_items_are_undone(
    plain_server: ServerProcess, hostile: bytes, reloads: int, typists: list[str]
) -> None:
    """Nothing of the update remains, the author's socket never notices."""
    server = plain_server
    token = server.token()
    seed = Doc()
    for client, piece in enumerate(typists, start=1):  # each piece typed by the next client
        typist = Doc(client_id=client)
        typist.apply_update(seed.get_update())
        typed = typist.get(TEXT, type=Text)
        typed.insert(len(typed), piece)
        seed.apply_update(typist.get_update())
    name = f"own-origins-{zlib.crc32(hostile)}"
    before = metric_value(await metrics_text(server), "tether_document_reloads_total") or 0
    async with (
        await MuxPeer.connect(server.ws_url) as author,
        await MuxPeer.connect(server.ws_url) as attacker,
    ):
        doc = await author.open(name, token)
        doc.apply(seed.get_update())
        await doc.send_update(seed.get_update())
        await doc.wait_acked()
        await (await attacker.open(name, token)).send_update(hostile)
        assert await attacker.wait_closed() == 1002
        await doc.append("!")
        await doc.wait_text("hello world!")
        async with await MuxPeer.connect(server.ws_url) as reader:
            fresh = await reader.open(name, token)
            await fresh.wait_text("hello world!")
    assert (await rest(server, name)).json()["text"] == "hello world!"
    metrics = await metrics_text(server)
    assert metric_value(metrics, "tether_document_reloads_total") == before + reloads


async def test_an_origin_pair_on_garbage_collected_items_fails_only_its_sender(
    plain_server: ServerProcess,
) -> None:
    """Asking yrs where a garbage-collected item sits panics in Rust (a ``BaseException``, not
    an ``Exception``). An item whose origins point into a deleted nested type's children must
    be refused like any inconsistent item: the sender closed, the author unaffected."""
    server = plain_server
    token = server.token()
    seed = Doc(client_id=5)
    seed.get(TEXT, type=Text).insert(0, "hello")
    nested = seed.get("nest", type=Array)
    nested.append(Text("garbage soon"))
    nested.append(Text("more garbage"))
    del nested[0:2]  # their children become GC structs: clocks 6-17 and 19-30 of client 5
    async with (
        await MuxPeer.connect(server.ws_url) as author,
        await MuxPeer.connect(server.ws_url) as attacker,
    ):
        doc = await author.open("gc-origins", token)
        await doc.send_update(seed.get_update())
        await doc.wait_acked()
        hostile = await attacker.open("gc-origins", token)
        # origin and right origin: children of the two collected texts
        await hostile.send_update(crafted_insert((5, 8), (5, 20), "X"))
        assert await attacker.wait_closed() == 1002
        await doc.append("!")
        await doc.wait_acked()
        assert all(doc.statuses)
    assert (await rest(server, "gc-origins")).json()["text"] == "hello!"
