"""PostgreSQL storage (asyncpg, group commit, per-document sequence numbers); knows no Yjs.

The same promises as ``SQLiteStore`` (see ``collab.storage.store``), made safe for several nodes
writing one database:

- Every update gets a per-document sequence number, ``documents.last_seq + 1``, taken under the
  document row's lock (``SELECT ... FOR UPDATE``) in the transaction that inserts it. The lock is
  held to COMMIT, so per document the numbers are gap-free AND commit in number order: a reader
  that has seen seq N and asks for "everything after N" can never miss a lower number that
  commits later. That is what lets the cluster (``collab.cluster.node``) detect gaps and
  backfill, through this store's ``SequencedStore`` face (``collab.storage.sequenced``). Row
  locks, not advisory locks: they come with the rows we write anyway, are released by COMMIT or
  by a dead connection, and need no key scheme. A batch locks its documents in name order, so
  two nodes' batches cannot deadlock.
- Group commit: one writer task takes everything queued (up to ``max_batch``) and runs it in ONE
  transaction; futures resolve only after COMMIT returns, so an awaited append is committed
  (``collab.storage.writer_queue``, shared with SQLite).
- What this node holds of each document (its *watermark*: own commits, what it loaded, what
  the bus delivered; the incarnation held) is the node's ledger, given at construction as
  ``Holdings`` (``collab.storage.sequenced``; ``collab.cluster.ledger`` implements it). The
  write path reads it and records there what it loads, commits, deletes and adopts.
- Compaction is one transaction and folds only what the snapshot is known to contain: the
  caller's document holds every update up to its watermark, so compact deletes
  ``seq <= watermark`` and records ``snapshot_seq``; a compaction whose watermark is not above
  the stored ``snapshot_seq`` (a slower node compacting concurrently) changes nothing. Updates
  another node committed that this node has not seen yet are never folded away.
- Deleting a document fences every node that still has it loaded. Each incarnation of a
  document has an *epoch* (``tether_documents.epoch``, from one global sequence, so a document
  created again after a delete always has a higher one) and a delete leaves a tombstone with
  the epoch it ended. A node remembers the epoch it loaded (or, for a document absent at load,
  the tombstone's: anything above it is a new incarnation it may adopt); its appends and
  compactions only land in that incarnation, so a node that has not heard of the delete yet
  cannot write the old content (or edits built on it) into the new document, and its old
  sequence numbers never mix with the new ones. Such a write fails and the listener's
  ``stale`` tells the cluster, which closes the document there as deleted.
- While the database is unreachable the writer retries the batch (nothing is acked meanwhile);
  after ``outage_timeout`` seconds the batch fails with StorageError (a negative ack), and new
  writes fail at once while more than ``queue_bytes`` wait.
- A failed append fences its document: every append or compaction of it still queued, or
  called later, fails too until the room calls ``resume`` after rebuilding the document from
  the database. Later updates may build on the lost one (its editor's next keystroke, or
  another editor's who saw it fanned out), and committed without it they could never be
  integrated by anyone loading the document. The room asks its editors to resend instead.
- Version bytes (the quotas') are counted in ``tether_version_totals``: a row per token subject
  and one for everyone, changed in the same statement or transaction as every version insert
  and delete, so every node reads the same exact sums in one row each instead of summing the
  versions per request (which made each version request slower than the last).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Literal, Self
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import asyncpg

from ..runtime.log_redaction import redact, redact_url
from . import postgres_sql as sql
from .sequenced import Backfill, Committed, Holdings, StoreEvents, Watermark
from .store import DocumentInfo, Lifecycle, StorageError, Store, VersionInfo, names_from
from .writer_queue import Fences, Op, WriterQueue, not_open, resolve, wait

log = logging.getLogger(__name__)

SCHEMA_VERSION = 3
_RETRY_FIRST_S = 0.05
_RETRY_MAX_S = 1.0


# The link failed (refused, cut, timed out) vs. anything the server said.
_LINK_ERRORS = (TimeoutError, OSError, asyncpg.InterfaceError)
_DB_ERRORS = (*_LINK_ERRORS, asyncpg.PostgresError)

OpKind = Literal["append", "compact", "delete"]


@dataclass(eq=False, slots=True)
class _Op(Op):
    seq: int = 0  # append: its number, once its batch has run
    epoch: int = 0  # the incarnation it must land in, taken when its batch runs (see _expect)
    # compact: what the caller's snapshot holds: the watermark when it called, and its own
    # appends called before (numbered later, when their batches run)
    held: Watermark | None = None
    before: list[_Op] = field(default_factory=list)

    def upto(self) -> int:
        """compact: the highest seq that the snapshot holds along with everything below it."""
        assert self.held is not None
        mark = self.held.copy()
        for op in self.before:
            if op.seq:
                mark.add(op.seq)
        return mark.mark


@dataclass(slots=True)
class _Row:
    last_seq: int
    snapshot_seq: int
    log_entries: int
    log_bytes: int
    epoch: int = 0
    deleted: bool = False


class PostgresStore(Store):
    """A Store in one PostgreSQL database, shared by any number of nodes; ``ledger`` is what
    this node holds of each document (see the module docstring)."""

    backend = "postgresql"

    def __init__(
        self,
        dsn: str,
        *,
        ledger: Holdings,
        max_batch: int = 1000,
        outage_timeout: float = 30.0,
        queue_bytes: int = 64 * 1024 * 1024,
        read_connections: int = 4,
        statement_cache_size: int = 100,
        on_refusal: Callable[[str], None] | None = None,
    ) -> None:
        self.dsn = dsn
        self.commits = 0
        self._ledger = ledger
        self._events: StoreEvents | None = None
        self._outage_timeout = outage_timeout
        self._read_connections = read_connections
        # Named prepared statements live on a server connection; behind a PgBouncer in
        # transaction pooling the next transaction may run on another one (0: unnamed only).
        self._connect_args: dict[str, Any] = {"statement_cache_size": statement_cache_size}
        self._state: Lifecycle = "new"
        self._waiting: asyncio.Queue[_Op | None] = asyncio.Queue()  # None = stop
        self._queue = WriterQueue(
            self._waiting,
            asyncio.QueueEmpty,
            max_batch=max_batch,
            bound=queue_bytes,
            limit="store_queue_bytes",
            engine="PostgreSQL",
            on_refusal=on_refusal,
            log=log,
        )
        self._writer: asyncpg.Connection | None = None
        self._pool: asyncpg.Pool | None = None
        self._task: asyncio.Task[None] | None = None
        # documents whose append failed: what was called after it fails too, until resume()
        self._fences = Fences()
        # appends called but not yet committed, per document: a compact called now holds them
        self._uncommitted: dict[str, list[_Op]] = {}
        self.available = False  # the last database round trip worked
        self.last_error = ""
        self._outage_logged = False

    # -- lifecycle ---------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._state != "new":
            raise StorageError("a store can be opened only once")
        try:
            self._writer = await asyncpg.connect(self.dsn, timeout=10, **self._connect_args)
            await _migrate(self._writer)
            self._pool = await asyncpg.create_pool(
                self.dsn,
                min_size=1,
                max_size=self._read_connections,
                timeout=10,
                **self._connect_args,
            )
        except _DB_ERRORS as exc:
            await self._close_connections()
            raise StorageError(f"cannot open {redact_url(self.dsn)}: {redact(str(exc))}") from exc
        self.available = True
        self._state = "open"
        self._task = asyncio.ensure_future(self._serve())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._state != "open":
            return
        self._state = "closed"
        self._queue.stop()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
        await self._close_connections()

    async def _close_connections(self) -> None:
        if self._writer is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._writer.close(), 5)
            self._writer = None
        if self._pool is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._pool.close(), 5)
            self._pool = None

    # -- what the cluster reads (collab.storage.sequenced.SequencedStore) ----------------------

    def sequenced(self) -> Self:
        return self

    def listen(self, events: StoreEvents | None) -> None:
        self._events = events

    @property
    def queued_bytes(self) -> int:
        return self._queue.queued_bytes

    # -- writes ------------------------------------------------------------------------------

    def append(self, name: str, update: bytes) -> Coroutine[Any, Any, int]:
        return wait(self.append_future(name, update))

    def append_future(self, name: str, update: bytes) -> asyncio.Future[int]:
        return self._enqueue("append", name, bytes(update))

    def compact(self, name: str, snapshot: bytes) -> Coroutine[Any, Any, None]:
        return wait(self._enqueue("compact", name, bytes(snapshot)))

    def delete(self, name: str) -> Coroutine[Any, Any, None]:
        return wait(self._enqueue("delete", name, b""))

    def resume(self, name: str) -> None:
        self._fences.lift(name)

    def _enqueue(self, kind: OpKind, name: str, data: bytes) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        order = self._queue.number()
        if self._state != "open":
            future.set_exception(not_open(kind, name, self._state))
        elif kind != "delete" and name in self._fences:
            future.set_exception(_fenced_error(kind, name))
        elif (refused := self._queue.refusal(kind, name, len(data))) is not None:
            future.set_exception(refused)
            if kind == "append":
                self._fences.fence(name, order)
        else:
            op = _Op(kind, name, data, future, order=order)
            if kind == "append":
                self._uncommitted.setdefault(name, []).append(op)
            elif kind == "compact":
                # Read now, at call time: the caller took the snapshot in this same step.
                op.held = self._ledger.watermark(name).copy()
                op.before = list(self._uncommitted.get(name, ()))
            self._queue.put(op)
        return future

    # -- reads -------------------------------------------------------------------------------

    async def load(self, name: str) -> list[bytes]:
        async def query(conn: asyncpg.Connection) -> list[bytes]:
            async with conn.transaction(isolation="repeatable_read", readonly=True):
                row = await conn.fetchrow(
                    sql.LOAD_ROW,
                    name,
                )
                rows = await conn.fetch(sql.LOAD_LOG, name)
                ended = None
                if row is None:
                    ended = await conn.fetchval(sql.TOMBSTONE, name)
            self._ledger.loaded(
                name,
                int(row["epoch"]) if row is not None else -int(ended or 0),
                int(row["snapshot_seq"]) if row is not None else 0,
                (int(entry["seq"]) for entry in rows),
            )
            head = [] if row is None or row["snapshot"] is None else [bytes(row["snapshot"])]
            return head + [bytes(entry["data"]) for entry in rows]

        return await self._read(query)

    async def backfill(self, name: str, after: int) -> Backfill:
        """What a document holding everything up to ``after`` lacks (see ``Backfill``)."""

        async def query(conn: asyncpg.Connection) -> Backfill:
            async with conn.transaction(isolation="repeatable_read", readonly=True):
                row = await conn.fetchrow(
                    sql.BACKFILL_ROW,
                    name,
                    after,
                )
                if row is None:
                    return Backfill(None, 0)
                start = max(after, int(row["snapshot_seq"]))
                rows = await conn.fetch(
                    sql.BACKFILL_LOG,
                    name,
                    start,
                )
            snap = row["snap"]
            return Backfill(
                None if snap is None else bytes(snap),
                int(row["snapshot_seq"]),
                [(int(r["seq"]), bytes(r["data"])) for r in rows],
                int(row["epoch"]),
            )

        return await self._read(query)

    async def heads(self, names: list[str]) -> dict[str, int]:
        """Each named document's last committed seq (documents never written are absent)."""

        async def query(conn: asyncpg.Connection) -> dict[str, int]:
            rows = await conn.fetch(sql.HEADS, names)
            return {r["name"]: int(r["last_seq"]) for r in rows}

        return await self._read(query)

    async def generations(self, names: list[str]) -> dict[str, tuple[int, int]]:
        """Each named document's (epoch, last seq); documents that do not exist are absent."""

        async def query(conn: asyncpg.Connection) -> dict[str, tuple[int, int]]:
            rows = await conn.fetch(
                sql.GENERATIONS,
                names,
            )
            return {r["name"]: (int(r["epoch"]), int(r["last_seq"])) for r in rows}

        return await self._read(query)

    async def list_documents(
        self, *, prefix: str = "", after: str = "", limit: int | None = None
    ) -> list[DocumentInfo]:
        low, high = names_from(prefix)
        where = sql.PAGE_FROM + (sql.PAGE_BELOW if high is not None else "")
        args: list[Any] = [after, low] + ([high] if high is not None else [])
        page = sql.INFO.format(where=where) + (f" LIMIT {int(limit)}" if limit is not None else "")

        async def query(conn: asyncpg.Connection) -> list[DocumentInfo]:
            rows = await conn.fetch(page, *args)
            return [_info(r) for r in rows if r["name"].startswith(prefix)]

        return await self._read(query)

    async def info(self, name: str) -> DocumentInfo | None:
        async def query(conn: asyncpg.Connection) -> DocumentInfo | None:
            row = await conn.fetchrow(sql.INFO_OF, name)
            return None if row is None else _info(row)

        return await self._read(query)

    # Versions run in their own transaction when awaited, outside the group-commit queue: a
    # version saved after an append that is still queued does not wait for it, and need not:
    # a version is a full state the caller read from its document, which already holds every
    # update applied on this node, acked or still queued (acks follow the apply), so no ack
    # can be missing from it and no log order is involved. Edits acked on OTHER nodes are the
    # caller's business: the REST layer catches the document up from PostgreSQL first
    # (the cluster's ``before_read`` hook), since the bus may lag.
    def add_version(
        self, name: str, label: str, state: bytes, subject: str = ""
    ) -> Coroutine[Any, Any, VersionInfo]:
        data = bytes(state)

        async def query(conn: asyncpg.Connection) -> VersionInfo:
            now = time.time()
            # One statement, so one transaction: the version and its bytes in the totals.
            version = await conn.fetchval(sql.ADD_VERSION, name, label, now, data, subject)
            return VersionInfo(int(version), name, label, now, len(data))

        return self._read(query)

    def delete_version(self, name: str, version: int) -> Coroutine[Any, Any, bool]:
        async def query(conn: asyncpg.Connection) -> bool:
            return bool(await conn.fetchval(sql.DELETE_VERSION, name, version))

        return self._read(query)

    async def version_bytes(self, subject: str | None = None) -> int:
        async def query(conn: asyncpg.Connection) -> int:
            total = await conn.fetchval(sql.VERSION_BYTES, subject is None, subject or "")
            return int(total or 0)

        return await self._read(query)

    async def list_versions(self, name: str) -> list[VersionInfo]:
        async def query(conn: asyncpg.Connection) -> list[VersionInfo]:
            rows = await conn.fetch(
                sql.LIST_VERSIONS,
                name,
            )
            return [
                VersionInfo(r["id"], r["name"], r["label"], r["created_at"], r["size"])
                for r in rows
            ]

        return await self._read(query)

    async def load_version(self, name: str, version: int) -> bytes | None:
        async def query(conn: asyncpg.Connection) -> bytes | None:
            data = await conn.fetchval(sql.LOAD_VERSION, name, version)
            return None if data is None else bytes(data)

        return await self._read(query)

    async def ping(self) -> bool:
        try:
            await self._read(lambda conn: conn.fetchval(sql.PING))
        except StorageError:
            return False
        return True

    async def _read(self, query: Callable[[asyncpg.Connection], Any]) -> Any:
        if self._state != "open" or self._pool is None:
            raise StorageError(f"cannot read: the store is {self._state}")
        try:
            async with self._pool.acquire(timeout=10) as conn:
                result = await query(conn)
        except _DB_ERRORS as exc:
            self._unavailable(exc)
            raise StorageError(f"read failed: {redact(str(exc))}") from exc
        self._available()
        return result

    # -- the writer task ---------------------------------------------------------------------

    async def _serve(self) -> None:
        stop = False
        while not stop:
            ops, stop = await self._take()
            if ops:
                await self._commit(ops)

    async def _take(self) -> tuple[list[_Op], bool]:
        first = await self._waiting.get()
        if first is None:
            return [], True
        return self._queue.rest([first])

    async def _commit(self, ops: list[_Op]) -> None:
        if self._fences:  # queued before their document's earlier append failed
            held = [op for op in ops if self._fences.holds(op)]
            for op in held:
                self._settled(op)
            resolve(held, [_fenced_error(op.kind, op.name) for op in held])
            ops = [op for op in ops if not self._fences.holds(op)]
            if not ops:
                return
        deadline = time.monotonic() + self._outage_timeout
        delay = _RETRY_FIRST_S
        while True:
            try:
                conn = await self._connection()
                for op in ops:
                    op.epoch = self._ledger.epoch(op.name)
                results, committed = await _run_batch(conn, ops, time.time())
                break
            except asyncpg.PostgresError as exc:
                if not _is_transient(exc):  # a real error in the data: fail this batch
                    self._settle_failed(ops, exc)
                    return
                failure: BaseException = exc
            except _LINK_ERRORS as exc:
                failure = exc
            # The connection is gone (or the server is restarting): nothing in this batch was
            # acked; if COMMIT did reach the server before the link died, the retry stores the
            # same updates again under new numbers, which a CRDT applies idempotently.
            self._unavailable(failure)
            await self._drop_writer()
            if time.monotonic() >= deadline or self._state == "closed":
                self._settle_failed(ops, failure)
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, _RETRY_MAX_S)
        self.commits += 1
        self._available()
        stale: set[str] = set()
        ledger, events = self._ledger, self._events
        for op, result in zip(ops, results, strict=True):
            self._settled(op)
            if op.kind == "delete":
                ledger.deleted(op.name, op.epoch)
                if op.epoch and events is not None:
                    events.deleted(op.name, op.epoch)
            elif isinstance(result, _Stale):
                stale.add(op.name)
            elif op.kind == "append":
                ledger.landed(op.name, op.epoch)
        for name, seq, _ in committed:
            ledger.committed(name, seq)
        if committed and events is not None:
            try:
                events.committed(committed)
            except Exception:  # the bus must never hold up an ack
                log.exception("telling the listener of commits failed")
        resolve(
            ops,
            [
                StorageError(f"{op.kind} {op.name!r}: the document was deleted meanwhile")
                if isinstance(result, _Stale)
                else result
                for op, result in zip(ops, results, strict=True)
            ],
        )
        for name in stale:
            log.warning("document %r was deleted by another node; closing it here", name)
            if events is not None:
                events.stale(name)

    def _settle_failed(self, ops: list[_Op], exc: BaseException) -> None:
        for op in ops:
            self._settled(op)
            self._fences.failed(op)
        resolve(ops, [_failure(op, exc) for op in ops])

    def _settled(self, op: _Op) -> None:
        self._queue.settled(op)
        if op.kind == "append":
            waiting = self._uncommitted.get(op.name)
            if waiting:
                with contextlib.suppress(ValueError):
                    waiting.remove(op)  # the oldest, almost always: O(1) in practice
                if not waiting:
                    del self._uncommitted[op.name]

    async def _connection(self) -> asyncpg.Connection:
        if self._writer is None or self._writer.is_closed():
            self._writer = await asyncpg.connect(self.dsn, timeout=5, **self._connect_args)
        return self._writer

    async def _drop_writer(self) -> None:
        if self._writer is not None:
            self._writer.terminate()
            self._writer = None

    def _unavailable(self, exc: BaseException) -> None:
        self.available = False
        self.last_error = redact(f"{type(exc).__name__}: {exc}")[:300]
        if not self._outage_logged:
            self._outage_logged = True
            log.error(
                "PostgreSQL unreachable; writes wait, nothing is acked: %s",
                self.last_error,
            )

    def _available(self) -> None:
        if not self.available and self._outage_logged:
            log.warning("PostgreSQL reachable again")
        self.available = True
        self._outage_logged = False


