"""Model time is served in turn by share (issue 37, item 3): subjects, then documents, not by
arrival; a subject that just had a turn waits behind one that has not. Proved on the queue
itself, on the scheduler with a scripted provider, and on the real model worker's serve loop
(its own channel codec over a socket pair) with a scripted model in place of llama.cpp.

Every wait is on an event or a frame, bounded by ``fail_after``; nothing sleeps.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tether.ai.model.fair import SHARE, FairGate, FairQueue, share_of
from tether.ai.model.providers.base import Cancellation, GenerationRequest, Piece
from tether.ai.model.providers.scripted import ScriptedProvider
from tether.ai.model.worker.faults import Faults
from tether.ai.model.worker.serve import WorkerConfig, WorkerServer
from tether.ai.suggest.scheduler import PREFETCH, Scheduler
from tether.protocol.wire.worker_frames import (
    CANCEL,
    DONE,
    GENERATE,
    READY,
    FrameReader,
    encode_frame,
)

pytestmark = pytest.mark.anyio


# ---- the queue -------------------------------------------------------------------------------


def test_subjects_take_turns_and_one_just_served_goes_behind_a_newcomer() -> None:
    queue: FairQueue[str] = FairQueue()
    queue.push("hog", "big", "hog-0")
    assert queue.pop() == "hog-0"  # running now: the hog's turn is spent
    for i in range(1, 4):
        queue.push("hog", "big", f"hog-{i}")
    queue.push("victim", "small", "victim-0")  # arrives last, served first
    assert [queue.pop() for _ in range(4)] == ["victim-0", "hog-1", "hog-2", "hog-3"]
    assert len(queue) == 0


def test_within_a_subject_its_documents_take_turns() -> None:
    queue: FairQueue[str] = FairQueue()
    for i in range(3):
        queue.push("s", "a", f"a{i}")
    queue.push("s", "b", "b0")
    queue.push("t", "c", "c0")
    assert [queue.pop() for _ in range(5)] == ["a0", "c0", "b0", "a1", "a2"]


def test_a_discarded_item_costs_its_subject_no_turn() -> None:
    queue: FairQueue[str] = FairQueue()
    queue.push("s", "a", "s0")
    queue.push("s", "a", "s1")
    queue.push("t", "b", "t0")
    assert queue.discard("s", "a", "s1")
    assert not queue.discard("s", "a", "s1")
    queue.push("s", "a", "s2")  # takes the place s1 left, not a later one
    assert [queue.pop() for _ in range(3)] == ["s0", "t0", "s2"]
    with pytest.raises(IndexError):
        queue.pop()


def test_the_share_is_the_subject_set_around_the_job_or_the_document() -> None:
    request = GenerationRequest("p", "team/doc\x0012\x000", 4)
    assert share_of(request) == ("doc:team/doc", "team/doc")
    token = SHARE.set("sub:alice")
    try:
        assert share_of(request) == ("sub:alice", "team/doc")
    finally:
        SHARE.reset(token)


# ---- the gate --------------------------------------------------------------------------------


async def test_the_gate_admits_waiters_in_turn_and_interactive_before_background() -> None:
    gate = FairGate(1)
    order: list[str] = []
    release = asyncio.Event()

    async def hold(label: str, subject: str, background: bool = False) -> None:
        async with gate.turn(subject, "doc", background=background):
            order.append(label)
            if label == "first":
                await release.wait()

    with anyio.fail_after(5):
        first = asyncio.ensure_future(hold("first", "hog"))
        await asyncio.sleep(0)  # first holds the gate
        assert gate.holding == 1
        tasks = [asyncio.ensure_future(hold(f"hog-{i}", "hog")) for i in range(3)]
        tasks.append(asyncio.ensure_future(hold("prefetch", "victim", background=True)))
        tasks.append(asyncio.ensure_future(hold("victim", "victim")))
        while gate.waiting < 5:
            await asyncio.sleep(0)
        release.set()
        await asyncio.gather(first, *tasks)
    assert order == ["first", "victim", "hog-0", "hog-1", "hog-2", "prefetch"]
    assert gate.holding == 0 and gate.waiting == 0


async def test_a_waiter_that_gives_up_leaves_no_turn_held() -> None:
    gate = FairGate(1)
    release = asyncio.Event()

    async def hold() -> None:
        async with gate.turn("a", "doc"):
            await release.wait()

    with anyio.fail_after(5):
        holder = asyncio.ensure_future(hold())
        await asyncio.sleep(0)
        waiter = asyncio.ensure_future(hold())
        while gate.waiting < 1:
            await asyncio.sleep(0)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        release.set()
        await holder
        assert gate.holding == 0 and gate.waiting == 0
        async with gate.turn("b", "doc"):  # free again
            assert gate.holding == 1


# ---- the scheduler, with a scripted provider -------------------------------------------------


class RecordingProvider(ScriptedProvider):
    """Records whose share each generation ran as, in order; the first waits for ``release``."""

    def __init__(self) -> None:
        super().__init__([" one"])
        self.shares: list[str] = []
        self.release = asyncio.Event()
        self.started = asyncio.Event()

    async def stream(self, request: GenerationRequest, cancel: Cancellation) -> AsyncIterator[str]:
        self.shares.append(f"{SHARE.get()}@{share_of(request)[1]}")
        if len(self.shares) == 1:
            self.started.set()
            await self.release.wait()
        yield Piece(" one")


async def test_the_scheduler_serves_subjects_in_turn_whatever_their_connections() -> None:
    provider = RecordingProvider()

    def job(document: str) -> Any:
        async def run() -> str:
            request = GenerationRequest("p", f"{document}\x001\x000", 4)
            return "".join([p async for p in provider.stream(request, Cancellation())])

        return run

    with anyio.fail_after(5):
        async with Scheduler(max_queue=16, per_owner=2, per_subject=8) as scheduler:
            futures = [scheduler.submit(job("big"), owner="conn-0", subject="sub:hog")]
            await provider.started.wait()
            # The hog asks again on four more connections; then the victim asks, last.
            for i in range(1, 5):
                futures.append(
                    scheduler.submit(job(f"big{i}"), owner=f"conn-{i}", subject="sub:hog")
                )
            futures.append(scheduler.submit(job("small"), owner="victim", subject="sub:victim"))
            futures.append(
                scheduler.submit(job("ahead"), PREFETCH, owner="victim", subject="sub:victim")
            )
            provider.release.set()
            await asyncio.gather(*futures)
    assert provider.shares[:2] == ["sub:hog@big", "sub:victim@small"]
    assert provider.shares[2:6] == [f"sub:hog@big{i}" for i in range(1, 5)]
    assert provider.shares[6] == "sub:victim@ahead"  # prefetch after every request


async def test_without_a_subject_each_connection_is_its_own_share() -> None:
    provider = RecordingProvider()

    def job() -> Any:
        async def run() -> None:
            request = GenerationRequest("p", "doc\x001\x000", 4)
            async for _ in provider.stream(request, Cancellation()):
                pass

        return run

    with anyio.fail_after(5):
        async with Scheduler(max_queue=8) as scheduler:
            first = scheduler.submit(job(), owner="a")
            await provider.started.wait()
            second = scheduler.submit(job(), owner="b")
            provider.release.set()
            await asyncio.gather(first, second)
    assert provider.shares[0] != provider.shares[1]
    assert all(share.startswith("connection:") for share in provider.shares)


# ---- the model worker's serve loop -----------------------------------------------------------


class ScriptedModel(ScriptedProvider):
    """The worker's model, scripted: the first generation holds until ``release``; each records
    its session when it starts. One at a time, as the worker's model thread is."""

    loaded_path = Path("scripted.Q4_0.gguf")
    threads = 1

    def __init__(self) -> None:
        super().__init__([" a", " b"])
        self.started: list[str] = []
        self.first = asyncio.Event()  # the first generation holds the model
        self.release = asyncio.Event()
        self.running = 0
        self.most_at_once = 0

    async def stream(self, request: GenerationRequest, cancel: Cancellation) -> AsyncIterator[str]:
        if request.session.startswith("\0selftest"):
            yield Piece(" Paris")
            return
        self.started.append(request.session)
        self.running += 1
        self.most_at_once = max(self.most_at_once, self.running)
        try:
            if len(self.started) == 1:
                self.first.set()
                await self.release.wait()
            for piece in self.pieces:
                yield Piece(piece)
        finally:
            self.running -= 1


