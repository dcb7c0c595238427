"""Hostile and broken input against a live server: it closes the offender with a protocol code,
stays up, keeps serving everyone else, and never lets garbage into a document."""

from __future__ import annotations

import contextlib
import random
import time
from collections import Counter
from collections.abc import Callable, Iterator

import anyio
import httpx
import pytest
from pycrdt import Doc, Text
from websockets.exceptions import ConnectionClosed

from tests.rawpeer import MuxPeer, RawDoc, YwsPeer
from tests.serverproc import ServerProcess
from tether.protocol.wire.lib0 import write_var_string, write_var_uint, write_var_uint8_array
from tether.protocol.wire.messages import (
    AUTH,
    SYNC,
    Authenticated,
    AuthToken,
    Awareness,
    PermissionDenied,
    Stateless,
    Sync,
    SyncStatus,
)
from tether.protocol.wire.sync_payloads import SyncStep1, SyncUpdate

pytestmark = pytest.mark.anyio

MAX_FRAME = 65536
FRAMES = 3000
PRECIOUS = "precious"
PRECIOUS_TEXT = "untouched ✓ 😀"
SCRATCH = "scratch"
ALLOWED_CLOSES = {1002, 1008, 1009}


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    # Long auth/idle timeouts: a connection left with a half-open channel by an accepted
    # frame must not be closed by a timer while it is being reused.
    with ServerProcess(
        tmp_path_factory.mktemp("fuzz"),
        max_frame_bytes=MAX_FRAME,
        auth_timeout=120,
        idle_timeout=120,
        ping_interval=30,
    ) as proc:
        yield proc


# ---- frame generators ------------------------------------------------------------------------


def raw_var_uint(value: int) -> bytes:
    """A varUint with no range check (write_var_uint refuses what JS cannot read)."""
    out = bytearray()
    while value > 0x7F:
        out.append(0x80 | (value & 0x7F))
        value >>= 7
    out.append(value)
    return bytes(out)


def real_updates() -> list[bytes]:
    doc = Doc()
    text = doc.get("content", type=Text)
    updates = []
    for k in range(12):
        before = doc.get_state()
        text.insert(len(text), f"w{k} é😀 ")
        if k % 4 == 3:
            del text[0:2]
        updates.append(doc.get_update(before))
    updates.append(doc.get_update())
    return updates


