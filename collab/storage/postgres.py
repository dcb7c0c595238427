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
from .sequenced import Backfill, Committed, Holdings, StoreEvents, Watermark
from .store import DocumentInfo, Lifecycle, StorageError, Store, VersionInfo, names_from
from .writer_queue import Fences, Op, WriterQueue, not_open, resolve, wait

log = logging.getLogger(__name__)

SCHEMA_VERSION = 3
_RETRY_FIRST_S = 0.05
_RETRY_MAX_S = 1.0


# A batch of appends only (the hot path) is ONE statement, so ONE round trip, committed on its
# own: the document rows are locked from FOR UPDATE to COMMIT and no longer, which is what
# bounds how fast nodes writing the same document can take turns.
# p_epochs: per update, the incarnation it belongs to (> 0: exactly that epoch) or, < = 0, any
# incarnation above -p_epoch (created now if none exists). An update whose incarnation is gone
# comes back with seq 0 and is not stored.
_APPEND_FUNCTION = """CREATE OR REPLACE FUNCTION tether_append(
        p_names text[], p_datas bytea[], p_epochs bigint[], p_now double precision)
    RETURNS TABLE (ord bigint, seq bigint, entries bigint, epoch bigint) LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO tether_documents (name, created_at, updated_at)
            SELECT DISTINCT t.n, p_now, p_now FROM unnest(p_names, p_epochs) AS t(n, e)
            WHERE t.e <= 0 ORDER BY 1
            ON CONFLICT (name) DO NOTHING;
        PERFORM 1 FROM tether_documents WHERE name = ANY(p_names) ORDER BY name FOR UPDATE;
        RETURN QUERY
        WITH input AS (
            SELECT t.n, t.d, t.e, t.o
            FROM unnest(p_names, p_datas, p_epochs) WITH ORDINALITY AS t(n, d, e, o)
        ), numbered AS (
            SELECT i.n, i.d, i.o, doc.epoch AS g,
                doc.last_seq + row_number() OVER w AS s,
                doc.log_entries + row_number() OVER w AS e
            FROM input AS i JOIN tether_documents AS doc ON doc.name = i.n
            WHERE (i.e > 0 AND doc.epoch = i.e) OR (i.e <= 0 AND doc.epoch > -i.e)
            WINDOW w AS (PARTITION BY i.n ORDER BY i.o)
        ), inserted AS (
            INSERT INTO tether_updates (name, seq, data) SELECT n, s, d FROM numbered
        ), saved AS (
            UPDATE tether_documents AS doc
            SET last_seq = m.s, log_entries = m.e, log_bytes = doc.log_bytes + m.b,
                updated_at = p_now
            FROM (SELECT n, max(s) AS s, max(e) AS e, sum(length(d)) AS b
                  FROM numbered GROUP BY n) AS m
            WHERE doc.name = m.n
        )
        SELECT input.o, COALESCE(numbered.s, 0), COALESCE(numbered.e, 0),
            COALESCE(numbered.g, 0)
        FROM input LEFT JOIN numbered ON numbered.o = input.o ORDER BY input.o;
    END $$"""

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS tether_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS tether_documents (
        name TEXT PRIMARY KEY,
        snapshot BYTEA,
        snapshot_seq BIGINT NOT NULL DEFAULT 0,
        last_seq BIGINT NOT NULL DEFAULT 0,
        log_entries BIGINT NOT NULL DEFAULT 0,
        log_bytes BIGINT NOT NULL DEFAULT 0,
        created_at DOUBLE PRECISION NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS tether_updates (
        name TEXT NOT NULL,
        seq BIGINT NOT NULL,
        data BYTEA NOT NULL,
        PRIMARY KEY (name, seq)
    )""",
    """CREATE TABLE IF NOT EXISTS tether_versions (
        id BIGSERIAL PRIMARY KEY,
        name TEXT NOT NULL,
        label TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        data BYTEA NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS tether_versions_by_name ON tether_versions (name, id)",
    # Who made each version, for its byte quota.
    "ALTER TABLE tether_versions ADD COLUMN IF NOT EXISTS subject TEXT NOT NULL DEFAULT ''",
    "CREATE INDEX IF NOT EXISTS tether_versions_by_subject ON tether_versions (subject)",
    # Schema 2: incarnations (see the module docstring).
    "CREATE SEQUENCE IF NOT EXISTS tether_epochs",
    """ALTER TABLE tether_documents
        ADD COLUMN IF NOT EXISTS epoch BIGINT NOT NULL DEFAULT nextval('tether_epochs')""",
    """CREATE TABLE IF NOT EXISTS tether_tombstones (
        name TEXT PRIMARY KEY,
        epoch BIGINT NOT NULL
    )""",
    "DROP FUNCTION IF EXISTS tether_append(text[], bytea[], double precision)",
    _APPEND_FUNCTION,
)

# Schema 3: the version bytes per token subject (everyone = false) and of every version (the
# one row with everyone = true), kept by whatever inserts or deletes versions, in its own
# transaction. Every version insert updates the everyone row, so versions taken at once on any
# nodes take turns on it until each commits: acceptable, versions are rare and each insert is
# one short statement. Rows are locked subjects first, in order, then the everyone row, so two
# writers cannot deadlock on them.
_VERSION_TOTALS = """CREATE TABLE tether_version_totals (
        everyone BOOLEAN NOT NULL,
        subject TEXT NOT NULL,
        bytes BIGINT NOT NULL,
        PRIMARY KEY (everyone, subject)
    )"""
_BACKFILL_VERSION_TOTALS = """INSERT INTO tether_version_totals (everyone, subject, bytes)
    SELECT false, subject, SUM(LENGTH(data)) FROM tether_versions GROUP BY subject
    UNION ALL SELECT true, '', COALESCE(SUM(LENGTH(data)), 0) FROM tether_versions"""
# Adds each (subject, bytes) of {changes} to its subject's row and their sum to everyone's.
_COUNT_VERSIONS = """INSERT INTO tether_version_totals (everyone, subject, bytes)
    SELECT false, c.subject, c.bytes FROM {changes}
    UNION ALL SELECT true, '', SUM(c.bytes) FROM {changes} HAVING COUNT(*) > 0
    ORDER BY 1, 2
    ON CONFLICT (everyone, subject)
    DO UPDATE SET bytes = tether_version_totals.bytes + excluded.bytes"""
_ADD_VERSION = (
    """WITH added AS (
        INSERT INTO tether_versions (name, label, created_at, data, subject)
        VALUES ($1, $2, $3, $4, $5) RETURNING id, subject, LENGTH(data)::bigint AS bytes
    ), counted AS ("""
    + _COUNT_VERSIONS.format(changes="added AS c")
    + """)
    SELECT id FROM added"""
)
# One version forgotten, and its bytes taken off its subject's total and everyone's, in one
# statement (so one transaction); yields how many went (0 or 1).
_DELETE_VERSION = (
    """WITH gone AS (
        DELETE FROM tether_versions WHERE name = $1 AND id = $2
        RETURNING subject, -LENGTH(data)::bigint AS bytes
    ), counted AS ("""
    + _COUNT_VERSIONS.format(changes="gone AS c")
    + """)
    SELECT COUNT(*) FROM gone"""
)
# What deleting a document's versions frees, per subject: counted at the end of the batch.
_DELETE_VERSIONS = """WITH gone AS (
        DELETE FROM tether_versions WHERE name = $1 RETURNING subject, LENGTH(data) AS bytes
    ) SELECT subject, SUM(bytes)::bigint AS bytes FROM gone GROUP BY subject"""
_UNCOUNT_VERSIONS = _COUNT_VERSIONS.format(
    changes="unnest($1::text[], $2::bigint[]) AS c(subject, bytes)"
)

_CREATE_ROWS = """INSERT INTO tether_documents (name, created_at, updated_at)
    SELECT n, $2, $2 FROM unnest($1::text[]) AS n ORDER BY n
    ON CONFLICT (name) DO NOTHING"""
_LOCK_ROWS = """SELECT name, last_seq, snapshot_seq, log_entries, log_bytes, epoch
    FROM tether_documents WHERE name = ANY($1::text[]) ORDER BY name FOR UPDATE"""
_INSERT_UPDATES = """INSERT INTO tether_updates (name, seq, data)
    SELECT * FROM unnest($1::text[], $2::bigint[], $3::bytea[])"""
_SAVE_ROW = """UPDATE tether_documents SET last_seq = $2, snapshot_seq = $3, log_entries = $4,
    log_bytes = $5, updated_at = $6 WHERE name = $1"""
# Names compare and sort by code point (COLLATE "C"), as in SQLite and in memory, whatever the
# database's locale: a page's cursor means the same on every store.
_INFO = """SELECT name, created_at, updated_at, log_entries,
        COALESCE(LENGTH(snapshot), 0) + log_bytes
    FROM tether_documents {where} ORDER BY name COLLATE "C"
"""

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
                    "SELECT snapshot, snapshot_seq, epoch FROM tether_documents WHERE name = $1",
                    name,
                )
                rows = await conn.fetch(
                    "SELECT seq, data FROM tether_updates WHERE name = $1 ORDER BY seq", name
                )
                ended = None
                if row is None:
                    ended = await conn.fetchval(
                        "SELECT epoch FROM tether_tombstones WHERE name = $1", name
                    )
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
                    "SELECT snapshot_seq, epoch,"
                    " CASE WHEN snapshot_seq > $2 THEN snapshot END AS snap"
                    " FROM tether_documents WHERE name = $1",
                    name,
                    after,
                )
                if row is None:
                    return Backfill(None, 0)
                start = max(after, int(row["snapshot_seq"]))
                rows = await conn.fetch(
                    "SELECT seq, data FROM tether_updates WHERE name = $1 AND seq > $2"
                    " ORDER BY seq",
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
            rows = await conn.fetch(
                "SELECT name, last_seq FROM tether_documents WHERE name = ANY($1::text[])", names
            )
            return {r["name"]: int(r["last_seq"]) for r in rows}

        return await self._read(query)

    async def generations(self, names: list[str]) -> dict[str, tuple[int, int]]:
        """Each named document's (epoch, last seq); documents that do not exist are absent."""

        async def query(conn: asyncpg.Connection) -> dict[str, tuple[int, int]]:
            rows = await conn.fetch(
                "SELECT name, epoch, last_seq FROM tether_documents WHERE name = ANY($1::text[])",
                names,
            )
            return {r["name"]: (int(r["epoch"]), int(r["last_seq"])) for r in rows}

        return await self._read(query)

    async def list_documents(
        self, *, prefix: str = "", after: str = "", limit: int | None = None
    ) -> list[DocumentInfo]:
        low, high = names_from(prefix)
        where = 'WHERE name COLLATE "C" > $1 AND name COLLATE "C" >= $2' + (
            ' AND name COLLATE "C" < $3' if high is not None else ""
        )
        args: list[Any] = [after, low] + ([high] if high is not None else [])
        sql = _INFO.format(where=where) + (f" LIMIT {int(limit)}" if limit is not None else "")

        async def query(conn: asyncpg.Connection) -> list[DocumentInfo]:
            return [_info(r) for r in await conn.fetch(sql, *args) if r["name"].startswith(prefix)]

        return await self._read(query)

    async def info(self, name: str) -> DocumentInfo | None:
        async def query(conn: asyncpg.Connection) -> DocumentInfo | None:
            row = await conn.fetchrow(_INFO.format(where="WHERE name = $1"), name)
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
            version = await conn.fetchval(_ADD_VERSION, name, label, now, data, subject)
            return VersionInfo(int(version), name, label, now, len(data))

        return self._read(query)

    def delete_version(self, name: str, version: int) -> Coroutine[Any, Any, bool]:
        async def query(conn: asyncpg.Connection) -> bool:
            return bool(await conn.fetchval(_DELETE_VERSION, name, version))

        return self._read(query)

    async def version_bytes(self, subject: str | None = None) -> int:
        async def query(conn: asyncpg.Connection) -> int:
            sql = "SELECT bytes FROM tether_version_totals WHERE everyone = $1 AND subject = $2"
            total = await conn.fetchval(sql, subject is None, subject or "")
            return int(total or 0)

        return await self._read(query)

    async def list_versions(self, name: str) -> list[VersionInfo]:
        async def query(conn: asyncpg.Connection) -> list[VersionInfo]:
            rows = await conn.fetch(
                "SELECT id, name, label, created_at, LENGTH(data) AS size FROM tether_versions"
                " WHERE name = $1 ORDER BY id",
                name,
            )
            return [
                VersionInfo(r["id"], r["name"], r["label"], r["created_at"], r["size"])
                for r in rows
            ]

        return await self._read(query)

    async def load_version(self, name: str, version: int) -> bytes | None:
        async def query(conn: asyncpg.Connection) -> bytes | None:
            data = await conn.fetchval(
                "SELECT data FROM tether_versions WHERE name = $1 AND id = $2", name, version
            )
            return None if data is None else bytes(data)

        return await self._read(query)

    async def ping(self) -> bool:
        try:
            await self._read(lambda conn: conn.fetchval("SELECT 1"))
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
            log.error("PostgreSQL unreachable; writes wait, nothing is acked: %s", self.last_error)

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
        await conn.execute(_CREATE_ROWS, creatable, now)
        rows = {
            r["name"]: _Row(
                r["last_seq"], r["snapshot_seq"], r["log_entries"], r["log_bytes"], r["epoch"]
            )
            for r in await conn.fetch(_LOCK_ROWS, names)
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
                for gone in await conn.fetch(_DELETE_VERSIONS, op.name):
                    freed[gone["subject"]] = freed.get(gone["subject"], 0) + gone["bytes"]
                await conn.execute("DELETE FROM tether_updates WHERE name = $1", op.name)
                await conn.execute("DELETE FROM tether_documents WHERE name = $1", op.name)
                await conn.execute(
                    "INSERT INTO tether_tombstones (name, epoch) VALUES ($1, $2)"
                    " ON CONFLICT (name) DO UPDATE SET epoch = excluded.epoch",
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
                    _SAVE_ROW, name, row.last_seq, row.snapshot_seq, row.log_entries,
                    row.log_bytes, now,
                )  # fmt: skip
        if freed:  # once, after every delete: the totals' rows are locked in one order
            await conn.execute(_UNCOUNT_VERSIONS, list(freed), [-size for size in freed.values()])
    return results, committed


async def _run_appends(
    conn: asyncpg.Connection, ops: list[_Op], now: float
) -> tuple[list[Result], list[Committed]]:
    rows = await conn.fetch(
        "SELECT ord, seq, entries, epoch"
        " FROM tether_append($1::text[], $2::bytea[], $3::bigint[], $4)",
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
        await conn.execute(_INSERT_UPDATES, list(names), list(seqs), list(datas))


async def _recreate(conn: asyncpg.Connection, name: str, now: float) -> int:
    """A document deleted earlier in the batch, created again: its new epoch."""
    return int(
        await conn.fetchval(
            "INSERT INTO tether_documents (name, created_at, updated_at) VALUES ($1, $2, $2)"
            " RETURNING epoch",
            name,
            now,
        )
    )


async def _compact(conn: asyncpg.Connection, op: _Op, row: _Row) -> None:
    # A snapshot holding less than the stored one would drop what the stored one covers.
    upto = min(op.upto(), row.last_seq)
    if upto <= row.snapshot_seq:
        return
    await conn.execute(
        "UPDATE tether_documents SET snapshot = $2 WHERE name = $1", op.name, op.data
    )
    left = await conn.fetchrow(
        "WITH gone AS (DELETE FROM tether_updates WHERE name = $1 AND seq <= $2 RETURNING 1)"
        " SELECT COUNT(*) AS n, COALESCE(SUM(LENGTH(u.data)), 0) AS bytes"
        " FROM tether_updates AS u WHERE u.name = $1 AND u.seq > $2",
        op.name,
        upto,
    )
    row.snapshot_seq = upto
    row.log_entries = int(left["n"])
    row.log_bytes = int(left["bytes"])


async def _migrate(conn: asyncpg.Connection) -> None:
    async with conn.transaction():
        # Two nodes starting at once: one migrates, the other waits here, then sees it done.
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext('tether-schema'))")
        for statement in _SCHEMA:
            await conn.execute(statement)
        # Schema 3: counted once from the versions already stored, under the lock above, so
        # by one node only; later every version write keeps the totals in its transaction.
        if await conn.fetchval("SELECT to_regclass('tether_version_totals')") is None:
            await conn.execute(_VERSION_TOTALS)
            await conn.execute(_BACKFILL_VERSION_TOTALS)
        version = await conn.fetchval("SELECT value FROM tether_meta WHERE key = 'schema'")
        if version is not None and int(version) > SCHEMA_VERSION:
            raise StorageError(f"schema version {version} is newer than {SCHEMA_VERSION}")
        await conn.execute(
            "INSERT INTO tether_meta (key, value) VALUES ('schema', $1)"
            " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
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
    return urlunsplit(parts._replace(query=urlencode(kept))), flag in ("true", "1", "yes", "on")
