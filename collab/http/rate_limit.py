"""Requests per client address to the REST API, as Tiptap Cloud limits its own (100 requests per
5 s per source address, bursts of up to 200): a token bucket per address, refilled at ``limit``
per ``window`` seconds and holding at most ``burst``. A request that finds its bucket empty is
refused with the seconds until it would not be (REST answers 429 with ``Retry-After``); other
addresses are not touched. Knows nothing of HTTP.

The address is what the server was told the client is: behind a reverse proxy that uvicorn
trusts (``--forwarded-allow-ips``), the one it forwards, else the proxy's own (every client
then shares one bucket: trust the proxy). IPv6 addresses count per /64, as the per-address
socket limit counts them (``collab.transport.address_limit``).

Bounded in bytes: each address costs its key and a small entry; past ``max_bytes`` the address
seen longest ago is forgotten, first those whose bucket has refilled (forgetting them loses
nothing). An address forgotten while its bucket was low starts again full: a client with more
addresses than the map holds can pass the limit, and nothing else grows.
"""

from __future__ import annotations

import math
from collections import OrderedDict

from ..transport.address_limit import address_group

# What one address costs beyond its key: the entry, its list of two floats, the dict's slot.
_ENTRY_BYTES = 240
MAX_BYTES = 8 * 1024 * 1024  # about 30,000 addresses


class RequestRate:
    """``limit`` requests per ``window`` seconds per address, ``burst`` at once (0: ``limit``)."""

    def __init__(
        self, limit: int, window: float, burst: int = 0, max_bytes: int = MAX_BYTES
    ) -> None:
        self.limit = limit
        self.window = window
        self.burst = float(burst or limit)
        self.max_bytes = max_bytes
        self.kept_bytes = 0
        self._rate = limit / window  # tokens per second
        # address group -> [tokens left, when they were counted]; least recently seen first
        self._buckets: OrderedDict[str, list[float]] = OrderedDict()

    def wait(self, address: str, now: float) -> int:
        """0 if a request from ``address`` at ``now`` (monotonic seconds) may go ahead (and
        count it), else the whole seconds until one may."""
        if self.limit <= 0:
            return 0
        key = address_group(address)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = [self.burst, now]
            self._buckets[key] = bucket
            self.kept_bytes += _ENTRY_BYTES + len(key)
            self._shrink(now)
        else:
            self._buckets.move_to_end(key)
            bucket[0] = min(self.burst, bucket[0] + (now - bucket[1]) * self._rate)
            bucket[1] = now
        if bucket[0] >= 1.0:
            bucket[0] -= 1.0
            return 0
        return max(1, math.ceil((1.0 - bucket[0]) / self._rate))

    def __len__(self) -> int:
        return len(self._buckets)

    def _shrink(self, now: float) -> None:
        """Forget addresses until the map fits: full buckets first (among the oldest few),
        then the least recently seen."""
        while self.kept_bytes > self.max_bytes and len(self._buckets) > 1:
            victim = next(iter(self._buckets))
            for key, (tokens, since) in _first(self._buckets, 8):
                if tokens + (now - since) * self._rate >= self.burst:
                    victim = key
                    break
            del self._buckets[victim]
            self.kept_bytes -= _ENTRY_BYTES + len(victim)


def _first(buckets: OrderedDict[str, list[float]], count: int) -> list[tuple[str, list[float]]]:
    out = []
    for item in buckets.items():
        out.append(item)
        if len(out) == count:
            break
    return out
