"""Webhooks: an HTTP POST to the operator's URL when a document changes or is stored, as
Hocuspocus's webhook extension offers.

An extension (see collab.hooks): ``on_change`` and ``after_store`` arm a per-document timer;
edits within ``debounce`` seconds of each other make one delivery, and a document edited
without pause is still delivered every ``max_wait`` seconds. A delivery is JSON
``{"event", "document", "text", "at"}`` signed with HMAC-SHA256 of the body under the
secret (``Tether-Signature: sha256=<hex>``, as GitHub signs), retried on a network error or a
5xx with backoff. At most one delivery per document and event is pending at a time, so memory
is bounded by the documents loaded, whatever a burst of edits looks like.

Deleting a document (``on_deleted``, here or on another node) cancels what is pending for it, so
its text never reaches the receiver after the delete, and sends a ``delete`` event (``"text"``
empty) when that event is asked for.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from ..config import Settings
from ..content.reading import RICH_NAME
from ..rooms.renders import Renders
from ..runtime.sync_metrics import Metrics

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "Tether-Signature"
EVENT_HEADER = "Tether-Event"
# A webhook extension made without the server's renders keeps its own, this big.
_OWN_RENDERS_BYTES = 8 * 1024 * 1024


def sign(secret: str, body: bytes) -> str:
    """The signature header's value for ``body``; a receiver recomputes and compares it."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


@dataclass
class _Pending:
    """One document's armed delivery for one event."""

    room: Any
    first_at: float
    timer: asyncio.TimerHandle | None = None
    sending: asyncio.Task[None] | None = None
    again: bool = False  # changed while a delivery was under way: deliver once more after


