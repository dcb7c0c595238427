"""The HTTP protocol ``tether serve`` runs: uvicorn's httptools protocol, with a deadline for a
request's headers and a bound on connections that have not sent them yet.

uvicorn waits for a request's headers as long as the client likes and counts nothing, so a
client that opens connections and sends a header line every few seconds held them all: 1,100
such connections from one address used up the process's file descriptors and ``/health``
failed (issue 26, finding 7). Here a request's headers must be complete within
``header_timeout`` seconds of its first byte (of the connection, for the first request), and
the connections still waiting for their first request's headers are counted per client (IPv6
per /64) and in all: past ``per_address`` or ``total`` a new one is closed at once. WebSockets
and HTTP requests under way are not counted here: their own limits apply once the headers say
what they are. Knows nothing of the app.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from .address_limit import ConnectionsPerAddress

log = logging.getLogger("tether")

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as _Base
except ImportError:  # pragma: no cover - uvicorn[standard] brings httptools everywhere
    _Base = None  # type: ignore[assignment, misc]


class HeaderLimits:
    """Shared by every connection of one server."""

    def __init__(self, header_timeout: float, per_address: int, total: int) -> None:
        self.header_timeout = header_timeout
        self.total = total
        self.waiting = 0
        self.per_address = ConnectionsPerAddress(per_address)
        self.refused = 0
        self.timed_out = 0
        self._logged = False

    def enter(self, address: str) -> bool:
        if (self.total and self.waiting >= self.total) or not self.per_address.enter(address):
            self.refused += 1
            if not self._logged:  # once: a flood must not become a flood of log lines
                self._logged = True
                log.warning(
                    "refusing connections that have not sent their headers yet (from %s;"
                    " %d wait in all); further refusals are counted, not logged",
                    address,
                    self.waiting,
                )
            return False
        self.waiting += 1
        return True

    def leave(self, address: str) -> None:
        self.waiting -= 1
        self.per_address.leave(address)


def guarded_http_protocol(limits: HeaderLimits) -> type[asyncio.Protocol] | None:
    """uvicorn's ``http=`` class for these limits, or None where httptools is missing (uvicorn
    then runs its own, unguarded)."""
    if _Base is None:
        return None

    class GuardedHttpProtocol(_Base):  # type: ignore[misc, valid-type]
        _limits = limits

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._header_deadline: asyncio.TimerHandle | None = None
            self._counted: str | None = None  # the address it is counted under, while it is

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            address = self.client[0] if self.client else "unknown"
            if not self._limits.enter(address):
                transport.close()
                return
            self._counted = address
            self._arm()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            if self._header_deadline is None:
                self._arm()  # a later request on a kept-alive connection: its headers too

        def on_headers_complete(self) -> None:
            self._disarm()
            self._uncount()
            super().on_headers_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            self._uncount()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._header_deadline = self.loop.call_later(
                self._limits.header_timeout, self._headers_too_slow
            )

        def _disarm(self) -> None:
            if self._header_deadline is not None:
                self._header_deadline.cancel()
                self._header_deadline = None

        def _uncount(self) -> None:
            if self._counted is not None:
                self._limits.leave(self._counted)
                self._counted = None

        def _headers_too_slow(self) -> None:
            self._header_deadline = None
            self._limits.timed_out += 1
            self.transport.close()

    return GuardedHttpProtocol
