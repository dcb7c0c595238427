"""The relay between nodes: one Redis stream per document, read by every node that has it loaded.

Knows nothing of rooms or Yjs: it carries (document, seq, bytes) for committed updates and
(document, bytes) for presence bodies, tagged with the sending node. Streams, not pub/sub: a
reader names the last entry it saw, so a slow or briefly disconnected reader misses nothing
that is still in the stream, and a reader that does miss something (Redis restarted without
persistence, a node killed between COMMIT and XADD) sees a gap in the sequence numbers or is
told by ``on_reconnect``; the cluster then backfills from PostgreSQL. Redis is never the only
copy of anything acked: updates are published after COMMIT.

Publishing never waits for Redis on the hot path: entries go to a queue bounded in bytes
(``bus_queue_bytes``, counting the batch in flight to Redis too; beyond it they are dropped and
counted, and reconciliation delivers the updates) that one task drains into pipelined XADDs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from ..runtime.log_redaction import redact

log = logging.getLogger(__name__)

_KEY_PREFIX = b"tether:doc:"
_BLOCK_MS = 100  # a newly loaded document joins the read within this
_READ_COUNT = 1000
_KEY_TTL_S = 24 * 3600  # a document nobody edits for a day leaves Redis
_RETRY_FIRST_S = 0.1
_RETRY_MAX_S = 2.0

UpdateHandler = Callable[[str, int, bytes, int], None]  # document, seq, update, epoch
DeleteHandler = Callable[[str, int], None]  # document, the epoch that was deleted
PresenceHandler = Callable[[str, bytes], None]


def _entry_id(raw: bytes | str) -> tuple[int, int]:
    """A stream entry id ("<ms>-<seq>") as a sortable pair."""
    text = raw.decode() if isinstance(raw, bytes) else raw
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)


def stream_key(name: str) -> bytes:
    return _KEY_PREFIX + name.encode("utf-8", "surrogatepass")


class RedisBus:
    def __init__(
        self,
        url: str,
        node_id: str,
        *,
        stream_length: int,
        queue_bytes: int,
        on_update: UpdateHandler,
        on_presence: PresenceHandler,
        on_reconnect: Callable[[], None],
        on_drop: Callable[[], None] | None = None,
        on_delete: DeleteHandler | None = None,
    ) -> None:
        self.url = url
        self.node_id = node_id
        self._node = node_id.encode()
        self._stream_length = stream_length
        self._queue_bytes = queue_bytes
        self._on_update = on_update
        self._on_presence = on_presence
        self._on_reconnect = on_reconnect
        self._on_drop = on_drop
        self._on_delete = on_delete
        self._pub: aioredis.Redis | None = None
        self._sub: aioredis.Redis | None = None
        self._wanted: set[str] = set()
        self._last_ids: dict[str, bytes] = {}  # per subscribed document: the last entry read
        self._outgoing: list[tuple[bytes, dict[bytes, bytes]]] = []
        self._outgoing_bytes = 0
        self._inflight_bytes = 0  # the batch being written to Redis: still held here
        self.queued_bytes_peak = 0
        self._drop_logged = False
        self._wake_publisher = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.connected = False
        self.last_error = ""
        self.published = 0
        self.received = 0
        self.dropped = 0
        self._down_logged = False

    async def __aenter__(self) -> RedisBus:
        # Short timeouts: a hung Redis must show as "down" (and be worked around) quickly.
        common: dict[str, Any] = {"socket_connect_timeout": 2, "decode_responses": False}
        self._pub = aioredis.from_url(self.url, socket_timeout=5, **common)
        self._sub = aioredis.from_url(self.url, socket_timeout=_BLOCK_MS / 1000 + 5, **common)
        self._tasks = [
            asyncio.ensure_future(self._read_loop()),
            asyncio.ensure_future(self._publish_loop()),
        ]
        return self

    async def __aexit__(self, *exc: object) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for client in (self._pub, self._sub):
            if client is not None:
                with contextlib.suppress(Exception):
                    await client.aclose()

    # -- subscriptions -----------------------------------------------------------------------

    async def subscribe(self, name: str) -> None:
        """Read the document's stream from its current end on (earlier entries are in
        PostgreSQL: the caller backfills after this). Asks Redis now, so that nothing sent
        after this returns is missed; if Redis does not answer, the read loop retries."""
        self._wanted.add(name)
        if name in self._last_ids or self._pub is None or not self.connected:
            return  # Redis is down: the read loop starts this stream when it is back
        try:
            newest = await asyncio.wait_for(self._pub.xrevrange(stream_key(name), count=1), 1.0)
        except (RedisError, OSError, TimeoutError) as exc:
            self._down(exc)
            return
        if name in self._wanted and name not in self._last_ids:
            self._last_ids[name] = newest[0][0] if newest else b"0-0"

    def unsubscribe(self, name: str) -> None:
        self._wanted.discard(name)
        self._last_ids.pop(name, None)

    # -- publishing --------------------------------------------------------------------------

    def publish_updates(self, items: list[tuple[str, int, bytes, int]]) -> None:
        for name, seq, data, epoch in items:
            fields = {b"k": b"u", b"n": self._node, b"s": str(seq).encode(), b"d": data}
            fields[b"g"] = str(epoch).encode()
            self._queue(name, fields)

    def publish_delete(self, name: str, epoch: int) -> None:
        """The document's incarnation ``epoch`` was deleted (if this is dropped, the other
        nodes' reconciliation finds the document gone in PostgreSQL)."""
        self._queue(name, {b"k": b"x", b"n": self._node, b"g": str(epoch).encode(), b"d": b""})

    def publish_presence(self, name: str, body: bytes) -> None:
        self._queue(name, {b"k": b"p", b"n": self._node, b"d": body})

    def _queue(self, name: str, fields: dict[bytes, bytes]) -> None:
        size = len(fields[b"d"]) + 64
        held = self.queued_bytes
        if held + size > self._queue_bytes and held:
            # Redis is slow or gone: what is dropped here is in PostgreSQL (updates) or is
            # refreshed by its client (presence); reconciliation delivers the updates.
            self.dropped += 1
            if self._on_drop is not None:
                self._on_drop()
            if not self._drop_logged:  # once per backlog, not per entry
                self._drop_logged = True
                log.warning(
                    "%d bytes wait for Redis (bus_queue_bytes): dropping entries; other nodes"
                    " backfill the updates from PostgreSQL",
                    held,
                )
            return
        self._outgoing.append((stream_key(name), fields))
        self._outgoing_bytes += size
        self.queued_bytes_peak = max(self.queued_bytes_peak, self.queued_bytes)
        self._wake_publisher.set()

    @property
    def queued_bytes(self) -> int:
        """What this node holds for Redis: queued plus the batch in flight."""
        return self._outgoing_bytes + self._inflight_bytes

    async def _publish_loop(self) -> None:
        delay = _RETRY_FIRST_S
        while True:
            await self._wake_publisher.wait()
            self._wake_publisher.clear()
            batch, self._outgoing = self._outgoing, []
            self._inflight_bytes, self._outgoing_bytes = self._outgoing_bytes, 0
            if not batch:
                continue
            assert self._pub is not None
            try:
                async with self._pub.pipeline(transaction=False) as pipe:
                    for key, fields in batch:
                        pipe.xadd(key, fields, maxlen=self._stream_length, approximate=True)
                    for key in {key for key, _ in batch}:
                        pipe.expire(key, _KEY_TTL_S)
                    await pipe.execute()
                self.published += len(batch)
                delay = _RETRY_FIRST_S
            except (RedisError, OSError) as exc:
                # Not retried: the readers reconcile from PostgreSQL, and stale presence is
                # worse than none.
                self.dropped += len(batch)
                self._down(exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, _RETRY_MAX_S)
            finally:
                self._inflight_bytes = 0
                if not self._outgoing:
                    self._drop_logged = False

    # -- reading -----------------------------------------------------------------------------

    async def _read_loop(self) -> None:
        delay = _RETRY_FIRST_S
        while True:
            try:
                if not self.connected:
                    assert self._sub is not None
                    await self._sub.ping()
                    await self._resume_streams()
                    self._up()
                    self._on_reconnect()
                await self._read_once()
                delay = _RETRY_FIRST_S
            except (RedisError, OSError) as exc:
                self._down(exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, _RETRY_MAX_S)

    async def _resume_streams(self) -> None:
        """Back from an outage: read each stream on from the last entry we saw, so nothing
        published since Redis came back is skipped (presence is in no database: a reader
        that restarted at the stream's end lost what was published before it re-read).
        A stream that no longer holds our last entry (Redis restarted empty, or trimmed it
        past us) is read from its start: everything in it is new to us, and updates read
        twice are dropped by their sequence numbers."""
        assert self._sub is not None
        for name, last in list(self._last_ids.items()):
            first = await self._sub.xrange(stream_key(name), count=1)
            if not first or _entry_id(first[0][0]) > _entry_id(last):
                self._last_ids[name] = b"0-0"

    async def _read_once(self) -> None:
        assert self._sub is not None
        for name in list(self._wanted):
            if name not in self._last_ids:
                # Start at the stream's current end: what came before is in PostgreSQL and
                # the cluster backfills it after subscribing.
                newest = await self._sub.xrevrange(stream_key(name), count=1)
                self._last_ids[name] = newest[0][0] if newest else b"0-0"
        if not self._last_ids:
            await asyncio.sleep(_BLOCK_MS / 1000)  # nothing loaded; Redis need not be asked
            return
        names = {stream_key(name): name for name in self._last_ids}
        streams = {key: self._last_ids[name] for key, name in names.items()}
        reply = await self._sub.xread(streams, count=_READ_COUNT, block=_BLOCK_MS)
        for key, entries in reply or []:
            name = names.get(bytes(key))
            if name is None or name not in self._last_ids:
                continue  # unsubscribed while the read was in flight
            for entry_id, fields in entries:
                self._last_ids[name] = entry_id
                self._dispatch(name, fields)

    def _dispatch(self, name: str, fields: dict[bytes, bytes]) -> None:
        if fields.get(b"n") == self._node:
            return  # our own: already applied and sent here
        self.received += 1
        kind = fields.get(b"k")
        try:
            if kind == b"u":
                epoch = int(fields.get(b"g", b"0"))
                self._on_update(name, int(fields[b"s"]), bytes(fields[b"d"]), epoch)
            elif kind == b"x" and self._on_delete is not None:
                self._on_delete(name, int(fields[b"g"]))
            elif kind == b"p":
                self._on_presence(name, bytes(fields[b"d"]))
        except Exception:  # a bad entry or a handler's bug must not stop the relay
            log.exception("could not handle a bus entry for %r", name)

    # -- state -------------------------------------------------------------------------------

    def _up(self) -> None:
        if self._down_logged:
            log.warning("Redis reachable again; backfilling loaded documents")
        self.connected = True
        self._down_logged = False

    def _down(self, exc: BaseException) -> None:
        self.connected = False
        self.last_error = redact(f"{type(exc).__name__}: {exc}")[:300]
        if not self._down_logged:
            self._down_logged = True
            log.error(
                "Redis unreachable; nodes converge through PostgreSQL meanwhile: %s",
                self.last_error,
            )

    def health(self) -> dict[str, Any]:
        state = "up" if self.connected else "down"
        out: dict[str, Any] = {"state": state, "node": self.node_id}
        out.update(published=self.published, received=self.received, dropped=self.dropped)
        out.update(queued_bytes=self.queued_bytes, queued_bytes_peak=self.queued_bytes_peak)
        if not self.connected and self.last_error:
            out["error"] = self.last_error
        return out
