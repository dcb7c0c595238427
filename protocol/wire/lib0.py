"""lib0 binary encoding (varUint, varInt, varUint8Array, varString) as Yjs writes it.

Pure functions over bytes; knows nothing of messages. varString lengths are UTF-8 byte counts
(pycrdt's ``Encoder.write_var_string`` writes the character count, which is why this exists).
"""

from __future__ import annotations

from ..protocol_errors import DecodeError

# A varUint longer than this cannot be a JS safe integer (53 bits needs 8 bytes of 7 bits).
_MAX_VARUINT_BYTES = 8
MAX_SAFE_INTEGER = (1 << 53) - 1


def write_var_uint(value: int) -> bytes:
    if value < 0 or value > MAX_SAFE_INTEGER:
        raise ValueError(f"varUint out of range: {value}")
    out = bytearray()
    while value > 0x7F:
        out.append(0x80 | (value & 0x7F))
        value >>= 7
    out.append(value)
    return bytes(out)


def write_var_int(value: int) -> bytes:
    """lib0 signed varint: first byte holds continuation, sign and 6 bits of magnitude."""
    magnitude = abs(value)
    if magnitude > MAX_SAFE_INTEGER:
        raise ValueError(f"varInt out of range: {value}")
    first = (0x40 if value < 0 else 0) | (magnitude & 0x3F)
    magnitude >>= 6
    if magnitude > 0:
        first |= 0x80
    out = bytearray([first])
    while magnitude > 0:
        byte = magnitude & 0x7F
        magnitude >>= 7
        out.append(byte | (0x80 if magnitude > 0 else 0))
    return bytes(out)


def write_var_uint8_array(data: bytes) -> bytes:
    return write_var_uint(len(data)) + bytes(data)


def write_var_string(text: str) -> bytes:
    return write_var_uint8_array(text.encode("utf-8"))


class Decoder:
    """Reads lib0 values from a bytes buffer; every failure is a ``DecodeError``."""

    __slots__ = ("_data", "_pos")

    def __init__(self, data: bytes | bytearray | memoryview, pos: int = 0) -> None:
        self._data = bytes(data)
        self._pos = pos

    @property
    def pos(self) -> int:
        return self._pos

    def remaining(self) -> int:
        return len(self._data) - self._pos

    def at_end(self) -> bool:
        return self._pos >= len(self._data)

    def read_var_uint(self) -> int:
        data = self._data
        pos = self._pos
        if pos < len(data):
            byte = data[pos]
            if byte < 0x80:  # one byte: most counts, lengths and small clocks
                self._pos = pos + 1
                return byte
        return self._read_long_var_uint()

    def _read_long_var_uint(self) -> int:
        data = self._data
        pos = self._pos
        end = len(data)
        value = 0
        shift = 0
        for _ in range(_MAX_VARUINT_BYTES):
            if pos >= end:
                raise DecodeError("truncated varUint")
            byte = data[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                # Beyond 2**53 - 1 JS loses precision and our encoder refuses the value, so a
                # decoded number must always re-encode.
                if value > MAX_SAFE_INTEGER:
                    raise DecodeError("varUint above 2**53 - 1")
                self._pos = pos
                return value
            shift += 7
        raise DecodeError("varUint longer than 8 bytes")

    def read_var_int(self) -> int:
        if self._pos >= len(self._data):
            raise DecodeError("truncated varInt")
        first = self._data[self._pos]
        self._pos += 1
        negative = bool(first & 0x40)
        value = first & 0x3F
        shift = 6
        more = bool(first & 0x80)
        count = 1
        while more:
            if self._pos >= len(self._data):
                raise DecodeError("truncated varInt")
            if count >= _MAX_VARUINT_BYTES:
                raise DecodeError("varInt longer than 8 bytes")
            byte = self._data[self._pos]
            self._pos += 1
            count += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            more = bool(byte & 0x80)
        if value > MAX_SAFE_INTEGER:
            raise DecodeError("varInt magnitude above 2**53 - 1")
        return -value if negative else value

    def read_bytes(self, length: int) -> bytes:
        end = self._pos + length
        if end > len(self._data):
            raise DecodeError(f"length {length} runs past the end of the frame")
        chunk = self._data[self._pos : end]
        self._pos = end
        return chunk

    def skip(self, length: int) -> None:
        """Move past ``length`` bytes without copying them."""
        if self._pos + length > len(self._data):
            raise DecodeError(f"length {length} runs past the end of the frame")
        self._pos += length

    def read_var_uint8_array(self) -> bytes:
        return self.read_bytes(self.read_var_uint())

    def read_var_string(self) -> str:
        length = self.read_var_uint()
        data = self._data
        pos = self._pos
        end = pos + length
        if end > len(data):
            raise DecodeError(f"length {length} runs past the end of the frame")
        self._pos = end
        try:
            return data[pos:end].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DecodeError("string is not valid UTF-8") from exc

    def read_rest(self) -> bytes:
        chunk = self._data[self._pos :]
        self._pos = len(self._data)
        return chunk