class Fuzz:
    """Each generator returns (target, frame): target is where the frame must be sent."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.updates = real_updates()

    def some_bytes(self, lo: int = 0, hi: int = 48) -> bytes:
        return self.rng.randbytes(self.rng.randint(lo, hi))

    def name(self) -> bytes:
        return write_var_string(self.rng.choice(["a", "doc", "x/y", "é", PRECIOUS]))

    # Frames for a fresh socket that has no open channel.
    def random_bytes(self) -> tuple[str, bytes | str]:
        return "plain", self.some_bytes(0, 64)

    def truncated_varint(self) -> tuple[str, bytes | str]:
        options = [
            b"\x80",
            b"\xff\xff\xff",
            b"\xff" * 9,  # overlong
            write_var_uint(40) + b"short",  # name longer than the frame
            self.name() + b"\x80",
            self.name() + bytes([SYNC]) + b"\x00" + write_var_uint(500) + b"\x00",
            self.name() + bytes([AUTH, 0]) + write_var_uint(99) + b"tok",
        ]
        return "plain", self.rng.choice(options)

    def unknown_type(self) -> tuple[str, bytes | str]:
        kind = self.rng.choice([4, 6, 11, 12, 13, 64, 127, 300, 99999])
        return "plain", self.name() + write_var_uint(kind) + self.some_bytes(0, 8)

    def unknown_subtype(self) -> tuple[str, bytes | str]:
        sub = write_var_uint(self.rng.choice([3, 4, 9, 200]))
        kind = bytes([self.rng.choice([SYNC, AUTH])])
        return "plain", self.name() + kind + sub + self.some_bytes(0, 8)

    def non_utf8_name(self) -> tuple[str, bytes | str]:
        bad = self.rng.choice([b"\xff", b"\xc3", b"a\x80b", b"\xed\xa0\x80", b"\xf8\x88\x80\x80"])
        return "plain", write_var_uint(len(bad)) + bad + bytes([SYNC, 0, 1, 0])

    def server_only(self) -> tuple[str, bytes | str]:
        frame = self.rng.choice(
            [
                SyncStatus(PRECIOUS, True).encode(),
                Authenticated(PRECIOUS, "read-write").encode(),
                PermissionDenied(PRECIOUS, "no").encode(),
            ]
        )
        return "plain", frame

    def text_frame(self) -> tuple[str, bytes | str]:
        return "plain", self.rng.choice(["hello", "", '{"type":"suggest"}', "\x00\x01"])

    def empty(self) -> tuple[str, bytes | str]:
        return "plain", b""

    # Frames for a socket with PRECIOUS open (write access): pure garbage as its updates.
    def garbage_update(self) -> tuple[str, bytes | str]:
        inner = self.rng.choice([SyncUpdate, SyncUpdate, SyncStep1])(self.some_bytes(1, 64))
        return "precious", Sync(PRECIOUS, inner).encode()

    def garbage_awareness(self) -> tuple[str, bytes | str]:
        body = self.rng.choice(
            [
                self.some_bytes(0, 32),
                raw_var_uint(1) + raw_var_uint(5) + raw_var_uint(1) + write_var_string("{nope"),
                raw_var_uint(1) + raw_var_uint(1 << 54) + raw_var_uint(1) + b"\x02{}",
                raw_var_uint(1000) + b"\x01\x01",
                raw_var_uint(1) + raw_var_uint(6) + raw_var_uint(1) + b"\x03\xff\xfe\xfd",
            ]
        )
        return "precious", Awareness(PRECIOUS, body).encode()

    # Frames for a socket with SCRATCH open: real updates, mutated (may be valid edits).
    def mutated_update(self) -> tuple[str, bytes | str]:
        update = bytearray(self.rng.choice(self.updates))
        how = self.rng.randrange(3)
        if how == 0:
            update = update[: self.rng.randrange(len(update))]
        elif how == 1:
            for _ in range(self.rng.randint(1, 3)):
                update[self.rng.randrange(len(update))] = self.rng.randrange(256)
        else:
            update.insert(self.rng.randrange(len(update)), self.rng.randrange(256))
        return "scratch", Sync(SCRATCH, SyncUpdate(bytes(update))).encode()

    def frame(self) -> tuple[str, bytes | str]:
        makers: list[Callable[[], tuple[str, bytes | str]]] = [
            self.random_bytes,
            self.random_bytes,
            self.truncated_varint,
            self.unknown_type,
            self.unknown_subtype,
            self.non_utf8_name,
            self.server_only,
            self.text_frame,
            self.empty,
            self.garbage_update,
            self.garbage_update,
            self.garbage_awareness,
            self.mutated_update,
            self.mutated_update,
        ]
        return self.rng.choice(makers)()


# ---- helpers ---------------------------------------------------------------------------------


async def rest_text(server: ServerProcess, name: str) -> str:
    async with httpx.AsyncClient(timeout=10) as http:
        response = await http.get(
            f"{server.http_url}/api/documents/{name}",
            headers={"Authorization": f"Bearer {server.token([name])}"},
        )
    if response.status_code == 404:  # never stored (nor loaded with content): no text
        return ""
    response.raise_for_status()
    return str(response.json()["text"])


async def healthy(server: ServerProcess) -> bool:
    async with httpx.AsyncClient(timeout=5) as http:
        return (await http.get(f"{server.http_url}/health")).json()["status"] == "ok"


class Sockets:
    """One reusable socket per target; a socket the server closed is replaced."""

    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.token = server.token()
        self.open: dict[str, MuxPeer] = {}
        self.opened = 0

    async def get(self, target: str) -> MuxPeer:
        peer = self.open.get(target)
        if peer is None or peer.closed:
            peer = await MuxPeer.connect(self.server.ws_url)
            self.opened += 1
            if target == "precious":
                await peer.open(PRECIOUS, self.token)
            elif target == "scratch":
                await peer.open(SCRATCH, self.token)
            self.open[target] = peer
        return peer

    async def aclose(self) -> None:
        for peer in self.open.values():
            await peer.aclose()


async def bystander_loop(server: ServerProcess, done: anyio.Event, stats: Counter[str]) -> None:
    """Edit and watch the edit arrive elsewhere until ``done``; every edit must be acked."""
    name = "bystander"
    token = server.token([name])
    async with (
        await MuxPeer.connect(server.ws_url) as writer_socket,
        await MuxPeer.connect(server.ws_url) as reader_socket,
    ):
        writer = await writer_socket.open(name, token)
        reader = await reader_socket.open(name, token)
        while not done.is_set():
            mark = f"[{stats['rounds']}]"
            await writer.append(mark)
            await writer.wait_acked(timeout=5)
            await reader.wait_text(lambda t, m=mark: m in t, timeout=5)
            stats["rounds"] += 1
        assert all(writer.statuses), "every bystander edit applied"
        assert not writer_socket.closed and not reader_socket.closed


async def seed_precious(server: ServerProcess) -> None:
    async with await MuxPeer.connect(server.ws_url) as peer:
        doc = await peer.open(PRECIOUS, server.token([PRECIOUS]))
        if str(doc) != PRECIOUS_TEXT:
            assert str(doc) == ""
            await doc.append(PRECIOUS_TEXT)
            await doc.wait_acked()


# ---- tests -----------------------------------------------------------------------------------


async def test_thousands_of_bad_frames_close_only_their_sockets_with_protocol_codes(
    fuzz_server: ServerProcess,
):
    await seed_precious(fuzz_server)
    fuzz = Fuzz(seed=20240611)
    closes: Counter[int] = Counter()
    accepted = 0
    done = anyio.Event()
    stats: Counter[str] = Counter()
    sockets = Sockets(fuzz_server)
    start = time.monotonic()
    with anyio.fail_after(90):
        async with anyio.create_task_group() as tg:
            tg.start_soon(bystander_loop, fuzz_server, done, stats)
            try:
                for n in range(FRAMES):
                    target, frame = fuzz.frame()
                    peer = await sockets.get(target)
                    try:
                        await peer.ws.send(frame)
                    except ConnectionClosed:
                        pass
                    if await peer.alive():
                        accepted += 1
                        continue
                    code = await peer.wait_closed()
                    closes[code] += 1
                    assert code in ALLOWED_CLOSES, (
                        f"frame #{n} {frame!r:.120} on {target} closed with {code} "
                        f"{peer.close_reason!r}"
                    )
                    if n % 500 == 0:
                        assert await healthy(fuzz_server)
            finally:
                done.set()
                await sockets.aclose()
    elapsed = time.monotonic() - start
    assert await healthy(fuzz_server)
    assert sum(closes.values()) > FRAMES // 2, (closes, accepted)
    assert closes[1002] > 0 and closes[1008] > 0
    assert stats["rounds"] >= 10, f"the bystander made only {stats['rounds']} round trips"
    assert await rest_text(fuzz_server, PRECIOUS) == PRECIOUS_TEXT
    async with await MuxPeer.connect(fuzz_server.ws_url) as peer:
        for name in (PRECIOUS, SCRATCH):
            doc = await peer.open(name, fuzz_server.token())
            if name == PRECIOUS:
                assert str(doc) == PRECIOUS_TEXT
            await doc.append("still editable")
            await doc.wait_acked()
            assert doc.statuses[-1] is True
    print(f"{FRAMES} frames in {elapsed:.1f}s on {sockets.opened} sockets: {dict(closes)}")


async def test_an_update_over_the_frame_limit_refuses_only_its_document(
    fuzz_server: ServerProcess,
):
    """An editor's own too-big change: closing would make the provider reconnect and send it
    again forever, so that document is refused (PermissionDenied) and the socket stays."""
    with anyio.fail_after(15):
        async with await MuxPeer.connect(fuzz_server.ws_url) as peer:
            doc = await peer.open("big", fuzz_server.token())
            other = await peer.open(f"beside-big-{random.randrange(1 << 30)}", fuzz_server.token())
            update = doc.edit(lambda text: text.insert(0, "b" * (MAX_FRAME + 1)))
            await peer.send(Sync("big", SyncUpdate(update)).encode())
            await doc.wait(lambda: doc.denied is not None, what="the refusal")
            assert doc.denied is not None and doc.denied.startswith("update too large")
            assert await peer.alive()
            await other.append("the socket still carries the others")
            await other.wait_acked()
            assert other.statuses == [True, True]
        assert "b" * 100 not in await rest_text(fuzz_server, "big")


@pytest.mark.parametrize("kind", ["sync far over the limit", "stateless"])
async def test_other_frames_over_the_size_limit_close_with_1009(
    fuzz_server: ServerProcess, kind: str
):
    with anyio.fail_after(15):
        async with await MuxPeer.connect(fuzz_server.ws_url) as peer:
            doc = await peer.open("big", fuzz_server.token())
            if kind == "stateless":
                frame = Stateless("big", "s" * (MAX_FRAME + 1)).encode()
            else:  # past the server's transport cap (2x): uvicorn closes before we see it
                update = doc.edit(lambda text: text.insert(0, "b" * (3 * MAX_FRAME)))
                frame = Sync("big", SyncUpdate(update)).encode()
            await peer.send(frame)
            assert await peer.wait_closed() == 1009
        assert "b" * 100 not in await rest_text(fuzz_server, "big")


async def test_too_many_messages_before_authentication_close_with_1008(
    fuzz_server: ServerProcess,
):
    with anyio.fail_after(15):
        async with await MuxPeer.connect(fuzz_server.ws_url) as peer:
            for _ in range(300):
                try:
                    await peer.send(Stateless("queued", "x").encode())
                except ConnectionClosed:
                    break
            assert await peer.wait_closed() == 1008


async def test_an_awareness_clock_at_the_integer_limit_does_not_break_leaving(
    fuzz_server: ServerProcess,
):
    """Removal sends clock + 1; at 2**53 - 1 that cannot be encoded, yet leaving must work."""
    first, second = "clock-limit-a", "clock-limit-b"
    token = fuzz_server.token()
    with anyio.fail_after(15):
        async with await MuxPeer.connect(fuzz_server.ws_url) as watcher:
            w1 = await watcher.open(first, token)
            w2 = await watcher.open(second, token)
            hostile = await MuxPeer.connect(fuzz_server.ws_url)
            await hostile.open(first, token)
            await hostile.open(second, token)
            entry1 = raw_var_uint(1) + raw_var_uint(77) + raw_var_uint((1 << 53) - 1) + b"\x02{}"
            entry2 = raw_var_uint(1) + raw_var_uint(78) + raw_var_uint(1) + b"\x02{}"
            await hostile.send(Awareness(first, entry1).encode())
            await hostile.send(Awareness(second, entry2).encode())
            accepted = await hostile.alive()
            if accepted:
                await w1.wait(lambda: 77 in w1.awareness)
                await w2.wait(lambda: 78 in w2.awareness)
            await hostile.aclose()
            await w1.wait(lambda: 77 not in w1.awareness, 5, "presence 77 removed")
            await w2.wait(lambda: 78 not in w2.awareness, 5, "presence 78 removed")
            # Both documents still accept newcomers and edits.
            async with await MuxPeer.connect(fuzz_server.ws_url) as late:
                for name in (first, second):
                    doc = await late.open(name, token)
                    await doc.append("ok")
                    await doc.wait_acked()
                    assert doc.statuses[-1] is True


async def test_garbage_on_the_yjs_endpoint_closes_with_a_protocol_code(
    fuzz_server: ServerProcess,
):
    name = "yjs-precious"
    token = fuzz_server.token()
    async with await MuxPeer.connect(fuzz_server.ws_url) as seeder:
        seed = await seeder.open(name, token)
        await seed.append(PRECIOUS_TEXT)
        await seed.wait_acked()
    fuzz = Fuzz(seed=7)
    frames: list[bytes | str] = [
        b"",
        b"\x80",
        b"\x07",
        b"\x00\x05",
        b"\x00\x02" + write_var_uint(50) + b"xx",
        b"\x01" + write_var_uint8_array(b"\x01\x05\x01\x05{nope"),
        "text",
    ] + [b"\x00\x02" + write_var_uint8_array(fuzz.some_bytes(1, 40)) for _ in range(20)]
    codes: Counter[int] = Counter()
    with anyio.fail_after(30):
        for frame in frames:
            async with await YwsPeer.connect(fuzz_server.yjs_url, name, token) as peer:
                await peer.single.wait_synced()
                with contextlib.suppress(ConnectionClosed):
                    await peer.ws.send(frame)
                if await peer.roundtrip():
                    continue  # accepted (garbage that happens to decode as an update)
                code = await peer.wait_closed()
                codes[code] += 1
                assert code in ALLOWED_CLOSES, (frame, code, peer.close_reason)
    assert codes[1002] >= 5
    assert await rest_text(fuzz_server, name) == PRECIOUS_TEXT


async def test_a_token_frame_for_an_unknown_auth_subtype_does_not_crash_the_socket_of_others(
    fuzz_server: ServerProcess,
):
    """A bad frame on one socket closes that socket only; an editor sharing nothing with it
    keeps its documents open."""
    with anyio.fail_after(10):
        async with await MuxPeer.connect(fuzz_server.ws_url) as good:
            doc: RawDoc = await good.open("neighbour", fuzz_server.token())
            async with await MuxPeer.connect(fuzz_server.ws_url) as bad:
                await bad.send(AuthToken("neighbour", fuzz_server.token()).encode())
                await bad.send(write_var_string("neighbour") + bytes([AUTH, 7]))
                assert await bad.wait_closed() == 1002
            await doc.append("fine")
            await doc.wait_acked()
            assert doc.statuses[-1] is True and not good.closed
