"""Consistent hashing with bounded loads (Mirrokni, Thorup and Zadimoghaddam, 2018): which
upstream serves a key.

Each upstream sits on a hash ring at many points. A key goes to the first upstream clockwise
from its hash that is usable and not over its bound, ``ceil((1 + slack) * (load + 1) / n)``
requests in flight, where load is the total in flight and n the usable upstreams. So a key
keeps its upstream (and that upstream's warm prompt prefix) while the upstream is up and not
overloaded; when it is, the key spills to the next upstream on the ring, always the same one;
and adding or losing an upstream moves only the keys that were on it. Pure: no I/O, no clock.
"""

from __future__ import annotations

import bisect
import hashlib
import math
from collections.abc import Collection, Mapping

POINTS_PER_UPSTREAM = 64
DEFAULT_SLACK = 0.25


def _hash(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big")


class BoundedRing:
    def __init__(
        self,
        names: Collection[str],
        *,
        points: int = POINTS_PER_UPSTREAM,
        slack: float = DEFAULT_SLACK,
    ) -> None:
        if not names:
            raise ValueError("a ring needs at least one upstream")
        if slack <= 0:
            raise ValueError("slack must be above 0 (0 would refuse every request at equal loads)")
        self.names = tuple(names)
        self.slack = slack
        ring = sorted((_hash(f"{name}#{i}"), name) for name in self.names for i in range(points))
        self._hashes = [point for point, _name in ring]
        self._owners = [name for _point, name in ring]

    def order(self, key: str) -> list[str]:
        """Every upstream, in the order ``key`` tries them (clockwise from its hash)."""
        start = bisect.bisect(self._hashes, _hash(key))
        seen: list[str] = []
        count = len(self._owners)
        for step in range(count):
            name = self._owners[(start + step) % count]
            if name not in seen:
                seen.append(name)
                if len(seen) == len(self.names):
                    break
        return seen

    def bound(self, loads: Mapping[str, int], usable: Collection[str]) -> int:
        """The most requests in flight one usable upstream may hold, with one more coming."""
        total = sum(loads.get(name, 0) for name in usable) + 1
        return max(1, math.ceil((1 + self.slack) * total / max(1, len(usable))))

    def pick(
        self,
        key: str,
        loads: Mapping[str, int],
        usable: Collection[str],
    ) -> str | None:
        """The upstream for ``key``: its first usable one under the bound; None if none is
        usable."""
        usable = [name for name in self.names if name in usable]
        if not usable:
            return None
        bound = self.bound(loads, usable)
        candidates = [name for name in self.order(key) if name in usable]
        for name in candidates:
            if loads.get(name, 0) < bound:
                return name
        return candidates[0]  # cannot happen with slack > 0; kept total for safety
