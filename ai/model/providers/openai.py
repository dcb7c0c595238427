"""An OpenAI-compatible upstream (vLLM, Ollama, a llama.cpp server, a hosted API) streamed over
one pooled keep-alive HTTP client; owns the wire format (SSE, ChatML to messages) and the error
mapping at that boundary. Knows nothing of documents, editors or sockets.

Chat prefill: the prompt from ``ai/text/context.py`` ends with an open assistant turn holding the
document text before the cursor. For the chat API that text becomes a final assistant message so
the upstream continues it. Ollama and the llama.cpp server continue such a message; vLLM does so
only with ``extra_body={"continue_final_message": True, "add_generation_prompt": False}``; hosted
APIs usually ignore the prefill and answer afresh. ``api="completions"`` sends the ChatML prompt
as is and is the exact choice where the upstream supports it.

An upstream that misbehaves costs one request a few seconds and a bounded amount of memory, and
before anything was generated it is ``UpstreamDown``, so a pool moves the request on: no token
within ``first_token_timeout`` of sending (it accepted and never answered, sent headers and then
nothing, or trickles bytes that never make an event), an answer that is not an event stream
(an HTML error page with 200), 429 (down for its ``Retry-After``, bounded), 502-504 or a broken
connection. After the first token a gap of ``idle_timeout`` between tokens is
``ProviderTimeout``. Every byte is bounded: an event (``MAX_EVENT_BYTES``), a whole answer
(``answer_bytes``, by ``max_tokens``), and the text by pieces and characters (``max_tokens``
pieces of at most ``MAX_TOKEN_CHARS`` each: a flood is cut off there).
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import importlib.util
import json
import logging
import math
import random
import re
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx

from ...errors import ProviderError, ProviderTimeout, ProviderUnavailable, UpstreamDown
from .base import Cancellation, GenerationRequest, Piece, Provider, confidence_of
from .pool import UpstreamPool

log = logging.getLogger(__name__)

APIS = {"chat": "chat/completions", "completions": "completions"}
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
MAX_STOPS = 4  # OpenAI rejects more than four stop sequences
DETAIL_CHARS = 200  # the most of an upstream's error text that reaches an editor
BACKOFF_SECONDS = 0.05  # first connect retry waits about this long, doubling after
DRAIN_SECONDS = 0.5  # after [DONE], how long to wait for the body's end to keep the connection
ERROR_BODY_BYTES = 1 << 16  # read error answers whole up to this, so the connection is reused
# One SSE event carries one token's JSON (with its log-probabilities): a few hundred bytes.
# An event (all its lines) longer than this is a broken upstream, not a token.
MAX_EVENT_BYTES = 64 * 1024
# A whole answer's bytes on the wire (events, comments, keep-alives): this much, plus
# ANSWER_BYTES_PER_TOKEN for each token asked for.
ANSWER_BASE_BYTES = 64 * 1024
ANSWER_BYTES_PER_TOKEN = 4 * 1024
# No token of any tokenizer in use is longer; text past max_tokens of these is a flood.
MAX_TOKEN_CHARS = 64
RETRY_AFTER_MAX_SECONDS = 60.0  # the longest a 429's Retry-After keeps an upstream down
MODEL_LIST_BYTES = 1 << 20  # a health check reads at most this much of the model list


# Answers that say the upstream itself is down or overloaded, not that the request was wrong.
DOWN_STATUSES = frozenset({502, 503, 504})
HEALTH_TIMEOUT_SECONDS = 2.0


class OpenAIProvider(Provider):
    """Streams from ``{base_url}/v1/chat/completions`` or ``/v1/completions`` (a ``base_url``
    that already ends in ``/v1`` is used as is). One ``httpx.AsyncClient`` per ``async with``."""

    name = "openai"

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str = "",
        api: str = "chat",
        timeout: float = 30.0,
        connect_timeout: float = 5.0,
        max_connections: int = 16,
        retries: int = 2,
        http2: bool = True,
        extra_body: Mapping[str, Any] | None = None,
        logprobs: bool = False,
        first_token_timeout: float | None = None,
        idle_timeout: float | None = None,
        health_timeout: float = HEALTH_TIMEOUT_SECONDS,
    ) -> None:
        if api not in APIS:
            raise ValueError(f"api must be one of {sorted(APIS)}, not {api!r}")
        url = httpx.URL(base_url)
        if url.scheme not in ("http", "https") or not url.host:
            raise ValueError(f"base_url must be an http(s) URL, not {base_url!r}")
        root = url.path.rstrip("/")
        self.url = url.copy_with(path=f"{root if root.endswith('/v1') else root + '/v1'}/")
        self.endpoint = APIS[api]
        self.model = model
        self.api = api
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        # From sending a request to its first token (headers, events: any byte that is not a
        # token does not count), and then between tokens; None: ``timeout`` (a caller with no
        # other upstream to move on to, such as the quality bench). ``tether serve`` sets both
        # (--openai-first-token-timeout, --openai-idle-timeout).
        self.first_token_timeout = first_token_timeout or timeout
        self.idle_timeout = idle_timeout or timeout
        self.health_timeout = health_timeout
        self.max_connections = max_connections
        self.retries = retries
        # h2 is optional: without it the same pool speaks HTTP/1.1 keep-alive.
        self.http2 = http2 and importlib.util.find_spec("h2") is not None
        self.extra_body = dict(extra_body or {})
        # Ask for each token's log-probability, so pieces carry the model's confidence (the
        # sure stopping rule); off by default, as not every upstream computes them for free.
        self.logprobs = logprobs
        self._api_key = api_key
        self._client: httpx.AsyncClient | None = None
        self.attempts = 0  # every try to send, connect retries included
        self.requests_sent = 0  # requests whose headers reached the upstream
        self.connections_opened = 0

    async def __aenter__(self) -> OpenAIProvider:
        # identity: a compressing proxy would hold tokens back until its buffer fills.
        headers = {"Accept": "text/event-stream", "Accept-Encoding": "identity"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        self._client = httpx.AsyncClient(
            base_url=self.url,
            headers=headers,
            timeout=httpx.Timeout(self.timeout, connect=self.connect_timeout),
            limits=httpx.Limits(
                max_connections=self.max_connections,
                max_keepalive_connections=self.max_connections,
            ),
            http2=self.http2,
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    def body(self, request: GenerationRequest) -> dict[str, Any]:
        """The JSON sent upstream for ``request`` (public so tests and logs can show it)."""
        body: dict[str, Any] = {
            "model": self.model,
            "stream": True,
            "max_tokens": request.max_tokens,
            "temperature": 0,
        }
        if self.api == "chat":
            body["messages"] = chatml_to_messages(request.prompt)
            # The upstream's chat template ends the turn itself; ChatML markers mean nothing there.
            stop = [s for s in request.stop if s and IM_START not in s and IM_END not in s]
        else:
            body["prompt"] = request.prompt
            stop = [s for s in request.stop if s]
        if stop:
            body["stop"] = stop[:MAX_STOPS]
        if self.logprobs:
            body["logprobs"] = True if self.api == "chat" else 1
        body.update(self.extra_body)
        return body

    async def stream(self, request: GenerationRequest, cancel: Cancellation) -> AsyncIterator[str]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.first_token_timeout  # then idle_timeout after each token
        try:
            async with asyncio.timeout_at(deadline):
                response = await self._answer(request, cancel)
        except TimeoutError as exc:
            raise self._silent() from exc
        if response is None:
            return
        answer = _Answer(request.max_tokens)
        decoder = SseDecoder()
        try:
            async with contextlib.aclosing(response.aiter_bytes()) as chunks:
                ended = False
                while not ended and not cancel.cancelled:
                    try:
                        async with asyncio.timeout_at(deadline):
                            chunk = await anext(chunks)
                    except StopAsyncIteration:
                        chunk, ended = b"", True
                    except (TimeoutError, httpx.TransportError) as exc:
                        raise self._cut_short(exc, answer) from exc
                    failure: ProviderError | None = None
                    try:
                        answer.count(len(chunk))
                        events = decoder.close() if ended else decoder.feed(chunk)
                        for data in events:
                            if data == "[DONE]":
                                ended = True
                                break
                            answer.queue(event_text(data, self.api))
                    except ProviderError as exc:
                        failure = self._broken(exc, answer)  # after the good pieces before it
                    for text in answer.ready():
                        deadline = loop.time() + self.idle_timeout
                        yield text
                        if cancel.cancelled:
                            return  # the rest is not read: the connection is dropped
                    if failure is not None:
                        raise failure
                    if answer.full or ended:
                        # The rest, little for an upstream that behaves, is read so the
                        # connection goes back to the pool; a flood is dropped with it.
                        await _drain(chunks)
                        return
        finally:
            # Unread body left: httpx drops the connection rather than return it dirty.
            await response.aclose()

    async def _answer(
        self, request: GenerationRequest, cancel: Cancellation
    ) -> httpx.Response | None:
        """The upstream's streaming answer to ``request`` (its headers), or None when cancelled
        first; raises on every answer that is not a stream of events."""
        response = await self._send(self.body(request), cancel)
        if response is None:
            return None
        try:
            if not response.is_success:
                message = await _status_message(response)
                if self._refused_logprobs(response.status_code, message):
                    await response.aclose()
                    response = await self._send(self.body(request), cancel)
                    if response is None:
                        return None
                    if not response.is_success:
                        message = await _status_message(response)
                if not response.is_success:
                    raise _status_error(response, message)
            kind = response.headers.get("content-type", "")
            if not kind.lower().startswith("text/event-stream"):
                raise UpstreamDown(
                    f"the upstream at {self._where()} answered {response.status_code} with"
                    f" {_detail(kind.encode()) or 'no content type'}, not an event stream"
                )
        except BaseException:
            await response.aclose()
            raise
        return response

    def _silent(self) -> UpstreamDown:
        return UpstreamDown(
            f"the upstream at {self._where()} sent no token within {self.first_token_timeout:g}s"
        )

    def _cut_short(self, error: Exception, answer: _Answer) -> ProviderError:
        """The body stopped coming (a deadline, a read timeout) or broke off."""
        timed_out = isinstance(error, TimeoutError | httpx.TimeoutException)
        if not answer.pieces:
            if timed_out:
                return self._silent()
            return UpstreamDown(f"the upstream at {self._where()} broke off before its first token")
        if timed_out:
            return ProviderTimeout(
                f"the upstream sent no token for {self.idle_timeout:g}s mid-stream"
            )
        return ProviderError("the upstream connection broke mid-stream")

    def _broken(self, error: ProviderError, answer: _Answer) -> ProviderError:
        """An answer past its bounds: before any token the upstream is broken (down, so the
        request moves on); after, the editor's error."""
        if not answer.pieces:
            return UpstreamDown(f"the upstream at {self._where()} is broken: {error}")
        return error

    def _refused_logprobs(self, status: int, message: str) -> bool:
        """An upstream that refuses the request because of ``logprobs``: stop asking for them
        (its pieces carry no confidence, and the sure rule shows one word) and say so once."""
        if not self.logprobs or status not in (400, 422) or "logprob" not in message.lower():
            return False
        log.warning("the upstream at %s refuses logprobs: suggestions stay one word", self._where())
        self.logprobs = False
        return True

    async def _send(self, body: dict[str, Any], cancel: Cancellation) -> httpx.Response | None:
        """Send with retries on connect failures only: nothing reached the upstream yet, so a
        retry cannot run a generation twice. None when cancelled before an answer."""
        if self._client is None:
            raise ProviderUnavailable("the OpenAI provider is not started (use async with)")
        request = self._client.build_request(
            "POST", self.endpoint, json=body, extensions={"trace": self._trace}
        )
        for attempt in range(self.retries + 1):
            if attempt:
                await asyncio.sleep(BACKOFF_SECONDS * 2 ** (attempt - 1) * random.uniform(0.5, 1.5))
            if cancel.cancelled:
                return None
            self.attempts += 1
            try:
                return await self._client.send(request, stream=True)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                if attempt == self.retries:
                    raise UpstreamDown(
                        f"cannot connect to the upstream at {self._where()}"
                        f" ({attempt + 1} attempts)"
                    ) from exc
            except httpx.PoolTimeout as exc:
                raise ProviderUnavailable(
                    f"all {self.max_connections} upstream connections stayed busy"
                ) from exc
            except httpx.TimeoutException as exc:
                raise UpstreamDown(
                    f"the upstream at {self._where()} did not answer within {self.timeout:g}s"
                ) from exc
            except httpx.TransportError as exc:
                raise UpstreamDown(
                    f"the upstream at {self._where()} failed before answering"
                ) from exc
        raise AssertionError("unreachable")  # the loop returns or raises

    async def healthy(self) -> bool:
        """Whether the upstream answers its model list now, as JSON (a health check: no
        generation). An HTML page, an error or nothing within the check's time is not."""
        if self._client is None:
            return False
        try:
            async with asyncio.timeout(self.health_timeout):
                request = self._client.build_request("GET", "models")
                response = await self._client.send(request, stream=True)
                try:
                    if response.status_code != 200:
                        return False
                    body = bytearray()
                    async for chunk in response.aiter_bytes():
                        body += chunk
                        if len(body) > MODEL_LIST_BYTES:
                            return False
                finally:
                    await response.aclose()
        except (TimeoutError, httpx.HTTPError):
            return False
        return _is_model_list(bytes(body))

    @property
    def where(self) -> str:
        """host:port, for logs and /health (never the path, which may carry a key)."""
        return self._where()

    def _where(self) -> str:
        port = self.url.port or (443 if self.url.scheme == "https" else 80)
        return f"{self.url.host}:{port}"

    async def _trace(self, event: str, info: dict[str, Any]) -> None:
        # httpcore reports connection and request steps here; counting them costs nothing.
        if event == "connection.connect_tcp.complete":
            self.connections_opened += 1
        elif event.endswith(".send_request_headers.complete"):
            self.requests_sent += 1


