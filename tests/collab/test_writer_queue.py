"""The writer queue both stores share (collab.storage.writer_queue), without a database: the
writer takes what is queued in batches up to max_batch and stops at the marker; bytes waiting
are counted and, with a bound, a write past it is refused (the first of a backlog logged);
a failed append fences its document for what is called after it, until lifted."""

from __future__ import annotations

import asyncio
import logging
import queue

import pytest

from tether.collab.storage.store import StorageError
from tether.collab.storage.writer_queue import Fences, Op, WriterQueue

pytestmark = pytest.mark.anyio


def _op(kind: str, name: str, data: bytes = b"", order: int = 0) -> Op:
    return Op(kind, name, data, asyncio.get_running_loop().create_future(), order=order)


async def test_the_writer_takes_what_is_queued_in_batches_and_stops_at_the_marker() -> None:
    items: queue.SimpleQueue[Op | None] = queue.SimpleQueue()
    writer = WriterQueue(items, queue.Empty, max_batch=2)
    ops = [_op("append", "doc", b"x") for _ in range(3)]
    for op in ops:
        writer.put(op)
    writer.stop()
    first = items.get()
    assert first is ops[0]
    assert writer.rest([first]) == ([ops[0], ops[1]], False)  # max_batch
    assert writer.rest([items.get()]) == ([ops[2]], True)  # then the stop marker
    assert writer.queued_bytes == 3
    writer.settle(ops, [1, StorageError("lost"), 3])
    assert writer.queued_bytes == 0
    assert ops[0].future.result() == 1 and ops[2].future.result() == 3
    with pytest.raises(StorageError, match="lost"):
        ops[1].future.result()


async def test_a_write_past_the_bound_is_refused_while_others_wait(caplog) -> None:
    refused: list[str] = []
    writer = WriterQueue(
        asyncio.Queue(),
        asyncio.QueueEmpty,
        max_batch=10,
        bound=10,
        limit="store_queue_bytes",
        engine="PostgreSQL",
        on_refusal=refused.append,
    )
    assert writer.refusal("append", "doc", 100) is None  # nothing waits: even a big one goes
    big = _op("append", "doc", b"x" * 100)
    writer.put(big)
    with caplog.at_level(logging.ERROR):
        error = writer.refusal("append", "doc", 1)
        writer.refusal("append", "doc", 1)
    assert str(error) == "cannot append 'doc': 100 bytes wait for the database"
    assert refused == ["store_queue_bytes"] * 2
    assert caplog.text.count("100 bytes wait for PostgreSQL: refusing new writes") == 1
    writer.settled(big)
    assert writer.refusal("append", "doc", 1) is None


def _called(kind: str, name: str, order: int) -> Op:
    return Op(kind, name, b"", None, order=order)  # type: ignore[arg-type]  # never settled


def test_a_failed_append_fences_what_is_called_after_it_until_lifted() -> None:
    fences = Fences()
    fences.failed(_called("append", "doc", 5))
    assert "doc" in fences and fences
    assert not fences.holds(_called("append", "doc", 4))  # called before it
    assert fences.holds(_called("append", "doc", 6))
    assert fences.holds(_called("compact", "doc", 6))
    assert not fences.holds(_called("delete", "doc", 6))
    assert not fences.holds(_called("append", "other", 6))
    fences.failed(_called("compact", "other", 7))  # only an append fences
    assert "other" not in fences
    fences.lift("doc")
    assert not fences and not fences.holds(_called("append", "doc", 8))
