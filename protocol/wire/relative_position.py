"""Yjs relative positions (``Y.encodeRelativePosition``) as plain values, and back.

A relative position names a place in a sequence by the item next to it, so it survives
concurrent edits: ``item`` is the character (or child) the place sticks to, the one after it
for ``assoc >= 0`` and the one before it for ``assoc < 0``. Where there is no such item (an
empty type, or its very start or end), it names the type itself: ``tname`` for a root type,
``type_id`` for a nested one (a ``Y.XmlText`` inside a paragraph, say).

Format (lib0): a varUint tag, 0 then the item's ID, 1 then the root's name, 2 then the type's
ID; then an optional varInt assoc (0 when absent). Sans-IO and pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..protocol_errors import DecodeError
from .lib0 import Decoder, write_var_int, write_var_string, write_var_uint

ID = tuple[int, int]  # (client, clock)

_ITEM, _ROOT, _TYPE = 0, 1, 2
MAX_ENCODED_BYTES = 1024  # an ID is two varUints; a root name is a short string


@dataclass(frozen=True, slots=True)
class RelativePosition:
    item: ID | None = None
    tname: str | None = None
    type_id: ID | None = None
    assoc: int = 0

    def encode(self) -> bytes:
        if self.item is not None:
            head = write_var_uint(_ITEM) + _id(self.item)
        elif self.tname is not None:
            head = write_var_uint(_ROOT) + write_var_string(self.tname)
        elif self.type_id is not None:
            head = write_var_uint(_TYPE) + _id(self.type_id)
        else:
            raise ValueError("a relative position names an item, a root or a type")
        return head + write_var_int(self.assoc)


def decode_relative_position(data: bytes) -> RelativePosition:
    """The position ``data`` encodes; ``DecodeError`` (safe to show) if it is not one."""
    if len(data) > MAX_ENCODED_BYTES:
        raise DecodeError("a relative position is at most 1 KiB")
    decoder = Decoder(data)
    tag = decoder.read_var_uint()
    item = tname = type_id = None
    if tag == _ITEM:
        item = (decoder.read_var_uint(), decoder.read_var_uint())
    elif tag == _ROOT:
        tname = decoder.read_var_string()
    elif tag == _TYPE:
        type_id = (decoder.read_var_uint(), decoder.read_var_uint())
    else:
        raise DecodeError(f"unknown relative position kind {tag}")
    assoc = decoder.read_var_int() if not decoder.at_end() else 0
    if not decoder.at_end():
        raise DecodeError("trailing bytes after the relative position")
    return RelativePosition(item, tname, type_id, assoc)


def _id(ident: ID) -> bytes:
    return write_var_uint(ident[0]) + write_var_uint(ident[1])
