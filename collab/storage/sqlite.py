"""SQLite storage (WAL, one writer thread, group commit); knows no Yjs, sockets or servers.

The only asyncio it touches is the futures it resolves. Writes go through one queue to one
writer thread (``collab.storage.writer_queue``, shared with PostgreSQL), which runs everything
queued in ONE transaction, commits (fsync with synchronous=FULL), and only then resolves the
writes' futures: so an awaited append is durable, and writes arriving during a commit share the
next one's fsync. Reads run in worker threads on a separate read connection; WAL lets them
proceed while the writer commits.

A document's ``updated_at`` is written at most once a second (``_TOUCH_EVERY_S``): a batch of
appends in between is one INSERT of many rows in its own transaction (a page less to write and
sync, one statement instead of four), and its time waits in memory (reads report it) until the
next touch or the store's close.

A failed append fences its document: every append or compaction of it that runs after
the failure (queued behind it, or called later) fails too, until ``resume``. Editors had the lost
update fanned out before the disk took it and may build on it; stored without it, what they
build could never be integrated by anyone loading the document. The room rebuilds the
document from here, calls ``resume`` first, and asks its editors to resend.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Self, TypeVar

from ..runtime.thread_names import name_os_thread
from .commit_window import CommitWindow
from .store import DocumentInfo, Lifecycle, StorageError, Store, VersionInfo, names_from
from .writer_queue import Fences, Op, WriterQueue, failed, not_open, wait

T = TypeVar("T")

log = logging.getLogger(__name__)

SCHEMA_VERSION = 4
_SYNC_MODES = frozenset({"OFF", "NORMAL", "FULL", "EXTRA"})
_BUSY_TIMEOUT_S = 5.0

_UPDATES_TABLE = """CREATE TABLE IF NOT EXISTS updates (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL,
        data BLOB NOT NULL
    )"""

_SCHEMA = (
    # The snapshot lives in its own table: SQLite rewrites a whole row on UPDATE, overflow
    # pages included, so touching updated_at on a row that held a 10 MB snapshot copied 10 MB
    # per append (cost per edit grew with the document: issue 14).
    """CREATE TABLE IF NOT EXISTS documents (
        name TEXT PRIMARY KEY,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS snapshots (
        name TEXT PRIMARY KEY,
        data BLOB NOT NULL
    )""",
    # No AUTOINCREMENT (schema 3): it rewrote sqlite_sequence's page in every commit, a third
    # page written and synced per keystroke. A plain rowid is max + 1, so a document's rows
    # still sort in append order; an id is reused only once no row holds it.
    _UPDATES_TABLE,
    "CREATE INDEX IF NOT EXISTS updates_by_name ON updates (name)",
    # Named versions (issue 12): created with IF NOT EXISTS on every open, so no schema bump.
    """CREATE TABLE IF NOT EXISTS versions (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        name TEXT NOT NULL,
        label TEXT NOT NULL,
        created_at REAL NOT NULL,
        data BLOB NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS versions_by_name ON versions (name)",
    # (versions.subject, schema 4, is added by _migrate: who made each, for its byte quota)
)

# A document's row (its updated_at) is rewritten at most this often. Rewriting it on every
# append made a lone append's commit write three pages instead of two, and run four statements
# (BEGIN, touch, INSERT, COMMIT) instead of one.
_TOUCH_EVERY_S = 1.0

# Appends of one batch go in one INSERT of many rows: one statement (one step, one release and
# retake of the GIL) per batch, not one per update. Rows per statement stay under SQLite's oldest
# limit of 999 parameters.
_ROWS_PER_INSERT = 400
_TOUCH = """INSERT INTO documents (name, created_at, updated_at) VALUES (?, ?, ?)
    ON CONFLICT (name) DO UPDATE SET updated_at = excluded.updated_at"""
_SET_SNAPSHOT = """INSERT INTO snapshots (name, data) VALUES (?, ?)
    ON CONFLICT (name) DO UPDATE SET data = excluded.data"""
_INFO = """SELECT d.name, d.created_at, d.updated_at, COUNT(u.id),
        COALESCE((SELECT LENGTH(s.data) FROM snapshots AS s WHERE s.name = d.name), 0)
        + COALESCE(SUM(LENGTH(u.data)), 0)
    FROM documents AS d LEFT JOIN updates AS u ON u.name = d.name
    {where} GROUP BY d.name ORDER BY d.name"""
# A page of documents first (the primary key's range, then LIMIT), and only then their logs'
# counts and sizes: listing no longer sums every update row of the store (issue 26, item 9).
_PAGE = """SELECT d.name, d.created_at, d.updated_at, COUNT(u.id),
        COALESCE((SELECT LENGTH(s.data) FROM snapshots AS s WHERE s.name = d.name), 0)
        + COALESCE(SUM(LENGTH(u.data)), 0)
    FROM (SELECT name, created_at, updated_at FROM documents
          WHERE name > ? AND name >= ? {upper} ORDER BY name LIMIT ?) AS d
    LEFT JOIN updates AS u ON u.name = d.name
    GROUP BY d.name ORDER BY d.name"""

OpKind = Literal["append", "compact", "delete", "version", "delete_version", "resume"]


@dataclass(eq=False, slots=True)
class _Op(Op):
    label: str = ""  # a version's
    subject: str = ""  # who made the version
    version: int = 0  # the version a delete_version forgets
    queued_at: float = 0.0  # time.monotonic() when it was queued


class SQLiteStore(Store):
    """A durable Store in one SQLite file; ``commits`` counts the write transactions so far."""

    backend = "sqlite"

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: str = "FULL",
        max_batch: int = 1000,
        commit_window: float = 0.0,
    ) -> None:
        if synchronous.upper() not in _SYNC_MODES:
            raise ValueError(f"synchronous must be one of {sorted(_SYNC_MODES)}")
        self.path = Path(path)
        self.commits = 0
        self._synchronous = synchronous.upper()
        # The longest a commit waits after its first write for more to share its sync (0:
        # never); it waits only when others write meanwhile (``commit_window``'s docstring).
        self.window = CommitWindow(max(0.0, commit_window))
        self._state: Lifecycle = "new"
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiting: queue.SimpleQueue[_Op | None] = queue.SimpleQueue()  # None = stop
        self._queue = WriterQueue(self._waiting, queue.Empty, max_batch=max_batch)
        self._ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._stopped: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._exited = False  # the writer thread is gone (a bool: read on every append)
        # Document → the latest append time not yet written to its row (the writer sets it,
        # reads merge it in: ``updated_at`` stays exact between touches).
        self._pending_touches: dict[str, float] = {}
        # Daemon: a store left unclosed must not hang interpreter exit, and dying mid-commit is
        # safe because nothing was acknowledged for an uncommitted transaction.
        self._thread = threading.Thread(target=self._writer_main, name="tether-sqlite", daemon=True)
        # Two read connections: loads and infos on one, listings and versions (which may
        # take longer) on the other, so a listing never makes a document's load wait.
        self._reader: sqlite3.Connection | None = None
        self._read_lock = threading.Lock()
        self._lister: sqlite3.Connection | None = None
        self._list_lock = threading.Lock()
        # A thread per read connection, not the loop's default executor: a flood of other
        # work there (imports, renders) made a document's load wait behind it (issue 37).
        self._read_thread = _one_thread("tether-read")
        self._list_thread = _one_thread("tether-list")
        # Version bytes per token subject, read once and then kept by the calls that change
        # them: two sums over every version per version request made 15,000 requests take
        # 451 s. ``_versions_changed`` counts changes, so a read that raced one is not kept.
        self._version_sizes: dict[str, int] | None = None
        self._versions_changed = 0

    # -- lifecycle (event-loop side) ---------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._state != "new":
            raise StorageError("a store can be opened only once")
        self._loop = asyncio.get_running_loop()
        self._thread.start()
        try:
            await asyncio.wrap_future(self._ready)
            self._reader = await asyncio.wrap_future(
                self._read_thread.submit(_open_reader, self.path)
            )
            self._lister = await asyncio.wrap_future(
                self._list_thread.submit(_open_reader, self.path)
            )
        except BaseException as exc:
            self._queue.stop()  # the writer (if it started) exits on its own
            if isinstance(exc, sqlite3.Error | OSError):
                raise StorageError(f"cannot open {self.path}: {exc}") from exc
            raise
        self._state = "open"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._state != "open":
            return
        self._state = "closed"  # refuse new writes first, so the stop marker is the last item
        self._queue.stop()
        await asyncio.wrap_future(self._stopped)
        await asyncio.wrap_future(self._read_thread.submit(self._close_reader))
        self._read_thread.shutdown(wait=False)
        self._list_thread.shutdown(wait=False)

    def _close_reader(self) -> None:
        with self._read_lock:  # waits for an in-flight read
            if self._reader is not None:
                self._reader.close()
                self._reader = None
        with self._list_lock:
            if self._lister is not None:
                self._lister.close()
                self._lister = None

    # -- writes (event-loop side) ------------------------------------------------------------

    def append(self, name: str, update: bytes) -> Coroutine[Any, Any, int]:
        return self._enqueue("append", name, bytes(update))

    def append_future(self, name: str, update: bytes) -> asyncio.Future[int]:
        if self._state != "open" or self._loop is None or self._exited:
            return super().append_future(name, update)  # fails with the usual StorageError
        future: asyncio.Future[int] = self._loop.create_future()
        self._put(_Op("append", name, bytes(update), future))
        return future

    def compact(self, name: str, snapshot: bytes) -> Coroutine[Any, Any, None]:
        return self._enqueue("compact", name, bytes(snapshot))

    async def delete(self, name: str) -> None:
        try:
            await self._enqueue("delete", name, b"")
        finally:
            self._version_sizes = None  # its versions went with it: read the sums again
            self._versions_changed += 1

    async def add_version(
        self, name: str, label: str, state: bytes, subject: str = ""
    ) -> VersionInfo:
        if not (_encodable(label) and _encodable(subject)):  # refused before the batch
            raise StorageError("a version label must be valid Unicode text")
        try:
            info = await self._enqueue("version", name, bytes(state), label, subject)
        except BaseException:
            self._version_sizes = None  # stored or not: read the sums again
            self._versions_changed += 1
            raise
        self._versions_changed += 1
        if self._version_sizes is not None:
            sizes = self._version_sizes
            sizes[subject] = sizes.get(subject, 0) + len(state)
        return info

    async def delete_version(self, name: str, version: int) -> bool:
        if self._state != "open" or self._loop is None or self._stopped.done():
            raise StorageError(f"cannot delete a version of {name!r}: the store is not open")
        future: asyncio.Future[bool] = self._loop.create_future()
        self._put(_Op("delete_version", name, b"", future, version=version))
        try:
            return await wait(future)
        finally:
            self._version_sizes = None  # its bytes left a subject's sum: read the sums again
            self._versions_changed += 1

    async def version_bytes(self, subject: str | None = None) -> int:
        sizes = self._version_sizes
        if sizes is None:
            changed = self._versions_changed
            sizes = await self._read(_version_sizes, slow=True)
            if changed == self._versions_changed:
                self._version_sizes = sizes
        return sum(sizes.values()) if subject is None else sizes.get(subject, 0)

    def resume(self, name: str) -> None:
        # Through the queue, so it lifts the fence for what is called after it, in order.
        if self._state == "open" and self._loop is not None and not self._stopped.done():
            self._put(_Op("resume", name, b"", self._loop.create_future()))

    def _enqueue(
        self, kind: OpKind, name: str, data: bytes, label: str = "", subject: str = ""
    ) -> Coroutine[Any, Any, Any]:
        if self._state != "open" or self._loop is None:
            return failed(not_open(kind, name, self._state))
        if self._stopped.done():
            return failed(StorageError(f"cannot {kind} {name!r}: the writer thread has exited"))
        future = self._loop.create_future()
        self._put(_Op(kind, name, data, future, label=label, subject=subject))
        return wait(future)

    def _put(self, op: _Op) -> None:
        op.order = self._queue.number()
        op.queued_at = now = time.monotonic()
        self.window.queued(now)  # settled in _settled, on this loop too
        self._queue.put(op)

    # -- reads (worker threads, one read connection) -----------------------------------------

    async def load(self, name: str) -> list[bytes]:
        return await self._read(_load, name)

    async def list_documents(
        self, *, prefix: str = "", after: str = "", limit: int | None = None
    ) -> list[DocumentInfo]:
        page = await self._read(_list_documents, prefix, after, limit, slow=True)
        return [self._touched(info) for info in page]

    async def info(self, name: str) -> DocumentInfo | None:
        info = await self._read(_info, name)
        return None if info is None else self._touched(info)

    def _touched(self, info: DocumentInfo) -> DocumentInfo:
        """``info`` with an append not yet written to its row."""
        pending = self._pending_touches.get(info.name)
        if pending is None or pending <= info.updated_at:
            return info
        return dataclasses.replace(info, updated_at=pending)

    async def list_versions(self, name: str) -> list[VersionInfo]:
        return await self._read(_list_versions, name, slow=True)

    async def load_version(self, name: str, version: int) -> bytes | None:
        return await self._read(_load_version, name, version)

    async def _read(self, query: Callable[..., T], *args: Any, slow: bool = False) -> T:
        if self._state != "open":
            raise StorageError(f"cannot read: the store is {self._state}")
        thread = self._list_thread if slow else self._read_thread
        return await asyncio.wrap_future(thread.submit(self._read_locked, query, args, slow))

    def _read_locked(self, query: Callable[..., T], args: tuple[Any, ...], slow: bool) -> T:
        lock = self._list_lock if slow else self._read_lock
        with lock:  # one thread at a time on each read connection
            conn = self._lister if slow else self._reader
            if conn is None:
                raise StorageError("cannot read: the store is closed")
            try:
                return query(conn, *args)
            except sqlite3.Error as exc:
                raise StorageError(f"read failed: {exc}") from exc

    # -- the writer thread -------------------------------------------------------------------

    def _writer_main(self) -> None:
        name_os_thread("tether-sqlite")
        try:
            conn = _open_writer(self.path, self._synchronous)
        except BaseException as exc:
            self._ready.set_exception(exc)
            self._exited = True
            self._stopped.set_result(None)
            return
        self._ready.set_result(None)
        try:
            writer = _Writer(conn, self._pending_touches)
            self._serve(writer)
            writer.write_pending_touches()
        finally:
            conn.close()
            self._exited = True
            self._stopped.set_result(None)

    def _serve(self, writer: _Writer) -> None:
        stop = False
        fenced = Fences()  # documents with a failed append, until resumed (this thread's)
        while not stop:
            ops, stop = self._take()
            if ops:
                self._commit(writer, ops, fenced)

    def _take(self) -> tuple[list[_Op], bool]:
        """Block for one op, then take whatever else is queued, up to max_batch; when the
        commit window says so, what else comes within it too (one sync for all of them). The
        window is slept through, not waited on: a put during it wakes nobody, so a batch costs
        one wake-up of this thread and one of the event loop, however many ops it holds."""
        first = self._waiting.get()
        if first is None:
            return [], True
        pause = self.window.wait_before_commit()
        if pause > 0:
            # The window counts from when the first op was queued: an op that waited behind a
            # slow commit (a checkpoint) has had company time already, and its ack would add
            # both waits up.
            left = first.queued_at + pause - time.monotonic()
            if left > 0:
                time.sleep(left)
        return self._queue.rest([first])

    def _commit(self, writer: _Writer, ops: list[_Op], fenced: Fences) -> None:
        if not fenced and all(op.kind != "resume" for op in ops):
            # The usual batch: everything in it runs.
            self._settle_soon(ops, self._outcomes(writer, ops, fenced))
            return
        outcome_of: dict[int, object] = {}  # by position in ops: what never reaches the batch
        runnable: list[_Op] = []
        for position, op in enumerate(ops):
            if op.kind == "resume":
                fenced.lift(op.name)
                outcome_of[position] = None
            elif fenced.holds(op):
                outcome_of[position] = _fenced_error(op)
            else:
                runnable.append(op)
                if op.kind == "delete":
                    fenced.lift(op.name)  # a re-created document starts afresh
        outcomes = self._outcomes(writer, runnable, fenced) if runnable else []
        ran = iter(outcomes)
        settled = [outcome_of[k] if k in outcome_of else next(ran) for k in range(len(ops))]
        self._settle_soon(ops, settled)

    def _outcomes(self, writer: _Writer, ops: list[_Op], fenced: Fences) -> list[object]:
        """Run ``ops`` in one transaction: their results. If it fails, each op runs again in a
        transaction of its own, so only what fails fails (and a failed append fences its
        document): one editor's bad write must not cost other documents their edits."""
        try:
            outcomes = list(writer.run_batch(ops))
        except Exception as exc:  # the writer must outlive a failed transaction
            if len(ops) > 1:
                return self._one_by_one(writer, ops, fenced)
            fenced.failed(ops[0])
            return [_storage_error(ops[0], exc)]
        self.commits += 1
        return outcomes

    def _one_by_one(self, writer: _Writer, ops: list[_Op], fenced: Fences) -> list[object]:
        outcomes: list[object] = []
        for op in ops:
            if fenced.holds(op):
                outcomes.append(_fenced_error(op))  # an earlier op of the batch failed
                continue
            if op.kind == "delete":
                fenced.lift(op.name)  # a re-created document starts afresh
            outcomes += self._outcomes(writer, [op], fenced)
        return outcomes

    def _settle_soon(self, ops: list[_Op], outcomes: list[object]) -> None:
        loop = self._loop
        assert loop is not None  # set before the thread starts
        try:
            loop.call_soon_threadsafe(self._settled, ops, outcomes)
        except RuntimeError:
            pass  # the loop is closed: nobody is left waiting for these results

    def _settled(self, ops: list[_Op], outcomes: list[object]) -> None:
        """On the event loop: a batch's results to its futures."""
        self.window.settled(len(ops), time.monotonic())
        self._queue.settle(ops, outcomes)


class _Writer:
    """Lives on the writer thread: owns the write connection and a cache of log lengths."""

    def __init__(self, conn: sqlite3.Connection, pending_touches: dict[str, float]) -> None:
        self._conn = conn
        # Counting the log on every append would cost O(log length); the writer is the only
        # writer, so a cache stays exact as long as it is dropped when a transaction rolls back.
        self._log_lengths: dict[str, int] = {}
        # Document → when this writer last wrote its row (dropped with a rollback, like the
        # lengths); and the append times not written yet (shared with readers).
        self._touched_at: dict[str, float] = {}
        self._pending_touches = pending_touches

    def run_batch(self, ops: list[_Op]) -> list[object]:
        now = time.time()
        if (
            len(ops) <= _ROWS_PER_INSERT
            and all(op.kind == "append" for op in ops)
            and not any(self._touch_due(op.name, now) for op in ops)
        ):
            # The usual batch (a few keystrokes): one INSERT, its own transaction (SQLite's
            # autocommit commits it, synced like any other), no BEGIN and COMMIT statements.
            return list(self._append_alone(ops, now))
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            results: list[object] = []
            start = 0
            while start < len(ops):
                # A run of appends (the common batch) takes one executemany and one touch per
                # document; any other op runs alone, in order, between runs.
                end = start
                while end < len(ops) and ops[end].kind == "append":
                    end += 1
                if end > start:
                    results.extend(self._append_many(ops[start:end], now))
                    start = end
                else:
                    results.append(self._run(ops[start], now))
                    start += 1
            self._conn.execute("COMMIT")
        except BaseException:
            self._log_lengths.clear()
            self._touched_at.clear()
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            raise
        return results

    def _run(self, op: _Op, now: float) -> object:
        if op.kind == "append":
            return self._append_many([op], now)[0]
        if op.kind == "version":
            return self._add_version(op, now)
        if op.kind == "delete_version":
            sql = "DELETE FROM versions WHERE name = ? AND id = ?"
            return self._conn.execute(sql, (op.name, op.version)).rowcount > 0
        if op.kind == "compact":
            self._compact(op.name, op.data, now)
        else:
            self._delete(op.name)
        return None

    def _append_alone(self, ops: list[_Op], now: float) -> list[int]:
        """Appends none of whose rows is due a touch, as one statement (a transaction of its
        own when no BEGIN ran)."""
        lengths, counted = self._lengths_after(ops)
        self._conn.execute(_insert_rows(len(ops)), [v for op in ops for v in (op.name, op.data)])
        self._log_lengths.update(counted)
        for name in counted:
            self._pending_touches[name] = now
        return lengths

    def _lengths_after(self, ops: list[_Op]) -> tuple[list[int], dict[str, int]]:
        """Each append's log length after it, and each document's after them all."""
        lengths: list[int] = []
        counted: dict[str, int] = {}
        for op in ops:
            length = counted.get(op.name)
            if length is None:
                length = self._log_length(op.name)
            counted[op.name] = length + 1
            lengths.append(length + 1)
        return lengths, counted

    def _touch_due(self, name: str, now: float) -> bool:
        last = self._touched_at.get(name)
        return last is None or now - last >= _TOUCH_EVERY_S

    def _touch(self, name: str, now: float) -> None:
        """Write ``updated_at`` (and the row itself, for a new document) if it is due."""
        if self._touch_due(name, now):
            self._conn.execute(_TOUCH, (name, now, now))
            self._touched_at[name] = now
            self._pending_touches.pop(name, None)
        else:
            self._pending_touches[name] = now

    def write_pending_touches(self) -> None:
        """At close: the append times still in memory, to their rows."""
        pending = dict(self._pending_touches)
        if not pending:
            return
        try:
            self._conn.execute("BEGIN IMMEDIATE")
            self._conn.executemany(
                "UPDATE documents SET updated_at = MAX(updated_at, ?) WHERE name = ?",
                [(at, name) for name, at in pending.items()],
            )
            self._conn.execute("COMMIT")
        except sqlite3.Error:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
            log.warning("could not write documents' last update times at close", exc_info=True)

    def _append_many(self, ops: list[_Op], now: float) -> list[int]:
        """Appends in order, inside the batch's transaction; each one's result is its
        document's log length after it. Rows due a touch are touched."""
        lengths, counted = self._lengths_after(ops)
        for name in counted:
            self._touch(name, now)
        for start in range(0, len(ops), _ROWS_PER_INSERT):
            chunk = ops[start : start + _ROWS_PER_INSERT]
            rows = [v for op in chunk for v in (op.name, op.data)]
            self._conn.execute(_insert_rows(len(chunk)), rows)
        self._log_lengths.update(counted)
        return lengths

    def _compact(self, name: str, snapshot: bytes, now: float) -> None:
        # Ops run in call order, so every log row present now was appended before compact().
        self._conn.execute(_TOUCH, (name, now, now))
        self._touched_at[name] = now
        self._pending_touches.pop(name, None)
        self._conn.execute(_SET_SNAPSHOT, (name, snapshot))
        self._conn.execute("DELETE FROM updates WHERE name = ?", (name,))
        self._log_lengths[name] = 0

    def _delete(self, name: str) -> None:
        self._conn.execute("DELETE FROM updates WHERE name = ?", (name,))
        self._conn.execute("DELETE FROM snapshots WHERE name = ?", (name,))
        self._conn.execute("DELETE FROM documents WHERE name = ?", (name,))
        self._conn.execute("DELETE FROM versions WHERE name = ?", (name,))
        self._log_lengths.pop(name, None)
        self._touched_at.pop(name, None)
        self._pending_touches.pop(name, None)

    def _add_version(self, op: _Op, now: float) -> VersionInfo:
        sql = "INSERT INTO versions (name, label, created_at, data, subject) VALUES (?, ?, ?, ?, ?)"
        cursor = self._conn.execute(sql, (op.name, op.label, now, op.data, op.subject))
        return VersionInfo(int(cursor.lastrowid or 0), op.name, op.label, now, len(op.data))

    def _log_length(self, name: str) -> int:
        cached = self._log_lengths.get(name)
        if cached is not None:
            return cached
        sql = "SELECT COUNT(*) FROM updates WHERE name = ?"
        return int(self._conn.execute(sql, (name,)).fetchone()[0])