def chatml_to_messages(prompt: str) -> list[dict[str, str]]:
    """Split a ChatML prompt into chat messages; a non-empty open last turn is kept (prefill).

    Text without ChatML markers becomes one user message.
    """
    head, *turns = prompt.split(IM_START)
    if not turns:
        return [{"role": "user", "content": prompt}]
    messages = []
    if head.strip():
        messages.append({"role": "user", "content": head})
    for turn in turns:
        role, _, rest = turn.partition("\n")
        content, closed, _ = rest.partition(IM_END)
        if closed or content:
            messages.append({"role": role.strip() or "user", "content": content})
    return messages


def event_text(data: str, api: str) -> str:
    """The generated text in one SSE event's JSON, as a ``Piece`` carrying the lowest token
    probability the event reports (None without logprobs); ProviderError when it is not that
    shape."""
    try:
        event = json.loads(data)
    except ValueError as exc:
        raise ProviderError("the upstream sent a malformed event") from exc
    if not isinstance(event, dict):
        raise ProviderError("the upstream sent an event that is not a JSON object")
    if event.get("error"):
        raise ProviderError(f"the upstream failed mid-stream: {_detail(event)}")
    choices = event.get("choices")
    if not choices:
        return ""  # e.g. a usage-only event
    choice = choices[0] if isinstance(choices, list) else None
    if not isinstance(choice, dict):
        raise ProviderError("the upstream sent an event with malformed choices")
    if api == "chat":
        delta = choice.get("delta")
        text = delta.get("content") if isinstance(delta, dict) else None
    else:
        text = choice.get("text")
    if not isinstance(text, str) or not text:
        return ""
    return Piece(text, _confidence(choice.get("logprobs"), api))