class _Stale:
    """What a write returns whose incarnation of the document is gone (another node deleted
    it): it is not stored, and its caller is told so."""


STALE = _Stale()
Result = int | None | _Stale


def _lands(op: _Op, row: _Row) -> bool:
    """``op`` belongs in the incarnation ``row`` is (see ``tether_append``'s p_epochs)."""
    return row.epoch == op.epoch if op.epoch > 0 else row.epoch > -op.epoch


async def _run_batch(
    conn: asyncpg.Connection, ops: list[_Op], now: float
) -> tuple[list[Result], list[Committed]]:
    """One transaction for the whole batch, in call order; what each op returns."""
    if all(op.kind == "append" for op in ops):
        return await _run_appends(conn, ops, now)
    names = sorted({op.name for op in ops})
    # Only an append may create a document, and only one not bound to a (gone) incarnation.
    creatable = sorted({op.name for op in ops if op.kind == "append" and op.epoch <= 0})
    results: list[Result] = []
    committed: list[Committed] = []
    freed: dict[str, int] = {}  # version bytes the deletes removed, per subject
    async with conn.transaction():
        await conn.execute(sql.CREATE_ROWS, creatable, now)
        rows = {
            r["name"]: _Row(
                r["last_seq"],
                r["snapshot_seq"],
                r["log_entries"],
                r["log_bytes"],
                r["epoch"],
            )
            for r in await conn.fetch(sql.LOCK_ROWS, names)
        }
        pending: list[Committed] = []
        for op in ops:
            row = rows.get(op.name)
            if op.kind == "append":
                if row is not None and row.deleted:
                    # Deleted earlier in this batch, so called after that delete: a new one.
                    row = rows[op.name] = _Row(0, 0, 0, 0, await _recreate(conn, op.name, now))
                elif row is None or not _lands(op, row):
                    results.append(STALE)
                    continue
                row.last_seq += 1
                row.log_entries += 1
                row.log_bytes += len(op.data)
                op.seq = row.last_seq
                op.epoch = row.epoch
                pending.append((op.name, row.last_seq, op.data))
                results.append(row.log_entries)
                continue
            await _insert(conn, pending)
            committed.extend(pending)
            pending = []
            if op.kind == "compact":
                if row is None or (not row.deleted and not _lands(op, row)):
                    results.append(STALE if op.epoch > 0 else None)
                    continue
                if not row.deleted:  # a snapshot of what was deleted must not come back
                    await _compact(conn, op, row)
            elif row is not None and not row.deleted:
                op.epoch = row.epoch
                for gone in await conn.fetch(sql.DELETE_VERSIONS, op.name):
                    freed[gone["subject"]] = freed.get(gone["subject"], 0) + gone["bytes"]
                await conn.execute(sql.DELETE_LOG, op.name)
                await conn.execute(sql.DELETE_ROW, op.name)
                await conn.execute(
                    sql.BURY,
                    op.name,
                    row.epoch,
                )
                row.deleted = True
            else:
                op.epoch = 0  # nothing to delete
            results.append(None)
        await _insert(conn, pending)
        committed.extend(pending)
        for name, row in rows.items():
            if not row.deleted:
                await conn.execute(
                    sql.SAVE_ROW, name, row.last_seq, row.snapshot_seq, row.log_entries,
                    row.log_bytes, now,
                )  # fmt: skip
        if freed:  # once, after every delete: the totals' rows are locked in one order
            await conn.execute(
                sql.UNCOUNT_VERSIONS, list(freed), [-size for size in freed.values()]
            )
    return results, committed