@dataclass
class WebhookExtension:
    url: str
    secret: str = ""
    debounce: float = 2.0
    max_wait: float = 10.0
    attempts: int = 4
    timeout: float = 10.0
    events: tuple[str, ...] = ("change", "store", "delete")
    metrics: Metrics | None = None
    # The text is rendered off the loop, once per state (REST shares them: TetherServer).
    renders: Renders = field(default_factory=lambda: Renders(_OWN_RENDERS_BYTES))
    _pending: dict[tuple[str, str], _Pending] = field(default_factory=dict)
    _deletes: set[asyncio.Task[None]] = field(default_factory=set)
    _client: httpx.AsyncClient | None = None

    @classmethod
    def from_settings(
        cls, settings: Settings, metrics: Metrics, renders: Renders | None = None
    ) -> WebhookExtension | None:
        """The extension ``--webhook-url`` asks for, or None when it is unset."""
        if not settings.webhook_url:
            return None
        return cls(
            settings.webhook_url,
            settings.webhook_secret,
            debounce=settings.webhook_debounce,
            max_wait=max(settings.webhook_debounce * 5, 1.0),
            events=tuple(settings.webhook_events.split(",")),
            metrics=metrics,
            renders=renders or Renders(settings.render_cache_bytes, metrics),
        )

    # ---- hooks ---------------------------------------------------------------------------

    def on_change(self, room: Any, update: bytes, origin: object) -> None:
        self._arm("change", room)

    def after_store(self, room: Any, update: bytes) -> None:
        self._arm("store", room)

    def on_deleted(self, name: str) -> None:
        for event in ("change", "store"):
            pending = self._pending.pop((event, name), None)
            if pending is None:
                continue
            if pending.timer is not None:
                pending.timer.cancel()
            if pending.sending is not None:
                pending.sending.cancel()
        if "delete" in self.events:
            body = json.dumps(
                {"event": "delete", "document": name, "text": "", "at": time.time()}
            ).encode()
            task = asyncio.ensure_future(self._post("delete", name, body))
            self._deletes.add(task)
            task.add_done_callback(self._deletes.discard)

    async def on_unload(self, room: Any) -> None:
        # The document is about to leave memory: send what is armed for it now, with its text.
        for event in self.events:
            pending = self._pending.get((event, room.name))
            if pending is not None and pending.timer is not None:
                pending.timer.cancel()
                pending.timer = None
                await self._deliver(event, room.name)

    async def aclose(self) -> None:
        """Send what is armed (one try each, within ``timeout``), then stop."""
        self.attempts = 1
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.timeout):
                for (event, name), pending in list(self._pending.items()):
                    if pending.timer is not None:
                        pending.timer.cancel()
                        pending.timer = None
                        await self._deliver(event, name)
        for pending in list(self._pending.values()):
            if pending.timer is not None:
                pending.timer.cancel()
            if pending.sending is not None:
                pending.sending.cancel()
                with contextlib.suppress(BaseException):
                    await pending.sending
        self._pending.clear()
        if self._deletes:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.timeout):
                    await asyncio.gather(*self._deletes, return_exceptions=True)
        if self._client is not None:
            await self._client.aclose()

    # ---- debouncing ----------------------------------------------------------------------

    def _arm(self, event: str, room: Any) -> None:
        if event not in self.events or getattr(room, "deleted", False):
            return
        key = (event, room.name)
        now = time.monotonic()
        pending = self._pending.get(key)
        if pending is None:
            pending = self._pending[key] = _Pending(room, now)
        pending.room = room
        if pending.sending is not None:
            pending.again = True
            return
        if pending.timer is not None:
            pending.timer.cancel()
        delay = min(self.debounce, max(0.0, pending.first_at + self.max_wait - now))
        loop = asyncio.get_running_loop()
        pending.timer = loop.call_later(delay, self._fire, event, room.name)

    def _fire(self, event: str, name: str) -> None:
        pending = self._pending.get((event, name))
        if pending is None:
            return
        pending.timer = None
        pending.sending = asyncio.ensure_future(self._deliver(event, name))

    async def _deliver(self, event: str, name: str) -> None:
        key = (event, name)
        pending = self._pending.get(key)
        if pending is None:
            return
        if getattr(pending.room, "deleted", False):  # deleted while its timer ran
            del self._pending[key]
            return
        room = pending.room
        try:
            text = await self._text_json(room)
            if getattr(room, "deleted", False):  # deleted while its text was rendered
                return
            body = b"".join(
                (
                    b'{"event":',
                    json.dumps(event).encode(),
                    b',"document":',
                    json.dumps(name).encode(),
                    b',"text":',
                    text,
                    b',"at":',
                    json.dumps(time.time()).encode(),
                    b"}",
                )
            )
            await self._post(event, name, body)
        finally:
            current = self._pending.get(key)
            if current is pending:
                again, pending.sending, pending.again = pending.again, None, False
                if again:
                    pending.first_at = time.monotonic()
                    self._arm(event, pending.room)
                elif pending.timer is None:
                    del self._pending[key]

    async def _post(self, event: str, name: str, body: bytes) -> None:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self.timeout)
        headers = {"Content-Type": "application/json", EVENT_HEADER: event}
        if self.secret:
            headers[SIGNATURE_HEADER] = sign(self.secret, body)
        delay = 0.5
        for attempt in range(1, self.attempts + 1):
            try:
                reply = await self._client.post(self.url, content=body, headers=headers)
                if reply.status_code < 500:
                    if reply.status_code >= 400:
                        log.warning("webhook %s of %r refused: %d", event, name, reply.status_code)
                        self._count("refused")
                    else:
                        self._count("delivered")
                    return
                problem = f"HTTP {reply.status_code}"
            except httpx.HTTPError as exc:
                problem = type(exc).__name__
            if attempt < self.attempts:
                self._count("retried")
                await asyncio.sleep(delay)  # backoff between attempts, not synchronisation
                delay *= 2
        self._count("failed")
        log.warning(
            "webhook %s of %r failed after %d attempts: %s", event, name, self.attempts, problem
        )

    async def _text_json(self, room: Any) -> bytes:
        """The document's text, rich or plain (``collab.content``), as a JSON string: the
        snapshot taken now, rendered in the renders pool (a delivery waits, never refused)."""
        settings = getattr(room, "settings", None)
        rich_name = getattr(settings, "rich_fragment", RICH_NAME)
        rendered = await self.renders.of_room(room, rich_name, "json", refusable=False)
        return rendered.body

    def _count(self, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.webhooks.labels(outcome).inc()
