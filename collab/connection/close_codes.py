"""The one place that maps what went wrong on a connection to a WebSocket close code and reason.

Reasons are our own words; third-party exception text never reaches the peer. Codes 4400-4499
make y-websocket clients stop reconnecting, so only permanent refusals use them.
"""

from __future__ import annotations

from tether.protocol.protocol_errors import (
    DecodeError,
    FrameTooLarge,
    ProtocolError,
    QueueBudgetExhausted,
    QueueOverflow,
    SessionViolation,
    UnknownMessageType,
)

from ..rooms.room import InvalidUpdate
from ..transport.outbox import SlowConsumer

NORMAL = 1000
GOING_AWAY = 1001
PROTOCOL_ERROR = 1002
POLICY_VIOLATION = 1008
MESSAGE_TOO_BIG = 1009
INTERNAL_ERROR = 1011
TRY_AGAIN_LATER = 1013
IDLE_TIMEOUT = 4000
AUTH_TIMEOUT = 4001
TOKEN_EXPIRED = 4002  # transient: the client may come back with a fresh token
UNAUTHORIZED = 4401  # permanent: the token in the URL will not get better by retrying
FORBIDDEN = 4403
DOCUMENT_DELETED = 4410  # permanent ("Gone"): reconnecting would push the old state back

_MAX_REASON_BYTES = 123  # the WebSocket limit for a close reason


def close_for(exc: BaseException) -> tuple[int, str]:
    """(code, reason) for an error that ends one connection."""
    if isinstance(exc, FrameTooLarge):
        return MESSAGE_TOO_BIG, "frame too large"
    if isinstance(exc, QueueBudgetExhausted):
        return TRY_AGAIN_LATER, "server busy: too many messages waiting for authentication"
    if isinstance(exc, QueueOverflow):
        return POLICY_VIOLATION, "too many messages before authentication"
    if isinstance(exc, SessionViolation):
        return POLICY_VIOLATION, _clip(str(exc))
    if isinstance(exc, DecodeError | UnknownMessageType):
        return PROTOCOL_ERROR, _clip(f"protocol error: {exc}")
    if isinstance(exc, ProtocolError):
        return PROTOCOL_ERROR, "protocol error"
    if isinstance(exc, InvalidUpdate):
        return PROTOCOL_ERROR, _clip(f"invalid update: {exc}")
    if isinstance(exc, SlowConsumer):
        return TRY_AGAIN_LATER, _clip(f"slow consumer: {exc or 'send queue overflowed'}")
    return INTERNAL_ERROR, "internal error"


def _clip(reason: str) -> str:
    raw = reason.encode("utf-8")[:_MAX_REASON_BYTES]
    return raw.decode("utf-8", errors="ignore")
