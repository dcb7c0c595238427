"""Open sockets per client address, so one host cannot hold every file descriptor and every
pre-auth budget of the server. Knows nothing of Starlette or protocols.

Loopback counts like any address (tests and ``tether bench`` run from 127.0.0.1: the bench raises
the limit for its own server). Behind a reverse proxy every socket has the proxy's address unless
uvicorn trusts its X-Forwarded-For (``--forwarded-allow-ips``); raise the limit or set 0 there.
"""

from __future__ import annotations


class ConnectionsPerAddress:
    def __init__(self, limit: int) -> None:
        self._limit = limit  # 0: no limit
        self._open: dict[str, int] = {}  # only addresses with open sockets: bounded by them

    def enter(self, address: str) -> bool:
        """Count one more socket from ``address``; False (not counted) if it is at the limit."""
        count = self._open.get(address, 0)
        if self._limit and count >= self._limit:
            return False
        self._open[address] = count + 1
        return True

    def leave(self, address: str) -> None:
        count = self._open.get(address, 0) - 1
        if count > 0:
            self._open[address] = count
        else:
            self._open.pop(address, None)

    def open_from(self, address: str) -> int:
        return self._open.get(address, 0)
