"""A small real OpenAI-compatible SSE server on 127.0.0.1 that can misbehave, for the provider tests
(same event loop: ``serve_upstream``) and the end-to-end tests against a server subprocess (its own
thread and event loop: ``ThreadedUpstream``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass
class Upstream:
    """A raw HTTP/1.1 keep-alive server speaking just enough of the OpenAI streaming API.

    ``mode``: "stream" (chat or completions chunks by path), "status", "hang" (answers nothing
    until the client goes away or the server closes), "malformed", "drop" (closes the socket
    after two chunks), "no-logprobs" (refuses a request asking for logprobs with a 400). Every
    request is recorded with the number of the connection it came on. Misbehaving on purpose:
    "html" (200 with an HTML page), "silent" (event-stream headers, then nothing), "trickle"
    (``good`` pieces, then the rest one byte every ``delay`` seconds), "endless-event" (``good``
    pieces, then ``data:`` lines that never end their event, as fast as the client reads),
    "flood" (``pieces`` events of ``flood_chars`` characters each). ``models`` is how the model
    list (a GET, the health check) answers: "json" (``status`` in "status" mode, else 200),
    "ok" (200 whatever the mode), "html", "hang", or "status" (``status``).
    """

    mode: str = "stream"
    pieces: int = 5
    delay: float = 0.0
    status: int = 500
    error_body: bytes = b'{"error": {"message": "model crashed"}}'
    extra_headers: str = ""
    models: str = "json"
    good: int = 0  # "trickle", "endless-event": well-formed pieces before the misbehaviour
    flood_chars: int = 1024
    sent_bytes: int = 0  # body bytes written for "endless-event" and "flood" answers
    connections: int = 0
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    connection_of: list[int] = field(default_factory=list)  # per request: its connection's number
    hangs_released: int = 0  # "hang" requests whose client closed the connection
    health_checks: int = 0  # GET requests (the model list), not recorded with the others
    client_gone: asyncio.Event = field(default_factory=asyncio.Event)
    port: int = 0
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _writers: list[asyncio.StreamWriter] = field(default_factory=list)
    _handlers: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def piece_texts(self, chat: bool = True) -> list[str]:
        """The text pieces one "stream" answer carries."""
        return [f"w{i} " if chat else f"t{i} " for i in range(self.pieces)]

    async def wait_until(self, predicate: Callable[[Upstream], bool]) -> None:
        """Until ``predicate(self)`` holds; re-checked whenever a request or connection changes."""
        while not predicate(self):
            changed = self._changed
            await changed.wait()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        number = self.connections
        handler = asyncio.current_task()
        assert handler is not None
        self._handlers.add(handler)
        self._writers.append(writer)
        self._notify()
        try:
            while await self._one(reader, writer, number):
                pass
        except (ConnectionError, asyncio.IncompleteReadError):
            self.client_gone.set()
        finally:
            writer.close()
            self._notify()

    async def _one(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, number: int
    ) -> bool:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return False  # the client closed an idle keep-alive connection
        request_line, *lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines:
            name, _, value = line.partition(":")
            if name:
                headers[name.lower()] = value.strip()
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        if request_line.startswith("GET "):  # a health check: the model list
            self.health_checks += 1
            self._notify()
            if self.models == "hang":
                return await self._hang(reader)
            status = 200 if self.models == "ok" else self.status
            if "status" not in (self.mode, self.models):
                status = 200
            answer = b'{"object": "list", "data": [{"id": "tiny", "object": "model"}]}'
            kind = "application/json"
            if self.models == "html":
                answer, kind = b"<html><body>It works!</body></html>", "text/html"
            writer.write(
                f"HTTP/1.1 {status} OK\r\nContent-Type: {kind}\r\n"
                f"Content-Length: {len(answer)}\r\n\r\n".encode()
                + answer
            )
            await writer.drain()
            return True
        self.paths.append(request_line.split()[1])
        self.headers.append(headers)
        self.requests.append(json.loads(body))
        self.connection_of.append(number)
        self._notify()
        if self.mode == "no-logprobs" and self.requests[-1].get("logprobs"):
            refusal = b'{"error": {"message": "logprobs is not supported by this server"}}'
            writer.write(
                b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(refusal)}\r\n\r\n".encode()
                + refusal
            )
            await writer.drain()
            return True
        if self.mode == "status":
            writer.write(
                f"HTTP/1.1 {self.status} Upstream Says No\r\nContent-Type: application/json\r\n"
                f"{self.extra_headers}Content-Length: {len(self.error_body)}\r\n\r\n".encode()
                + self.error_body
            )
            await writer.drain()
            return True
        if self.mode == "hang":
            return await self._hang(reader)
        if self.mode == "html":
            page = b"<html><body>Service temporarily unavailable</body></html>"
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n"
                + f"Content-Length: {len(page)}\r\n\r\n".encode()
                + page
            )
            await writer.drain()
            return True
        if self.mode in ("silent", "trickle", "endless-event", "flood"):
            return await self._misbehave(reader, writer)
        logprobs = bool(self.requests[-1].get("logprobs")) if self.requests else False
        return await self._stream(
            reader, writer, self.paths[-1].endswith("/chat/completions"), logprobs
        )

    async def _hang(self, reader: asyncio.StreamReader) -> bool:
        """Answer nothing until the client goes away or the server closes."""
        eof = asyncio.ensure_future(reader.read(1))
        stop = asyncio.ensure_future(self._stop.wait())
        done, pending = await asyncio.wait({eof, stop}, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        if eof in done:
            self.hangs_released += 1
            self.client_gone.set()
            self._notify()
        return False

    async def _misbehave(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """The modes that answer 200 with an event stream that goes wrong; the connection is
        never reused after one."""
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        await writer.drain()
        for index in range(self.good):
            await self._chunk(writer, {"choices": [{"delta": {"content": f"w{index} "}}]})
        if self.mode == "silent":
            return await self._hang(reader)
        if self.mode == "trickle":
            event = json.dumps({"choices": [{"delta": {"content": "t "}}]}).encode()
            rest = b"".join(b"data: " + event + b"\n\n" for _ in range(self.pieces))
            eof = asyncio.ensure_future(reader.read(1))
            try:
                for byte in rest:
                    done, _ = await asyncio.wait({eof}, timeout=self.delay)
                    if done:
                        self.client_gone.set()
                        self._notify()
                        return False
                    await self._send(writer, bytes([byte]))
            finally:
                eof.cancel()
            return False
        if self.mode == "endless-event":
            line = b"data: " + b"x" * 4000 + b"\n"  # never a blank line: the event never ends
            while not self._stop.is_set():
                await self._send(writer, line * 16)
                self.sent_bytes += len(line) * 16
            return False
        text = "y" * self.flood_chars
        for _ in range(self.pieces):
            event = json.dumps({"choices": [{"delta": {"content": text}}]}).encode()
            await self._send(writer, b"data: " + event + b"\n\n")
            self.sent_bytes += len(event) + 8
        await self._send(writer, b"data: [DONE]\n\n")
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True

    async def _stream(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        chat: bool,
        logprobs: bool = False,
    ) -> bool:
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        # The client sends nothing while it reads a response, so EOF here means it went away.
        eof = asyncio.ensure_future(reader.read(1))
        try:
            if chat:
                await self._chunk(writer, {"choices": [{"delta": {"role": "assistant"}}]})
            for index, text in enumerate(self.piece_texts(chat)):
                if index and self.delay:
                    done, _ = await asyncio.wait({eof}, timeout=self.delay)
                    if done:
                        self.client_gone.set()
                        return False
                if self.mode == "drop" and index == 2:
                    writer.transport.abort()
                    return False
                if self.mode == "malformed" and index == 1:
                    await self._send(writer, b'data: {"choices": [{"delta": \n\n')
                choice: dict[str, Any] = {"delta": {"content": text}} if chat else {"text": text}
                if logprobs:  # the i-th piece's log-probability: -0.1 (i + 1), as upstreams send
                    value = -0.1 * (index + 1)
                    choice["logprobs"] = (
                        {"content": [{"token": text, "logprob": value}]}
                        if chat
                        else {"tokens": [text], "token_logprobs": [value]}
                    )
                await self._chunk(writer, {"choices": [choice]})
            await self._send(writer, b"data: [DONE]\n\n")
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            return True
        finally:
            eof.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionError):
                await eof

    async def _chunk(self, writer: asyncio.StreamWriter, event: dict[str, Any]) -> None:
        await self._send(writer, b"data: " + json.dumps(event).encode() + b"\n\n")

    async def _send(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        writer.write(b"%x\r\n%s\r\n" % (len(data), data))
        await writer.drain()

    async def close(self) -> None:
        """End every connection and wait for its handler, so no task outlives the test."""
        self._stop.set()
        for writer in self._writers:
            writer.close()
        await asyncio.gather(*self._handlers, return_exceptions=True)


@contextlib.asynccontextmanager
async def serve_upstream(state: Upstream | None = None) -> AsyncIterator[Upstream]:
    """An upstream on 127.0.0.1 (a free port) in the running event loop."""
    state = state or Upstream()
    server = await asyncio.start_server(state.serve, "127.0.0.1", 0)
    state.port = server.sockets[0].getsockname()[1]
    try:
        yield state
    finally:
        await state.close()
        server.close()
        await server.wait_closed()


class ThreadedUpstream:
    """An upstream on its own thread and event loop, so a server subprocess can reach it whatever
    the test's loop is doing. Read ``state`` freely between requests; set ``state.mode`` etc. only
    while no request is in flight; wait on it from another loop with ``await up.run(coro)``.
    """

    def __init__(self) -> None:
        self.state = Upstream()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="upstream", daemon=True)
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        return self.state.url

    def start(self) -> ThreadedUpstream:
        self._thread.start()
        self._server = self._call(self._open())
        return self

    def stop(self) -> None:
        try:
            self._call(self._close(), timeout=10)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop.close()

    def __enter__(self) -> ThreadedUpstream:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the upstream's loop and await its result from the caller's loop."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop))

    @contextlib.contextmanager
    def behaving(self, **changes: Any) -> Iterator[Upstream]:
        """Set ``state`` attributes (mode, status, pieces...) for a block, then restore them."""
        saved = {name: getattr(self.state, name) for name in changes}
        for name, value in changes.items():
            setattr(self.state, name, value)
        try:
            yield self.state
        finally:
            for name, value in saved.items():
                setattr(self.state, name, value)

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float = 5) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    async def _open(self) -> asyncio.Server:
        server = await asyncio.start_server(self.state.serve, "127.0.0.1", 0)
        self.state.port = server.sockets[0].getsockname()[1]
        return server

    async def _close(self) -> None:
        await self.state.close()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
