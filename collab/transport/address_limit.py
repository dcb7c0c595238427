"""Open sockets per client address, so one host cannot hold every file descriptor and every
pre-auth budget of the server. Knows nothing of Starlette or protocols.

Loopback counts like any address (tests and ``tether bench`` run from 127.0.0.1: the bench raises
the limit for its own server). Behind a reverse proxy every socket has the proxy's address unless
uvicorn trusts its X-Forwarded-For (``tether serve --forwarded-allow-ips``). IPv6 addresses count
per /64: a host is usually given a whole /64, and could otherwise open a socket from each of its
addresses.
"""

from __future__ import annotations

import ipaddress


class ConnectionsPerAddress:
    def __init__(self, limit: int) -> None:
        self._limit = limit  # 0: no limit
        self._open: dict[str, int] = {}  # only addresses with open sockets: bounded by them

    def enter(self, address: str) -> bool:
        """Count one more socket from ``address``; False (not counted) if it is at the limit."""
        address = address_group(address)
        count = self._open.get(address, 0)
        if self._limit and count >= self._limit:
            return False
        self._open[address] = count + 1
        return True

    def leave(self, address: str) -> None:
        address = address_group(address)
        count = self._open.get(address, 0) - 1
        if count > 0:
            self._open[address] = count
        else:
            self._open.pop(address, None)

    def open_from(self, address: str) -> int:
        return self._open.get(address_group(address), 0)


def address_group(address: str) -> str:
    """What one client is counted as: an IPv4 address itself, an IPv6 address its /64."""
    if ":" not in address:
        return address  # IPv4, a name, or "unknown": the common case costs one test
    try:
        ip = ipaddress.IPv6Address(address.split("%", 1)[0])
    except ValueError:
        return address
    if ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ipaddress.IPv6Network((int(ip) >> 64 << 64, 64)))
