"""A model server that misbehaves on purpose, for ``tether bench attacks`` (issue 37): an
OpenAI-compatible ``/v1/completions``, ``/v1/chat/completions`` and ``/v1/models`` on 127.0.0.1
that answers in one chosen way, or a webhook receiver. Runs as its own process
(``python fake_upstream.py --mode hang --port 8001``), standard library only, so what it costs
is not the bench's and it starts in a blink.

Modes:
- ``healthy``: a short SSE stream of a few tokens (at most the request's ``max_tokens``), then
  ``[DONE]``; the model list as JSON.
- ``hang``: reads the request and never answers (the model list too).
- ``trickle``: 200 ``text/event-stream``, then a comment line every second, never a token.
- ``endless-event``: 200 ``text/event-stream``, then ``data:`` lines of 64 KiB with never the
  blank line that ends an event, up to ``--bytes``; then holds the stream open.
- ``html``: 200 ``text/html`` for everything, the model list included (a proxy's login page).
- ``flood``: a valid stream of ``--chars`` characters in 8-character tokens, whatever
  ``max_tokens`` asked.
- ``429``: 429 with ``Retry-After`` for a completion; the model list answers as healthy.
- ``webhook``: 200 to any POST, each delivery's arrival (wall clock), size and document
  recorded.

``GET /_bench/stats`` answers in every mode: requests per path, bytes sent, the deliveries.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import time
from collections import Counter
from typing import Any

MODES = ("healthy", "hang", "trickle", "endless-event", "html", "flood", "429", "webhook")
_TOKENS = (" the", " harbour", " keeper", " watched", " the", " old", " pier", " again", ".")
_LINE = 64 * 1024
_HTML = b"<!doctype html><html><head><title>Sign in</title></head><body>Sign in</body></html>"
_MAX_HEAD = 64 * 1024
_MAX_BODY = 64 * 1024 * 1024


class Upstream:
    def __init__(self, mode: str, cap_bytes: int, cap_chars: int) -> None:
        self.mode = mode
        self.cap_bytes = cap_bytes
        self.cap_chars = cap_chars
        self.requests: Counter[str] = Counter()
        self.bytes_sent = 0
        # (time.time() at arrival, body bytes, the notice's document)
        self.deliveries: list[tuple[float, int, str]] = []

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request = await _read_request(reader)
                if request is None:
                    return
                method, path, body = request
                self.requests[path] += 1
                if path == "/_bench/stats":
                    await self._json(writer, 200, self.stats())
                elif self.mode == "webhook":
                    self.deliveries.append((time.time(), len(body), _document_of(body)))
                    await self._json(writer, 200, {"ok": True})
                elif path.endswith("/models"):
                    await self._models(reader, writer)
                elif path.endswith("/completions") and method == "POST":
                    await self._complete(reader, writer, path, body)
                else:
                    await self._json(writer, 404, {"error": {"message": "not found"}})
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()

    def stats(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "requests": dict(self.requests),
            "bytes_sent": self.bytes_sent,
            "deliveries": self.deliveries,
        }

    async def _models(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.mode == "hang":
            await _until_closed(reader)
        elif self.mode == "html":
            await self._plain(writer, 200, "text/html", _HTML)
        else:
            await self._json(writer, 200, {"object": "list", "data": [{"id": "bench"}]})

    async def _complete(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str, body: bytes
    ) -> None:
        chat = path.endswith("/chat/completions")
        mode = self.mode
        if mode in ("hang",):
            await _until_closed(reader)
            return
        if mode == "html":
            await self._plain(writer, 200, "text/html", _HTML)
            return
        if mode == "429":
            error = {"error": {"message": "rate limited", "type": "rate_limit"}}
            await self._json(writer, 429, error, {"Retry-After": "1"})
            return
        await self._head(writer, 200, "text/event-stream", chunked=True)
        if mode == "trickle":
            while True:
                await self._chunk(writer, b": still thinking\n")
                await asyncio.sleep(1.0)
        if mode == "endless-event":
            line = b"data: " + b"x" * (_LINE - 7) + b"\n"
            while self.bytes_sent < self.cap_bytes:
                await self._chunk(writer, line)
            await _until_closed(reader)
            return
        if mode == "flood":
            sent = 0
            while sent < self.cap_chars:
                await self._chunk(writer, _event(chat, "abcdefg "))
                sent += 8
        else:
            wanted = _max_tokens(body)
            for index in range(min(wanted, len(_TOKENS))):
                await asyncio.sleep(0.002)  # a fast model, but not an instant one
                await self._chunk(writer, _event(chat, _TOKENS[index]))
        await self._chunk(writer, _event(chat, "", finish="length"))
        await self._chunk(writer, b"data: [DONE]\n\n")
        await self._send(writer, b"0\r\n\r\n")

    async def _head(
        self,
        writer: asyncio.StreamWriter,
        status: int,
        kind: str,
        *,
        length: int | None = None,
        chunked: bool = False,
        extra: dict[str, str] | None = None,
    ) -> None:
        lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'OK')}", f"Content-Type: {kind}"]
        if chunked:
            lines.append("Transfer-Encoding: chunked")
            lines.append("Cache-Control: no-cache")
        else:
            lines.append(f"Content-Length: {length or 0}")
        lines += [f"{k}: {v}" for k, v in (extra or {}).items()]
        await self._send(writer, ("\r\n".join(lines) + "\r\n\r\n").encode())

    async def _json(
        self,
        writer: asyncio.StreamWriter,
        status: int,
        value: object,
        extra: dict[str, str] | None = None,
    ) -> None:
        await self._plain(writer, status, "application/json", json.dumps(value).encode(), extra)

    async def _plain(
        self,
        writer: asyncio.StreamWriter,
        status: int,
        kind: str,
        body: bytes,
        extra: dict[str, str] | None = None,
    ) -> None:
        await self._head(writer, status, kind, length=len(body), extra=extra)
        await self._send(writer, body)

    async def _chunk(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        await self._send(writer, b"%x\r\n%b\r\n" % (len(data), data))

    async def _send(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        writer.write(data)
        self.bytes_sent += len(data)
        await writer.drain()


_REASONS = {200: "OK", 404: "Not Found", 429: "Too Many Requests"}


def _event(chat: bool, text: str, finish: str | None = None) -> bytes:
    if chat:
        choice: dict[str, Any] = {"index": 0, "delta": {"content": text} if text else {}}
    else:
        choice = {"index": 0, "text": text, "logprobs": None}
    choice["finish_reason"] = finish
    return b"data: " + json.dumps({"object": "bench", "choices": [choice]}).encode() + b"\n\n"


def _document_of(body: bytes) -> str:
    try:
        notice = json.loads(body)
    except ValueError:
        return ""
    return str(notice.get("document", "")) if isinstance(notice, dict) else ""


def _max_tokens(body: bytes) -> int:
    try:
        value = json.loads(body).get("max_tokens")
    except (ValueError, AttributeError):
        return 4
    return value if isinstance(value, int) and value > 0 else 4


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str, bytes] | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    except asyncio.LimitOverrunError:
        raise ConnectionError("request head too long") from None
    lines = head.decode("latin-1").split("\r\n")
    method, _, rest = lines[0].partition(" ")
    path = rest.partition(" ")[0]
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length" and value.strip().isdigit():
            length = int(value)
    if length > _MAX_BODY:
        raise ConnectionError("request body too long")
    body = await reader.readexactly(length) if length else b""
    return method, path.split("?", 1)[0], body


async def _until_closed(reader: asyncio.StreamReader) -> None:
    """Hold the connection, answering nothing, until the client gives up on it."""
    while await reader.read(4096):
        pass


async def _main(args: argparse.Namespace) -> None:
    upstream = Upstream(args.mode, args.bytes, args.chars)
    server = await asyncio.start_server(upstream.serve, "127.0.0.1", args.port, limit=_MAX_HEAD)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=MODES, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--bytes", type=int, default=315 * 1024 * 1024, help="endless-event")
    parser.add_argument("--chars", type=int, default=204_800, help="flood")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_main(parser.parse_args()))


if __name__ == "__main__":
    main()
