"""Why a client could not connect, in words: a refused port, a wrong path, a refused upgrade
or a name that does not resolve each say so, instead of a bare ``TimeoutError('')``.

Pure: classifies exceptions the transports raise; knows no sockets.
"""

from __future__ import annotations

import errno
import json
import socket

from websockets.exceptions import InvalidStatus, InvalidURI

from .http_client import SessionRefusedError


class ConnectionFailedError(ConnectionError):
    """The client could not connect within its open timeout; ``str(exc)`` says why, and
    ``permanent`` whether retrying the same URL can help."""

    def __init__(self, message: str, *, permanent: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent


def describe(exc: BaseException) -> tuple[str, bool]:
    """(what happened, whether it is permanent) for one failed connection attempt."""
    for cause in _chain(exc):
        if isinstance(cause, InvalidURI):
            return f"not a WebSocket URL ({cause})", True
        if isinstance(cause, InvalidStatus):
            status = cause.response.status_code
            if status == 404:
                return "no endpoint at that path (HTTP 404): a tether URL ends in /ws", True
            reason = _reason_of(cause.response.body)
            if reason:
                return f"the server refused the WebSocket upgrade (HTTP {status}): {reason}", False
            if status in (401, 403):
                # tether's own refusals carry their reason; a host app's router refuses a
                # WebSocket path it does not route with a bare 403.
                return (
                    f"the server refused the WebSocket upgrade (HTTP {status}) without saying"
                    " why: not a tether endpoint, whose refusals give a reason (a host app"
                    " refuses a WebSocket path it does not route this way: is the path the"
                    " mount's prefix + /ws?), or an older server",
                    False,
                )
            return f"the server answered the upgrade with HTTP {status}", False
        if isinstance(cause, SessionRefusedError):
            return f"the HTTP transport was refused: {cause}", False
        if isinstance(cause, socket.gaierror):
            return f"the host name does not resolve ({cause.strerror})", True
        if isinstance(cause, ConnectionRefusedError) or (
            isinstance(cause, OSError) and cause.errno == errno.ECONNREFUSED
        ):
            return "connection refused: nothing listens on that host and port", False
        if isinstance(cause, TimeoutError):
            return "timed out opening the connection", False
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__, False


def _reason_of(body: bytes | bytearray | None) -> str:
    """The ``{"error": ...}`` a tether refusal's body holds, else ""."""
    if not body or len(body) > 4096:
        return ""
    try:
        reason = json.loads(bytes(body)).get("error", "")
    except (ValueError, AttributeError):
        return ""
    return reason[:300] if isinstance(reason, str) else ""


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen
