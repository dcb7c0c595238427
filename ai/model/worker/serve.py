"""The worker's side of the channel: load the model, prove it runs, then serve generations and
embeddings until the server hangs up.

One generation at a time runs on the provider's model thread; the others wait their turn by
share (``ai.model.fair``: subjects, then documents, in turn; interactive before background),
never in arrival order, and one cancelled while it waits ends there without touching the model.
Embeddings run on the embedder's own thread meanwhile. Every reply is one
``protocol.wire.worker_frames`` frame on the same stream; every generation ends with ``done`` or
``error``, cancelled or not.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether.protocol.wire.worker_frames import (
    CANCEL,
    DONE,
    EMBED,
    EMBEDDER,
    ERROR,
    FAILED,
    GENERATE,
    HELLO,
    LOADED,
    PING,
    PONG,
    PROGRESS,
    READY,
    TOKEN,
    VECTORS,
    ChannelError,
    Frame,
    FrameReader,
    encode_frame,
)

from ...cache.embedder import Embedder
from ..fair import FairGate
from ..providers.base import Cancellation, GenerationRequest, confidence_of
from ..providers.local import LocalProvider
from .contract import OUT_OF_MEMORY_EXIT
from .faults import Faults

log = logging.getLogger("ai.worker")
SELFTEST_PROMPT = "The capital of France is"


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    model_path: str = ""
    quant: str = "q4_0"
    data_dir: str = "./data"
    threads: int = 1
    state_budget_mb: int = 256
    semantic: bool = True
    # False: only the embedder lives here (the suggestions come from an upstream provider).
    generate: bool = True
    nice: int = 10  # scheduling niceness added to the worker's (0: as the server's)
    cpus: list[int] | None = None  # the CPUs it runs on (--ai-cpus); None: the server's

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> WorkerConfig:
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in body.items() if k in known})


class WorkerServer:
    def __init__(
        self,
        config: WorkerConfig,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        faults: Faults,
    ) -> None:
        self.config = config
        self._reader = reader
        self._writer = writer
        self._faults = faults
        self._provider: LocalProvider | None = None
        self._embedder: Embedder | None = None
        self._running: dict[int, Cancellation] = {}
        self._waiting: dict[int, asyncio.Future[None]] = {}  # generations before their turn
        self._gate = FairGate(1)  # the model thread: one generation at a time
        self._tasks: set[asyncio.Task[None]] = set()

    def send(self, op: str, body: bytes = b"", **members: Any) -> None:
        if not self._writer.is_closing():
            self._writer.write(encode_frame(op, body, **members))

    async def run(self) -> int:
        self.send(HELLO, pid=os.getpid())
        if not self.config.generate:
            self.send(READY, model=None, path=None, quant=None, threads=0)
            if self.config.semantic:
                self._start_embedder()
            await self._serve()
            return 0
        provider = self._make_provider()
        began = time.perf_counter()
        try:
            await provider.__aenter__()
        except Exception as exc:
            log.error("loading the model failed: %s", exc)
            self.send(FAILED, stage="load", reason=str(exc))
            await self._writer.drain()
            return 1
        loaded = time.perf_counter()
        self.send(LOADED, load_ms=round((loaded - began) * 1000, 1))
        try:
            await self._selftest(provider)
        except Exception as exc:
            log.error("the model's self-test failed: %s", exc)
            self.send(FAILED, stage="selftest", reason=str(exc))
            await self._writer.drain()
            return 1
        self._provider = provider
        path = provider.loaded_path or Path()
        self.send(
            READY,
            model=path.name,
            path=str(path),
            quant=_quant_of(path),
            threads=provider.threads,
            load_ms=round((loaded - began) * 1000, 1),
            selftest_ms=round((time.perf_counter() - loaded) * 1000, 1),
        )
        if self.config.semantic:
            self._start_embedder()
        try:
            await self._serve()
        finally:
            for cancel in self._running.values():
                cancel.cancel()
            await provider.__aexit__(None, None, None)
        return 0

    def _make_provider(self) -> LocalProvider:
        config = self.config
        return LocalProvider(
            Path(config.model_path) if config.model_path else None,
            threads=config.threads,
            state_budget_bytes=config.state_budget_mb * 2**20,
            requantize_into=Path(config.data_dir) / "models" if config.quant == "q4_0" else None,
        )

    async def _selftest(self, provider: LocalProvider) -> None:
        """One tiny decode: a build that cannot run on this CPU fails here, at start, instead
        of on an editor's first request."""
        self._faults.in_selftest()
        request = GenerationRequest(SELFTEST_PROMPT, "\0selftest", max_tokens=2, cold=True)
        async for _ in provider.stream(request, Cancellation()):
            pass

    def _start_embedder(self) -> None:
        embedder = Embedder()
        loading = embedder.start_loading()

        def loaded(future: asyncio.Future[Any]) -> None:
            if future.cancelled():
                return
            if future.exception() is not None:
                log.error("the embedding model did not load: %s", future.exception())
                self.send(EMBEDDER, state="failed", reason=str(future.exception()))
            else:
                self._embedder = embedder
                self.send(EMBEDDER, state="ready", reason="")

        loading.add_done_callback(loaded)

    async def _serve(self) -> None:
        frames = FrameReader()
        while True:
            data = await self._reader.read(2**16)
            if not data:
                return  # the server closed the channel (or died): nothing to serve
            try:
                received = frames.feed(data)
            except ChannelError as exc:
                log.error("the server broke the channel: %s", exc)
                return
            for frame in received:
                self._dispatch(frame)

    def _dispatch(self, frame: Frame) -> None:
        op = frame.op
        if op == PING:
            self.send(PONG, id=frame.header.get("id"))
        elif op == GENERATE and self._provider is None:
            self.send(ERROR, id=frame.header.get("id"), message="this worker has no model")
        elif op == GENERATE:
            self._waiting[frame.header.get("id")] = self._spawn(self._generate(frame.header))
        elif op == CANCEL:
            request_id = frame.header.get("id", -1)
            waiting = self._waiting.pop(request_id, None)
            if waiting is not None:  # still waiting for its turn: it ends without the model
                waiting.cancel()
                assert self._provider is not None
                self.send(DONE, id=request_id, pieces=0, warm_hits=self._provider.warm_hits())
            cancel = self._running.get(request_id)
            if cancel is not None:
                cancel.cancel()
        elif op == EMBED:
            self._spawn(self._embed(frame.header))
        else:
            log.warning("ignoring an unexpected %r frame", op)

    def _spawn(self, work: Any) -> asyncio.Task[None]:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _generate(self, header: dict[str, Any]) -> None:
        request_id = header["id"]
        assert self._provider is not None
        background = bool(header.get("background"))
        share = str(header.get("share") or "")
        document = str(header.get("document") or "")
        async with self._gate.turn(share or document, document, background=background):
            self._waiting.pop(request_id, None)
            await self._run(request_id, header)

    async def _run(self, request_id: int, header: dict[str, Any]) -> None:
        assert self._provider is not None
        cancel = Cancellation()
        loop = asyncio.get_running_loop()
        cancel.on_step = lambda: loop.call_soon_threadsafe(self._progress, request_id)
        self._running[request_id] = cancel
        pieces = 0
        try:
            request = GenerationRequest(
                prompt=str(header["prompt"]),
                session=str(header["session"]),
                max_tokens=int(header["max_tokens"]),
                stop=tuple(header.get("stop") or ()),
                cold=bool(header.get("cold")),
                temperature=float(header.get("temperature") or 0.0),
                repeat_penalty=float(header.get("repeat_penalty") or 1.0),
                seed=int(header.get("seed") or 0),
                background=bool(header.get("background")),
                must_start=bool(header.get("must_start")),
            )
            async for piece in self._provider.stream(request, cancel):
                pieces += 1
                self.send(TOKEN, id=request_id, text=piece, p=confidence_of(piece))
                await self._faults.after_token()
            self.send(DONE, id=request_id, pieces=pieces, warm_hits=self._provider.warm_hits())
        except MemoryError:
            _die_of_memory()
        except Exception as exc:
            if isinstance(exc.__cause__, MemoryError):
                _die_of_memory()
            log.exception("generation %s failed", request_id)
            self.send(ERROR, id=request_id, message=str(exc) or type(exc).__name__)
        finally:
            self._running.pop(request_id, None)

    def _progress(self, request_id: int) -> None:
        if request_id in self._running:
            self.send(PROGRESS, id=request_id)

    async def _embed(self, header: dict[str, Any]) -> None:
        request_id = header["id"]
        if self._embedder is None:
            self.send(ERROR, id=request_id, message="the embedding model is not loaded")
            return
        try:
            texts = [str(text) for text in header["texts"]]
            vectors = await self._embedder.embed(texts)
        except MemoryError:
            _die_of_memory()
        except Exception as exc:
            log.exception("embedding failed")
            self.send(ERROR, id=request_id, message=str(exc) or type(exc).__name__)
            return
        rows, dim = vectors.shape
        body = vectors.astype("<f4").tobytes()
        self.send(VECTORS, body, id=request_id, rows=rows, dim=dim)


def _quant_of(path: Path) -> str:
    """The quantisation a GGUF file name declares (``….Q4_1.gguf``, ``….q4_0.gguf``)."""
    parts = path.name.lower().split(".")
    for part in reversed(parts[:-1]):
        if part[:1] in ("q", "f") and any(ch.isdigit() for ch in part):
            return part.upper()
    return "unknown"


def _die_of_memory() -> None:
    """Out of memory the process cannot be trusted (a half-made allocation inside llama.cpp):
    exit and let the supervisor start a fresh one."""
    log.error("the model worker ran out of memory; exiting")
    logging.shutdown()
    os._exit(OUT_OF_MEMORY_EXIT)
