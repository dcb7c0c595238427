"""The attacks of issue 26 ("no single peer can stall the server"), one per finding measured by
``tether bench attacks``, each against a running server over its public wire only (``/ws``,
REST, the HTTP fallback, raw TCP), so that an old checkout can be attacked the same way.

An attack is an async context manager: entering it does the setup (a document to attack, a
session, a stored log) and yields the strike, a coroutine function that sends the attack and
returns what became of it ("applied", "closed 1002: ...", "HTTP 410: ..."); leaving it closes
every socket it opened. Sizes are the issue's, times ``scale``. Knows nothing of the bystanders.

``build_attacks`` lists these, issue 37's (rich text, Markdown, AI and model servers:
``rich_attacks``, ``ai_attacks``, ``upstream_attacks``) and issue 39's (hostile ProseMirror JSON
and HTML: ``tree_attacks``).
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

import httpx

from tether.protocol.wire.http_wire import BATCH_TYPE, SESSION_HEADER, encode_batch
from tether.protocol.wire.messages import PING_FRAME

from .ai_attacks import ai_attacks
from .attack_base import Attack, Strike
from .launcher import ServerProcess
from .rich_attacks import rich_attacks, tree_attacks
from .shape_updates import Shape, backwards_pairs, fragmenting_deletes, unmerged_run
from .upstream_attacks import upstream_attacks
from .wire_editor import EditorClosed, WireEditor

__all__ = ["Attack", "build_attacks", "stall_attacks"]

# The sizes (scale 1): the shapes as tests/test_update_shapes.py sends them, the
# backwards-typing update at the 66 KB, the fallback flood and the slow clients.
RUN_ITEMS = 100_000
BACKWARDS_ITEMS = 150_000
BACKWARDS_PAIRS = 3_500
FRAGMENTING_RANGES = 300_000
FLOOD_FRAMES = 8 * 1024 * 1024
SLOW_CLIENTS = 1_100
_HALF_SENT = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
_OTHER_CLIENT = "127.0.0.2"  # a fresh client that is not the one holding the connections
_FRESH_PROBES = 5


def build_attacks(scale: float) -> list[Attack]:
    """Every attack: issue 26's stalls, then issue 37's, then issue 39's."""
    return [
        *stall_attacks(scale),
        *rich_attacks(scale),
        *ai_attacks(scale),
        *upstream_attacks(scale),
        *tree_attacks(scale),
    ]


def stall_attacks(scale: float) -> list[Attack]:
    """Issue 26's: one peer's input that stalls the event loop."""

    def sized(n: int) -> int:
        return max(1, round(n * scale))

    run = unmerged_run(sized(RUN_ITEMS))
    backwards = backwards_pairs(sized(BACKWARDS_ITEMS), pairs=sized(BACKWARDS_PAIRS))
    fragmenting = fragmenting_deletes(sized(FRAGMENTING_RANGES))
    frames, clients = sized(FLOOD_FRAMES), sized(SLOW_CLIENTS)
    return [
        Attack("run-ws", 1, len(run.attack), partial(ws_update, shape=run)),
        Attack("run-reload", 1, len(run.attack), partial(reload, run.attack, "restart")),
        Attack("run-reload-crash", 1, len(run.attack), partial(reload, run.attack, "crash")),
        Attack("run-reload-raw", 1, len(run.attack), partial(reload, run.attack, "raw")),
        Attack("backwards", 2, len(backwards.attack), partial(ws_update, shape=backwards)),
        Attack("frag-delete", 3, len(fragmenting.attack), partial(ws_update, shape=fragmenting)),
        Attack("http-flood", 5, len(encode_batch([PING_FRAME])) * frames, partial(flood, frames)),
        Attack("slow-headers", 7, len(_HALF_SENT) * clients, partial(slow_headers, clients)),
    ]


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# ---- findings 1-3: one update over /ws -----------------------------------------------------


@asynccontextmanager
async def ws_update(
    server: ServerProcess, timeout: float, *, shape: Shape
) -> AsyncIterator[Strike]:
    """An owner stores the shape's setup and stays (the document stays loaded); a read-write
    editor of its own sends the attack."""
    name = f"attacked-{shape.name}"
    token = server.token([name])
    async with await WireEditor.open(server.ws_url, name, token, timeout) as owner:
        for update in shape.setup:
            await owner.send_update(update)
        if shape.setup and not await owner.acked(timeout):
            raise RuntimeError("the server did not store the setup")
        async with await WireEditor.open(server.ws_url, name, token, timeout) as attacker:
            yield partial(_answer_to, attacker, shape.attack, 2 * timeout)


async def _answer_to(editor: WireEditor, update: bytes, timeout: float) -> str:
    try:
        applied = await editor.send_and_wait(update, timeout)
    except EditorClosed as exc:
        return f"closed {exc.code}: {exc.reason}"
    return "applied" if applied else "not applied"


# ---- finding 1, load path: a stored run read back after a restart --------------------------


