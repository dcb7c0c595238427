"""The server's end of one model worker process: start it, talk to it, notice it die.

Requests are multiplexed on the one channel by id. When the process exits (killed, crashed,
out of memory) or the channel breaks, every request in flight fails at once with
``ModelUnavailable``: the end of the stream is the fault becoming detectable, so nothing waits
on a timeout. A cancelled generation stays known until the worker says it ended, so whoever
holds the model's turn can wait for the model to be free, and the worker counts as hung only
when none of its generations has moved for a while (the others wait their turn inside it,
silent by design). Imports nothing native: the worker process does that.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import json
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tether.protocol.wire.worker_frames import (
    CANCEL,
    DONE,
    EMBED,
    ERROR,
    GENERATE,
    PING,
    PONG,
    PROGRESS,
    TOKEN,
    VECTORS,
    ChannelError,
    Frame,
    FrameReader,
    encode_frame,
)

from ..errors import BadRequest, ModelUnavailable, ProviderError
from .fair import document_of
from .providers.base import GenerationRequest, Piece
from .worker.contract import LOG_MARK, OUT_OF_MEMORY_EXIT

log = logging.getLogger("ai.worker")
native_log = logging.getLogger("ai.worker.native")
LAST_WORDS = 12  # native output lines kept to quote when the worker dies


@dataclass(eq=False)
class GenerationStream:
    """One generation's events as they arrive: text pieces, then the end."""

    id: int
    events: asyncio.Queue[tuple[str, Any]] = field(default_factory=asyncio.Queue)
    finished: bool = False
    cancelled: bool = False  # asked to stop: its text is dropped, its end still awaited
    ended: asyncio.Event = field(default_factory=asyncio.Event)


