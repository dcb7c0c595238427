"""A socket's request headers as hooks see them (``ConnectionInfo.headers``), decoded on first
read.

The ASGI scope already holds the raw headers for the socket's life; a decoded, lower-cased copy
made up front cost every idle connection ~1 KB, for hooks that mostly never look. This reads
like the dict it replaces (``headers["origin"]``, ``.get``, ``in``, iteration): names
lower-cased, latin-1, the last of repeated names wins.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping


class RequestHeaders(Mapping[str, str]):
    __slots__ = ("_decoded", "_raw")

    def __init__(self, raw: Iterable[tuple[bytes, bytes]]) -> None:
        self._raw = raw
        self._decoded: dict[str, str] | None = None

    def _dict(self) -> dict[str, str]:
        if self._decoded is None:
            self._decoded = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in self._raw}
            self._raw = ()
        return self._decoded

    def __getitem__(self, name: str) -> str:
        return self._dict()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._dict())

    def __len__(self) -> int:
        return len(self._dict())

    def __repr__(self) -> str:
        return f"RequestHeaders({self._dict()!r})"
