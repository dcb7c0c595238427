"""The key-value metadata at the head of a GGUF model file (the tokenizer's vocabulary and merges
among it), read in pure Python: the server needs the tokenizer, not the model, and must not
load llama.cpp to get it.

Format (GGUF v2/v3, little-endian): magic ``GGUF``, u32 version, u64 tensor count, u64
key-value count, then each key (u64 length + UTF-8) with a u32 value type and its value;
strings are u64 length + UTF-8, arrays a u32 element type, a u64 count and the elements. The
tensor data after it is never read. Every length is checked against what is left of the file,
so a damaged or hostile file fails with ``GgufError`` instead of a huge allocation.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any, BinaryIO

MAGIC = b"GGUF"
STRING, ARRAY = 8, 9
# Value type -> struct format: u8 i8 u16 i16 u32 i32 f32 bool, then u64 i64 f64.
SCALARS = dict(zip((0, 1, 2, 3, 4, 5, 6, 7, 10, 11, 12), "BbHhIif?Qqd", strict=True))
MAX_KEYS = 4096


class GgufError(ValueError):
    """Not a GGUF file this reader understands."""


def read_metadata(path: Path, keys: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The file's metadata (only ``keys``, when given: the rest is skipped, not decoded)."""
    with path.open("rb") as file:
        size = path.stat().st_size
        return _Reader(file, size).metadata(None if keys is None else set(keys))


class _Reader:
    def __init__(self, file: BinaryIO, size: int) -> None:
        self._file = file
        self._left = size

    def metadata(self, wanted: set[str] | None) -> dict[str, Any]:
        if self._read(4) != MAGIC:
            raise GgufError("not a GGUF file")
        (version,) = self._unpack("I")
        if version not in (2, 3):
            raise GgufError(f"GGUF version {version} is not supported")
        _tensors, count = self._unpack("QQ")
        if count > MAX_KEYS:
            raise GgufError(f"{count} metadata keys")
        found: dict[str, Any] = {}
        for _ in range(count):
            key = self._string()
            (kind,) = self._unpack("I")
            take = wanted is None or key in wanted
            found_value = self._value(kind, take)
            if take:
                found[key] = found_value
        return found

    def _value(self, kind: int, take: bool) -> Any:
        if kind == STRING:
            return self._string(take)
        if kind == ARRAY:
            element, count = self._unpack("IQ")
            if element == STRING:
                items = [self._string(take) for _ in range(self._count(count, 8))]
                return items if take else None
            fmt = self._scalar(element)
            width = struct.calcsize(fmt)
            data = self._read(width * self._count(count, width))
            return list(struct.unpack(f"<{count}{fmt}", data)) if take else None
        return self._unpack(self._scalar(kind))[0]

    def _scalar(self, kind: int) -> str:
        fmt = SCALARS.get(kind)
        if fmt is None:
            raise GgufError(f"unknown value type {kind}")
        return fmt

    def _count(self, count: int, least_bytes: int) -> int:
        if count * least_bytes > self._left:
            raise GgufError("an array longer than the file")
        return count

    def _string(self, take: bool = True) -> str:
        (length,) = self._unpack("Q")
        data = self._read(length)
        return data.decode("utf-8", "replace") if take else ""

    def _unpack(self, fmt: str) -> tuple[Any, ...]:
        return struct.unpack(f"<{fmt}", self._read(struct.calcsize(f"<{fmt}")))

    def _read(self, length: int) -> bytes:
        if length > self._left:
            raise GgufError("the file ends inside its metadata")
        data = self._file.read(length)
        if len(data) != length:
            raise GgufError("the file ends inside its metadata")
        self._left -= length
        return data