class WorkerLink:
    """``link = WorkerLink(...); await link.start()``; ``on_frame`` hears the frames nobody
    asked for (ready, failed, embedder), ``on_exit`` the process's end with a reason."""

    def __init__(
        self,
        config: dict[str, Any],
        *,
        log_level: str,
        on_frame: Callable[[Frame], None],
        on_exit: Callable[[str], None],
        env: dict[str, str] | None = None,
    ) -> None:
        self._config = config
        self._log_level = log_level
        self._on_frame = on_frame
        self._on_exit = on_exit
        self._env = env
        self._ids = itertools.count(1)
        self._generations: dict[int, GenerationStream] = {}
        # When a generation last moved (a token, progress, an end), or the worker last became
        # busy: the hang watchdog's clock (``stalled``).
        self._last_activity = time.monotonic()
        self._calls: dict[int, asyncio.Future[Frame]] = {}
        self._process: asyncio.subprocess.Process | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._last_words: collections.deque[str] = collections.deque(maxlen=LAST_WORDS)
        self._killed_because: str | None = None
        self.exit_reason: str | None = None
        self.warm_hits = 0

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def alive(self) -> bool:
        return self.exit_reason is None and self._process is not None

    async def start(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "tether.ai.model.worker",
                "--fd",
                str(theirs.fileno()),
                "--config",
                json.dumps(self._config),
                "--log-level",
                self._log_level,
                pass_fds=(theirs.fileno(),),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C meant for the server is the server's to pass on
                env=self._env,
            )
        finally:
            theirs.close()
        reader, self._writer = await asyncio.open_unix_connection(sock=ours)
        self._tasks = [
            asyncio.ensure_future(self._read_channel(reader)),
            asyncio.ensure_future(self._read_output()),
        ]

    # ---- requests -------------------------------------------------------------------------

    def open_generation(self, request: GenerationRequest, share: str = "") -> GenerationStream:
        """Send ``request``; ``share`` is whose turn it takes in the worker (``ai.model.fair``)."""
        if not self.alive:
            raise ModelUnavailable(self.exit_reason or "the model worker is not running")
        stream = GenerationStream(next(self._ids))
        try:
            frame = encode_frame(
                GENERATE,
                id=stream.id,
                share=share,
                document=document_of(request),
                prompt=request.prompt,
                session=request.session,
                max_tokens=request.max_tokens,
                stop=list(request.stop),
                cold=request.cold,
                temperature=request.temperature,
                repeat_penalty=request.repeat_penalty,
                seed=request.seed,
                background=request.background,
                must_start=request.must_start,
            )
        except ValueError as exc:
            # Refused before anything is registered: no orphaned stream for the stall
            # watchdog to take for a hung worker, and this request alone fails.
            raise BadRequest(f"the prompt is too large for the model worker: {exc}") from exc
        assert self._writer is not None
        if not self._generations:
            self._last_activity = time.monotonic()  # idle until now: no stall so far
        self._generations[stream.id] = stream
        self._writer.write(frame)
        return stream

    def cancel(self, stream: GenerationStream) -> None:
        """Stop it (the model stops within one token, or before its turn); it stays known, its
        text dropped, until the worker's ``done`` says the model let it go (``ended``)."""
        if stream.cancelled or stream.finished:
            return
        stream.cancelled = True
        if self.alive and stream.id in self._generations:
            self._send(CANCEL, id=stream.id)

    async def embed(self, texts: list[str]) -> np.ndarray:
        reply = await self._call(EMBED, texts=texts)
        rows, dim = int(reply.header["rows"]), int(reply.header["dim"])
        return np.frombuffer(reply.body, dtype="<f4").reshape(rows, dim).astype(np.float32)

    async def ping(self) -> None:
        await self._call(PING)

    def stalled(self, now: float, limit: float) -> bool:
        """Generations are in flight and none has had text, progress or an end for ``limit``
        seconds. Not per generation: those waiting their turn in the worker are silent while
        another runs, and that one's progress says the worker is alive."""
        return bool(self._generations) and now - self._last_activity > limit

    async def _call(self, op: str, **members: Any) -> Frame:
        if not self.alive:
            raise ModelUnavailable(self.exit_reason or "the model worker is not running")
        call_id = next(self._ids)
        future: asyncio.Future[Frame] = asyncio.get_running_loop().create_future()
        self._calls[call_id] = future
        try:
            self._send(op, id=call_id, **members)
            reply = await future
        finally:
            self._calls.pop(call_id, None)
        if reply.op == ERROR:
            raise ProviderError(str(reply.header.get("message", "the model worker failed")))
        return reply

    def _send(self, op: str, **members: Any) -> None:
        assert self._writer is not None
        self._writer.write(encode_frame(op, **members))

    # ---- the process's end ----------------------------------------------------------------

    def kill(self, reason: str) -> None:
        """SIGKILL: for a worker that hangs or must go now. ``reason`` becomes the exit's."""
        self._killed_because = self._killed_because or reason
        if self._process is not None and self._process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._process.kill()

    async def stop(self, grace: float = 2.0) -> None:
        """Close the channel (the worker exits by itself), then SIGTERM, then SIGKILL."""
        self._killed_because = self._killed_because or "stopped with the server"
        if self._writer is not None:
            self._writer.close()
        process = self._process
        if process is not None and process.returncode is None:
            try:
                await asyncio.wait_for(process.wait(), grace)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(process.wait(), grace)
                except TimeoutError:
                    self.kill("did not stop")
                    await process.wait()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(BaseException):
                await task

    async def _read_channel(self, reader: asyncio.StreamReader) -> None:
        frames = FrameReader()
        try:
            while True:
                data = await reader.read(2**16)
                if not data:
                    break
                for frame in frames.feed(data):
                    self._route(frame)
        except ChannelError as exc:
            log.error("the model worker broke the channel: %s", exc)
            self.kill("broke the channel")
        except (ConnectionError, OSError):
            pass
        await self._ended()

    def _route(self, frame: Frame) -> None:
        op, request_id = frame.op, frame.header.get("id")
        stream = self._generations.get(request_id) if isinstance(request_id, int) else None
        if op in (TOKEN, PROGRESS, DONE, ERROR):
            self._last_activity = time.monotonic()
        if op in (TOKEN, PROGRESS, DONE, ERROR) and stream is not None:
            if op == TOKEN:
                if not stream.cancelled:
                    stream.events.put_nowait((TOKEN, _piece(frame.header)))
            elif op == DONE:
                self.warm_hits = int(frame.header.get("warm_hits", self.warm_hits))
                self._end_stream(stream, (DONE, int(frame.header.get("pieces", 0))))
            elif op == ERROR:
                self._end_stream(stream, (ERROR, str(frame.header.get("message", ""))))
            return
        if op in (VECTORS, PONG, ERROR) and isinstance(request_id, int):
            future = self._calls.get(request_id)
            if future is not None and not future.done():
                future.set_result(frame)
            return
        if op in (TOKEN, PROGRESS, DONE):
            return  # a generation that ended already: nobody listens
        self._on_frame(frame)

    def _end_stream(self, stream: GenerationStream, event: tuple[str, Any]) -> None:
        stream.finished = True
        self._generations.pop(stream.id, None)
        stream.events.put_nowait(event)
        stream.ended.set()

    async def _ended(self) -> None:
        """The channel is gone: the process is dying or dead. Fail everything in flight now,
        then find out how it ended."""
        process = self._process
        returncode = None
        if process is not None:
            # A dead process has exited by the time its channel reads as closed, nearly always:
            # a short wait gets the real cause (the signal) into the editors' error messages.
            try:
                returncode = await asyncio.wait_for(asyncio.shield(process.wait()), 0.5)
            except TimeoutError:
                self._fail_all(self._killed_because or "closed its channel")
                try:
                    returncode = await asyncio.wait_for(process.wait(), 5.0)
                except TimeoutError:
                    self.kill("left its channel but did not exit")
                    returncode = await process.wait()
        reason = self._explain(returncode)
        self._fail_all(reason)
        self.exit_reason = reason
        self._on_exit(reason)

    def _fail_all(self, reason: str) -> None:
        self.exit_reason = self.exit_reason or reason
        if not self._generations and not self._calls:
            return
        error = ModelUnavailable(f"AI is unavailable: the model worker {reason}")
        for stream in list(self._generations.values()):
            self._end_stream(stream, ("died", error))
        for future in self._calls.values():
            if not future.done():
                future.set_exception(error)

    def _explain(self, returncode: int | None) -> str:
        if self._killed_because is not None:
            return self._killed_because
        if returncode is None:
            return "ended"
        if returncode == OUT_OF_MEMORY_EXIT:
            return "ran out of memory"
        if returncode < 0:
            name = signal.Signals(-returncode).name
            if name == "SIGKILL":
                return "was killed by SIGKILL (kill -9, or the kernel's out-of-memory killer)"
            return f"crashed with {name}"
        return f"exited with status {returncode}"

    @property
    def last_words(self) -> list[str]:
        return list(self._last_words)

    async def _read_output(self) -> None:
        """The worker's stdout and stderr: its own log records at their level, native output
        at debug (llama.cpp's per-tensor chatter belongs nowhere else)."""
        process = self._process
        assert process is not None and process.stdout is not None
        while True:
            try:
                raw = await process.stdout.readline()
            except ValueError:  # a line longer than the stream's limit: skip it
                continue
            if not raw:
                return
            line = raw.decode("utf-8", "replace").rstrip()
            if line.startswith(LOG_MARK):
                level, _, rest = line[1:].partition(" ")
                name, _, message = rest.partition(" ")
                logging.getLogger(name or "ai.worker").log(
                    int(level) if level.isdigit() else logging.INFO,
                    "%s",
                    message,
                    extra={"worker_pid": process.pid},
                )
            elif line:
                self._last_words.append(line)
                native_log.debug("%s", line)


def worker_environment(threads: int) -> dict[str, str]:
    """The server's environment, with the native libraries' thread pools held to ``threads``
    (on 2 cores an unbounded OpenMP pool starves the sync path)."""
    env = dict(os.environ)
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env.setdefault(name, str(threads))
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


def _piece(header: dict[str, Any]) -> Piece:
    """A TOKEN frame's text with its confidence; a confidence that is not a probability is
    dropped (the worker is trusted code, but a number it got wrong must not steer a stop)."""
    confidence = header.get("p")
    if not isinstance(confidence, int | float) or not 0.0 <= confidence <= 1.0:
        confidence = None
    return Piece(str(header.get("text", "")), confidence)