@asynccontextmanager
async def reload(
    update: bytes, stored: str, server: ServerProcess, timeout: float
) -> AsyncIterator[Strike]:
    """The run stored, the server started again, then one REST read loads it. ``stored``:
    "restart", sent over /ws and the server stopped as an operator does (a checkout may fold
    the document into a snapshot on the way out); "crash", sent and the server killed (-9)
    once it acknowledged: what it wrote to its log as the update came in; "raw", written into
    the SQLite log as sent, as a log from before the server merged runs holds it."""
    name = "attacked-run-reload"
    if stored == "raw":
        await asyncio.to_thread(server.stop)
        _append_to_log(server, name, update)
    else:
        async with await WireEditor.open(server.ws_url, name, server.token([name])) as editor:
            if not await editor.send_and_wait(update, timeout):
                raise RuntimeError("the server did not store the run")
            await asyncio.to_thread(server.kill if stored == "crash" else server.stop)
    await asyncio.to_thread(server.start)
    yield partial(_rest_read, server, name, 2 * timeout)


def _append_to_log(server: ServerProcess, name: str, update: bytes) -> None:
    """Into the stopped server's store: the tables every checkout since schema 3 has."""
    with contextlib.closing(sqlite3.connect(server.data_dir / "tether.db")) as db, db:
        now = time.time()
        db.execute(
            "INSERT INTO documents (name, created_at, updated_at) VALUES (?, ?, ?)",
            (name, now, now),
        )
        db.execute("INSERT INTO updates (name, data) VALUES (?, ?)", (name, update))


async def _rest_read(server: ServerProcess, name: str, timeout: float) -> str:
    token = server.token([name], scope="readonly")
    async with httpx.AsyncClient(base_url=server.http_url, timeout=timeout) as http:
        reply = await http.get(f"/api/documents/{name}", headers=_bearer(token))
    if reply.status_code == 200:
        return f"HTTP 200, {len(reply.json()['text'])} characters"
    return _refusal(reply)


def _refusal(reply: httpx.Response) -> str:
    try:
        body = reply.json()
        reason = body.get("reason") or body.get("error") or ""
    except ValueError:
        reason = reply.text[:60]
    return f"HTTP {reply.status_code}: {reason}" if reason else f"HTTP {reply.status_code}"


# ---- finding 5: one batch of millions of one-byte frames on the HTTP fallback -------------


@asynccontextmanager
async def flood(frames: int, server: ServerProcess, timeout: float) -> AsyncIterator[Strike]:
    """A readonly token's session, then one POST /http/send of ``frames`` Ping frames."""
    readonly = server.token(["*"], scope="readonly")
    body = encode_batch([PING_FRAME]) * frames  # a batch is its frames' encodings in a row
    async with httpx.AsyncClient(base_url=server.http_url, timeout=2 * timeout) as http:
        made = await http.post("/http/session", headers=_bearer(readonly))
        made.raise_for_status()
        headers = {SESSION_HEADER: made.json()["session"], "Content-Type": BATCH_TYPE}
        yield partial(_post_batch, http, body, headers)
        with contextlib.suppress(httpx.HTTPError):
            await http.delete("/http/session", headers={SESSION_HEADER: headers[SESSION_HEADER]})


async def _post_batch(http: httpx.AsyncClient, body: bytes, headers: dict[str, str]) -> str:
    reply = await http.post("/http/send", content=body, headers=headers)
    return _refusal(reply)


# ---- finding 7: connections that never finish their headers --------------------------------


@asynccontextmanager
async def slow_headers(
    clients: int, server: ServerProcess, timeout: float
) -> AsyncIterator[Strike]:
    """``clients`` connections from 127.0.0.1 that each send half a request and wait; meanwhile
    another client opens fresh connections for /health. All closed on the way out."""
    held: list[asyncio.StreamWriter] = []
    try:
        yield partial(_hold_half_sent, server, clients, held)
    finally:
        for writer in held:
            writer.transport.abort()


async def _hold_half_sent(
    server: ServerProcess, clients: int, held: list[asyncio.StreamWriter]
) -> str:
    readers = []
    unopened = 0
    for _ in range(clients):
        try:
            connecting = asyncio.open_connection("127.0.0.1", server.port)
            reader, writer = await asyncio.wait_for(connecting, 5)
        except (OSError, TimeoutError):
            unopened += 1
            continue
        writer.write(_HALF_SENT)
        held.append(writer)
        readers.append(reader)
    answered, worst = await _fresh_health(server)
    cut = await asyncio.gather(*(_closed_by_server(reader) for reader in readers))
    return (
        f"fresh /health from {_OTHER_CLIENT}: {answered}/{_FRESH_PROBES} ok, worst"
        f" {worst * 1000:.0f} ms; {len(held)} held, {sum(cut)} cut by server, {unopened} failed"
    )


async def _fresh_health(server: ServerProcess) -> tuple[int, float]:
    """GET /health on a new connection each time, from another loopback address."""
    answered, worst = 0, 0.0
    for _ in range(_FRESH_PROBES):
        transport = httpx.AsyncHTTPTransport(local_address=_OTHER_CLIENT)
        began = time.perf_counter()
        async with httpx.AsyncClient(transport=transport, timeout=5) as http:
            with contextlib.suppress(httpx.HTTPError):
                reply = await http.get(server.http_url + "/health")
                answered += reply.status_code == 200
        worst = max(worst, time.perf_counter() - began)
    return answered, worst


async def _closed_by_server(reader: asyncio.StreamReader) -> bool:
    try:
        return await asyncio.wait_for(reader.read(1), 0.2) == b""
    except ConnectionError:
        return True  # closed with our bytes unread: a reset
    except TimeoutError:
        return False