def _confidence(logprobs: object, api: str) -> float | None:
    """The lowest token probability in an event's ``logprobs`` (chat: ``content[].logprob``;
    completions: ``token_logprobs[]``); None when absent or not numbers."""
    if not isinstance(logprobs, dict):
        return None
    if api == "chat":
        entries = logprobs.get("content")
        values = (
            [e.get("logprob") for e in entries if isinstance(e, dict)]
            if isinstance(entries, list)
            else []
        )
    else:
        listed = logprobs.get("token_logprobs")
        values = list(listed) if isinstance(listed, list) else []
    numbers = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    if not numbers or len(numbers) != len(values):
        return None
    return min(1.0, math.exp(min(min(numbers), 0.0)))


class SseDecoder:
    """Response bytes in, ``data`` of complete server-sent events out; no I/O.

    Splits lines on CR, LF or CRLF only (httpx's ``aiter_lines`` also splits on U+2028 and
    friends, which JSON may carry unescaped) and joins multi-line data as the SSE spec says. An
    event (every line up to the blank one that ends it) longer than ``max_event_bytes`` is a
    ``ProviderError``: what it holds is bounded by that, however the bytes arrive, and each
    byte is scanned once.
    """

    _LINE_END = re.compile(rb"\r\n|\r|\n")

    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self.max_event_bytes = max_event_bytes
        self._buffer = bytearray()
        self._scanned = 0  # bytes of the buffer known to hold no line end
        self._event_bytes = 0  # bytes of the current event's complete lines
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[str]:
        buffer = self._buffer
        buffer += chunk
        events = []
        start = 0
        while True:
            found = self._LINE_END.search(buffer, max(start, self._scanned))
            # A final CR may be half of a CRLF: decide when the next byte arrives.
            if found is None or (found.group() == b"\r" and found.end() == len(buffer)):
                break
            line = bytes(buffer[start : found.start()])
            self._event_bytes += found.end() - start
            start = found.end()
            data = self._line(line.decode("utf-8", "replace"))
            if data is not None:
                events.append(data)
        del buffer[:start]
        self._scanned = len(buffer) - (1 if buffer.endswith(b"\r") else 0)
        if self._event_bytes + len(buffer) > self.max_event_bytes:
            raise ProviderError(f"the upstream sent an event over {self.max_event_bytes} bytes")
        return events

    def close(self) -> list[str]:
        """Events left at the end of the body (lenient: an unterminated last event counts)."""
        events = self.feed(b"\n\n") if self._buffer or self._data else []
        self._buffer = bytearray()
        self._scanned = 0
        return events

    def _line(self, line: str) -> str | None:
        if not line:
            data, self._data = self._data, []
            self._event_bytes = 0
            return "\n".join(data) if data else None
        field, _, value = line.partition(":")
        if field == "data":  # comments (":...") and other fields carry no tokens
            self._data.append(value.removeprefix(" "))
        return None