async def _run_appends(
    conn: asyncpg.Connection, ops: list[_Op], now: float
) -> tuple[list[Result], list[Committed]]:
    rows = await conn.fetch(
        sql.APPEND,
        [op.name for op in ops],
        [op.data for op in ops],
        [op.epoch for op in ops],
        now,
    )
    results: list[Result] = []
    committed: list[Committed] = []
    for op, row in zip(ops, rows, strict=True):
        if not row["seq"]:
            results.append(STALE)
            continue
        op.seq = int(row["seq"])
        op.epoch = int(row["epoch"])
        results.append(int(row["entries"]))
        committed.append((op.name, op.seq, op.data))
    return results, committed


async def _insert(conn: asyncpg.Connection, pending: list[Committed]) -> None:
    if pending:
        names, seqs, datas = zip(*pending, strict=True)
        await conn.execute(sql.INSERT_UPDATES, list(names), list(seqs), list(datas))


async def _recreate(conn: asyncpg.Connection, name: str, now: float) -> int:
    """A document deleted earlier in the batch, created again: its new epoch."""
    return int(
        await conn.fetchval(
            sql.RECREATE,
            name,
            now,
        )
    )


async def _compact(conn: asyncpg.Connection, op: _Op, row: _Row) -> None:
    # A snapshot holding less than the stored one would drop what the stored one covers.
    upto = min(op.upto(), row.last_seq)
    if upto <= row.snapshot_seq:
        return
    await conn.execute(sql.SET_SNAPSHOT, op.name, op.data)
    left = await conn.fetchrow(
        sql.FOLD_LOG,
        op.name,
        upto,
    )
    row.snapshot_seq = upto
    row.log_entries = int(left["n"])
    row.log_bytes = int(left["bytes"])


