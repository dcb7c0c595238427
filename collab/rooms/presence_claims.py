"""Which token subject an awareness client id belongs to, per document, for a while after its
connection left. Knows nothing of rooms, sockets or frames.

Yjs clients pick their own random client id, and every id is visible in the document's updates,
so "first come" lets anyone claim an offline editor's id and silence it when it reconnects (its
provider comes back with the same id). A binding remembers the subject (JWT ``sub``) that last
showed presence under an id; for ``ttl`` seconds after that, a different subject cannot claim
it. Bindings live across unloads of the document (one registry per server), in memory only:
after a restart the first subject to show an id binds it again.

Bounded: at most ``max_claims`` bindings in all and ``max_per_subject`` per subject (one subject
churning ids evicts its own oldest bindings, not other editors'); keys and subjects are stored as
16-byte digests, so a 2 KB document name or a long ``sub`` costs nothing extra.
"""

from __future__ import annotations

import collections
import hashlib

Key = tuple[bytes, int]


def digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


class ClaimRegistry:
    def __init__(self, ttl: float, max_claims: int, max_per_subject: int) -> None:
        self._ttl = ttl
        self._max_claims = max(1, max_claims)
        self._max_per_subject = max(1, max_per_subject)
        # key → (subject digest, last clock, expiry); oldest binding first.
        self._claims: collections.OrderedDict[Key, tuple[bytes, int, float]] = (
            collections.OrderedDict()
        )
        self._by_subject: dict[bytes, collections.OrderedDict[Key, None]] = {}

    def __len__(self) -> int:
        return len(self._claims)

    def holder(self, document: bytes, client_id: int, now: float) -> tuple[bytes, int] | None:
        """(subject digest, last awareness clock) bound to this id, if the binding is current."""
        key = (document, client_id)
        claim = self._claims.get(key)
        if claim is None:
            return None
        if claim[2] <= now:
            self._forget(key)
            return None
        return claim[0], claim[1]

    def bind(self, document: bytes, client_id: int, subject: bytes, clock: int, now: float) -> None:
        """Bind (or re-bind, refreshing its expiry) this id to ``subject`` at ``clock``."""
        key = (document, client_id)
        if key in self._claims:
            self._forget(key)
        self._claims[key] = (subject, clock, now + self._ttl)
        mine = self._by_subject.setdefault(subject, collections.OrderedDict())
        mine[key] = None
        while len(mine) > self._max_per_subject:
            self._forget(next(iter(mine)))
        while len(self._claims) > self._max_claims:
            self._forget(next(iter(self._claims)))

    def _forget(self, key: Key) -> None:
        subject, _, _ = self._claims.pop(key)
        mine = self._by_subject.get(subject)
        if mine is not None:
            mine.pop(key, None)
            if not mine:
                del self._by_subject[subject]