class _Answer:
    """What one answer may still carry: bytes on the wire, then pieces of text (``max_tokens``)
    and characters (``MAX_TOKEN_CHARS`` per token). Text past those is cut off."""

    def __init__(self, max_tokens: int) -> None:
        tokens = max(1, max_tokens)
        self.max_bytes = ANSWER_BASE_BYTES + tokens * ANSWER_BYTES_PER_TOKEN
        self.bytes = 0
        self.pieces = 0
        self.max_pieces = tokens
        self.chars_left = tokens * MAX_TOKEN_CHARS
        self._ready: list[str] = []

    @property
    def full(self) -> bool:
        return self.pieces >= self.max_pieces or self.chars_left <= 0

    def count(self, size: int) -> None:
        self.bytes += size
        if self.bytes > self.max_bytes:
            raise ProviderError(
                f"the upstream sent over {self.max_bytes} bytes for {self.max_pieces} tokens"
            )

    def queue(self, text: str) -> None:
        """Take an event's text, or the part of it that may be shown (none once full)."""
        if not text or self.full:
            return
        if len(text) > self.chars_left:
            text = Piece(text[: self.chars_left], confidence_of(text))
        self.chars_left -= len(text)
        self.pieces += 1
        self._ready.append(text)

    def ready(self) -> list[str]:
        """The pieces taken since the last call."""
        ready, self._ready = self._ready, []
        return ready