async def _migrate(conn: asyncpg.Connection) -> None:
    async with conn.transaction():
        # Two nodes starting at once: one migrates, the other waits here, then sees it done.
        await conn.execute(sql.MIGRATION_LOCK)
        for statement in sql.SCHEMA:
            await conn.execute(statement)
        # Schema 3: counted once from the versions already stored, under the lock above, so
        # by one node only; later every version write keeps the totals in its transaction.
        if await conn.fetchval(sql.HAS_VERSION_TOTALS) is None:
            await conn.execute(sql.VERSION_TOTALS)
            await conn.execute(sql.BACKFILL_VERSION_TOTALS)
        version = await conn.fetchval(sql.SCHEMA_READ)
        if version is not None and int(version) > SCHEMA_VERSION:
            raise StorageError(f"schema version {version} is newer than {SCHEMA_VERSION}")
        await conn.execute(
            sql.SCHEMA_WRITE,
            str(SCHEMA_VERSION),
        )


def _info(row: asyncpg.Record) -> DocumentInfo:
    return DocumentInfo(row[0], float(row[1]), float(row[2]), int(row[3]), int(row[4]))


def _is_transient(exc: asyncpg.PostgresError) -> bool:
    # Class 08 (connection), 57P (admin shutdown, crash, cannot connect now), 40 (serialisation,
    # deadlock): retry. Anything else is about the data and would fail again.
    state = getattr(exc, "sqlstate", "") or ""
    return state.startswith(("08", "57P", "40", "53"))


def _failure(op: _Op, exc: BaseException) -> StorageError:
    # One instance per future: a shared exception would collect every awaiter's traceback.
    error = StorageError(f"{op.kind} {op.name!r} failed: {redact(str(exc))}")
    error.__cause__ = exc
    return error


def _fenced_error(kind: str, name: str) -> StorageError:
    return StorageError(
        f"cannot {kind} {name!r}: an earlier update of it failed; it is rebuilt from the"
        " database before anything more is stored"
    )


def pgbouncer_dsn(dsn: str) -> tuple[str, bool]:
    """``dsn`` without a ``pgbouncer=true`` query parameter (asyncpg would send it to the
    server as a setting), and whether it had one: then prepared statements stay off."""
    parts = urlsplit(dsn)
    query = parse_qsl(parts.query, keep_blank_values=True)
    kept = [(k, v) for k, v in query if k != "pgbouncer"]
    if len(kept) == len(query):
        return dsn, False
    flag = next(v for k, v in query if k == "pgbouncer").lower()
    return urlunsplit(parts._replace(query=urlencode(kept))), flag in (
        "true",
        "1",
        "yes",
        "on",
    )