class ScriptedWorker(WorkerServer):
    def __init__(self, model: ScriptedModel, *args: Any) -> None:
        super().__init__(*args)
        self.model = model

    def _make_provider(self) -> Any:
        return self.model


async def test_the_worker_serves_shares_in_turn_and_ends_a_cancelled_waiter_unrun() -> None:
    ours, theirs = socket.socketpair()
    model = ScriptedModel()
    worker_reader, worker_writer = await asyncio.open_unix_connection(sock=theirs)
    reader, writer = await asyncio.open_unix_connection(sock=ours)
    worker = ScriptedWorker(
        model, WorkerConfig(semantic=False), worker_reader, worker_writer, Faults()
    )
    serving = asyncio.ensure_future(worker.run())
    frames = FrameReader()
    ends: dict[int, dict[str, Any]] = {}

    async def until(predicate: Any) -> None:
        while not predicate():
            data = await reader.read(65536)
            assert data, "the worker closed its channel"
            for frame in frames.feed(data):
                if frame.op == DONE:
                    ends[frame.header["id"]] = frame.header
                elif frame.op == READY:
                    ends[0] = frame.header

    def generate(request_id: int, share: str, document: str) -> None:
        writer.write(
            encode_frame(
                GENERATE,
                id=request_id,
                share=share,
                document=document,
                prompt="p",
                session=f"{document}\x00{request_id}\x000",
                max_tokens=4,
                stop=[],
            )
        )

    try:
        with anyio.fail_after(10):
            await until(lambda: 0 in ends)
            generate(1, "sub:hog", "big")
            await model.first.wait()
            for request_id in (2, 3, 4):
                generate(request_id, "sub:hog", f"big{request_id}")
            generate(5, "sub:victim", "small")
            generate(6, "sub:hog", "cancelled")
            writer.write(encode_frame(CANCEL, id=6))
            await until(lambda: 6 in ends)  # ended while waiting, before the model saw it
            assert ends[6]["pieces"] == 0
            model.release.set()
            await until(lambda: len(ends) == 7)
    finally:
        writer.close()
        with anyio.fail_after(10):
            await serving
    order = [session.split("\0")[0] for session in model.started]
    assert order == ["big", "small", "big2", "big3", "big4"]
    assert model.most_at_once == 1
    assert all(ends[i]["pieces"] == 2 for i in range(1, 6))
