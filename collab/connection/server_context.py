"""What every connection handler needs from the running server, in one object."""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Protocol

from tether.protocol.sessions.server_session import QueueBudget

from ..auth.tokens import Authenticator
from ..config import Settings
from ..hooks import Hooks
from ..rooms.manager import RoomManager
from ..runtime.sync_metrics import Metrics
from ..storage.store import Store
from ..transport.send_budget import SendBudget


class Transport(Protocol):
    """A message-oriented socket; ``server.py`` adapts Starlette's WebSocket to it."""

    async def receive(self) -> bytes | None:
        """The next binary message; None once the peer has gone. A text message raises
        ``protocol.protocol_errors.DecodeError``."""

    def send(self, data: bytes) -> Awaitable[None]: ...

    async def close(self, code: int, reason: str) -> None: ...


@dataclass(slots=True)
class ServerContext:
    settings: Settings
    authenticator: Authenticator
    rooms: RoomManager
    hooks: Hooks
    metrics: Metrics
    store: Store
    # Shared by every /ws connection: bytes waiting for authentication, all sockets together.
    preauth_budget: QueueBudget = field(default_factory=lambda: QueueBudget(64 * 1024 * 1024))
    # Shared by every connection: bytes queued to send and big answers in flight, together.
    send_budget: SendBudget | None = None


MAX_DOCUMENT_NAME = 512


def valid_document_name(name: str) -> bool:
    """Names are opaque, but not empty, not huge, and free of control characters."""
    return 0 < len(name) <= MAX_DOCUMENT_NAME and all(ch >= " " for ch in name)