async def _drain(chunks: AsyncIterator[bytes]) -> None:
    """Read the little left after [DONE] (or the last token wanted) so the connection goes back
    to the pool; an answer that goes on (a flood) is left to be dropped with its connection."""
    read = 0
    with contextlib.suppress(TimeoutError, httpx.HTTPError):
        async with asyncio.timeout(DRAIN_SECONDS):
            async for chunk in chunks:
                read += len(chunk)
                if read > ERROR_BODY_BYTES:
                    return


def _status_error(response: httpx.Response, message: str) -> ProviderUnavailable:
    """An answer that is not a success: 429 and 502-504 say the upstream cannot take requests
    now (down, for its ``Retry-After`` when it gives one); anything else is this request's."""
    status = response.status_code
    if status == 429 or status in DOWN_STATUSES:
        return UpstreamDown(message, retry_after=retry_after(response.headers.get("retry-after")))
    return ProviderUnavailable(message)


def retry_after(value: str | None) -> float | None:
    """A ``Retry-After`` header in seconds from now (delay-seconds or an HTTP date), at most
    ``RETRY_AFTER_MAX_SECONDS``; None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        seconds = float(value[:8])
    else:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            return None
        seconds = when.timestamp() - time.time()
    return min(max(seconds, 0.0), RETRY_AFTER_MAX_SECONDS)


def _is_model_list(body: bytes) -> bool:
    """An OpenAI-style model list (``{"data": [...]}``; Ollama's ``{"models": [...]}``; a bare
    list): an HTML page or anything else from a proxy in front of a dead upstream is not."""
    try:
        listed = json.loads(body)
    except ValueError:
        return False
    if isinstance(listed, dict):
        listed = listed.get("data", listed.get("models"))
    return isinstance(listed, list)


async def _status_message(response: httpx.Response) -> str:
    status = f"{response.status_code} {response.reason_phrase}".strip()
    raw = bytearray()
    with contextlib.suppress(httpx.HTTPError):
        async for chunk in response.aiter_bytes():
            raw += chunk
            if len(raw) > ERROR_BODY_BYTES:
                break
    detail = _detail(bytes(raw))
    if response.status_code in (401, 403):
        # Credential errors may quote the key: log them here, never send them to editors.
        log.warning("upstream refused the credentials: %s %s", status, detail)
        return f"the upstream refused the credentials ({status})"
    log.warning("upstream answered %s: %s", status, detail)
    message = f"the upstream answered {status}"
    if response.status_code == 429 and response.headers.get("retry-after"):
        message += f", retry after {response.headers['retry-after'][:16]}s"
    return f"{message}: {detail}" if detail else message


def _detail(body: bytes | dict[str, Any]) -> str:
    """A short, printable summary of an upstream's error text."""
    found: Any = body
    if isinstance(body, bytes):
        found = body.decode("utf-8", "replace")
        with contextlib.suppress(ValueError):
            found = json.loads(found)
    if isinstance(found, dict):
        for key in ("error", "detail", "message"):
            if found.get(key):
                found = found[key]
                break
        if isinstance(found, dict):
            found = found.get("message", "")
    text = " ".join(str(found).split())
    text = "".join(ch for ch in text if ch.isprintable())
    return text if len(text) <= DETAIL_CHARS else text[: DETAIL_CHARS - 1] + "…"


def build(settings: Any) -> Provider:
    """The ``openai`` provider: the upstreams ``openai_base_url`` names, as a pool. One upstream
    is a pool of one too: its health is checked, it is down (AI degraded, requests refused at
    once) while it does not answer, and back when it does."""
    upstreams = [
        OpenAIProvider(
            url,
            settings.openai_model,
            api_key=settings.openai_api_key,
            api=settings.openai_api,
            timeout=settings.ai_timeout,
            logprobs=settings.ai_stop == "sure",
            first_token_timeout=settings.openai_first_token_timeout,
            idle_timeout=settings.openai_idle_timeout,
        )
        for url in settings.openai_urls
    ]
    return UpstreamPool(
        upstreams,
        routing=settings.ai_routing,
        # One upstream: one generation at a time, as before there were several.
        concurrency=settings.openai_concurrency if len(upstreams) > 1 else 1,
        health_seconds=settings.openai_health_seconds,
    )