# -- helpers ---------------------------------------------------------------------------------


def _insert_rows(count: int) -> str:
    sql = _INSERT_SQL.get(count)
    if sql is None:
        sql = _INSERT_SQL[count] = "INSERT INTO updates (name, data) VALUES " + ", ".join(
            ["(?, ?)"] * count
        )
    return sql


_INSERT_SQL: dict[int, str] = {}  # at most _ROWS_PER_INSERT entries


def _encodable(text: str) -> bool:
    """SQLite stores text as UTF-8: a lone surrogate (valid in JSON) cannot be bound."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _one_thread(name: str) -> concurrent.futures.ThreadPoolExecutor:
    return concurrent.futures.ThreadPoolExecutor(
        1, thread_name_prefix=name, initializer=name_os_thread, initargs=(name,)
    )


def _storage_error(op: _Op, exc: Exception) -> StorageError:
    # One instance per future: a shared exception would collect every awaiter's traceback.
    error = StorageError(f"{op.kind} {op.name!r} failed: {exc}")
    error.__cause__ = exc
    return error


def _fenced_error(op: _Op) -> StorageError:
    return StorageError(
        f"cannot {op.kind} {op.name!r}: an earlier update of it failed to store; the document"
        " is rebuilt from storage before anything more of it is stored"
    )


def _connect(path: Path, *, check_same_thread: bool = True) -> sqlite3.Connection:
    # isolation_level=None: we issue BEGIN/COMMIT ourselves, one transaction per batch.
    return sqlite3.connect(
        path,
        timeout=_BUSY_TIMEOUT_S,
        isolation_level=None,
        check_same_thread=check_same_thread,
    )


def _open_writer(path: Path, synchronous: str) -> sqlite3.Connection:
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = _connect(path)
    try:
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise StorageError(f"{path}: WAL mode unavailable (journal_mode={mode})")
        conn.execute(f"PRAGMA synchronous={synchronous}")  # validated against _SYNC_MODES
        _migrate(conn, path)
    except BaseException:
        conn.close()
        raise
    return conn


def _migrate(conn: sqlite3.Connection, path: Path) -> None:
    conn.execute("BEGIN IMMEDIATE")  # another process may be migrating the same file
    try:
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        if version > SCHEMA_VERSION:
            raise StorageError(f"{path}: schema version {version} is newer than {SCHEMA_VERSION}")
        for statement in _SCHEMA:
            conn.execute(statement)
        if version < 2:
            _move_snapshots_out_of_documents(conn)
        if version < 3:
            _drop_autoincrement(conn)
        if version < 4:
            _add_version_subjects(conn)
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _add_version_subjects(conn: sqlite3.Connection) -> None:
    """Schema 4: each version records the token subject that made it (quota per subject)."""
    columns = {row[1] for row in conn.execute("PRAGMA table_info(versions)")}
    if "subject" not in columns:
        conn.execute("ALTER TABLE versions ADD COLUMN subject TEXT NOT NULL DEFAULT ''")
    conn.execute("CREATE INDEX IF NOT EXISTS versions_by_subject ON versions (subject)")


def _move_snapshots_out_of_documents(conn: sqlite3.Connection) -> None:
    """Schema 1 kept each snapshot in its documents row; move them to ``snapshots``."""
    columns = {row[1] for row in conn.execute("PRAGMA table_info(documents)")}
    if "snapshot" not in columns:
        return
    conn.execute(
        "INSERT OR REPLACE INTO snapshots (name, data)"
        " SELECT name, snapshot FROM documents WHERE snapshot IS NOT NULL"
    )
    conn.execute("UPDATE documents SET snapshot = NULL WHERE snapshot IS NOT NULL")


def _drop_autoincrement(conn: sqlite3.Connection) -> None:
    """Schemas 1 and 2 made ``updates.id`` AUTOINCREMENT; rebuild the table without it, ids
    (and so each document's order) kept."""
    row = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'updates'").fetchone()
    if row is None or "AUTOINCREMENT" not in str(row[0]).upper():
        return
    conn.execute("ALTER TABLE updates RENAME TO updates_before_3")
    conn.execute(_UPDATES_TABLE)
    conn.execute("INSERT INTO updates (id, name, data) SELECT id, name, data FROM updates_before_3")
    conn.execute("DROP TABLE updates_before_3")  # its index and its sqlite_sequence row too
    conn.execute("CREATE INDEX IF NOT EXISTS updates_by_name ON updates (name)")


def _open_reader(path: Path) -> sqlite3.Connection:
    # Used from whichever worker thread runs a read, never two at once (see _read_lock).
    conn = _connect(path, check_same_thread=False)
    conn.execute("PRAGMA query_only=1")
    return conn


@contextmanager
def _snapshot_read(conn: sqlite3.Connection) -> Iterator[None]:
    # One read transaction, so a compact committing between two SELECTs cannot be half-seen.
    conn.execute("BEGIN")
    try:
        yield
    finally:
        conn.execute("COMMIT")


def _load(conn: sqlite3.Connection, name: str) -> list[bytes]:
    with _snapshot_read(conn):
        row = conn.execute("SELECT data FROM snapshots WHERE name = ?", (name,)).fetchone()
        sql = "SELECT data FROM updates WHERE name = ? ORDER BY id"
        log = [data for (data,) in conn.execute(sql, (name,))]
    head = [] if row is None or row[0] is None else [row[0]]
    return head + log


def _info(conn: sqlite3.Connection, name: str) -> DocumentInfo | None:
    row = conn.execute(_INFO.format(where="WHERE d.name = ?"), (name,)).fetchone()
    return None if row is None else DocumentInfo(*row)


def _version_sizes(conn: sqlite3.Connection) -> dict[str, int]:
    sql = "SELECT subject, SUM(LENGTH(data)) FROM versions GROUP BY subject"
    return {subject: int(size) for subject, size in conn.execute(sql)}


def _list_versions(conn: sqlite3.Connection, name: str) -> list[VersionInfo]:
    sql = """SELECT id, name, label, created_at, LENGTH(data) FROM versions
        WHERE name = ? ORDER BY id"""
    return [VersionInfo(*row) for row in conn.execute(sql, (name,))]


def _load_version(conn: sqlite3.Connection, name: str, version: int) -> bytes | None:
    sql = "SELECT data FROM versions WHERE name = ? AND id = ?"
    row = conn.execute(sql, (name, version)).fetchone()
    return None if row is None else bytes(row[0])


def _list_documents(
    conn: sqlite3.Connection, prefix: str, after: str, limit: int | None
) -> list[DocumentInfo]:
    low, high = names_from(prefix)
    count = -1 if limit is None else limit  # SQLite's LIMIT -1: no limit
    if high is None:
        rows = conn.execute(_PAGE.format(upper=""), (after, low, count))
    else:
        rows = conn.execute(_PAGE.format(upper="AND name < ?"), (after, low, high, count))
    return [DocumentInfo(*row) for row in rows if row[0].startswith(prefix)]
