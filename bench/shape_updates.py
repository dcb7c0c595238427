"""Adversarial Yjs v1 updates, written byte by byte: shapes whose cost in yrs is superlinear in
their size unless the server re-encodes or refuses them (issue 26). Used by ``tether bench
shapes`` and by the tests that send them to a real server.

Each builder returns a ``Shape``: the updates a document holds first (``setup``) and the one
update an attacker sends (``attack``). Pure bytes; knows nothing of rooms or sockets.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tether.protocol.wire.lib0 import write_var_string, write_var_uint

# Client ids as a browser picks them (32-bit random): four or five bytes each as a varUint.
OWNER = 2_903_771_515
ATTACKER = 3_141_592_653
TEXT = "content"
LIST = "list"

_STRING, _ANY, _DELETED = 4, 8, 1
_ORIGIN, _RIGHT = 0x80, 0x40
_MAP_KEY = 0x20  # an item that is a map entry: its key follows its parent


@dataclass(frozen=True, slots=True)
class Shape:
    name: str
    setup: list[bytes]
    attack: bytes


def item(
    kind: int,
    content: bytes,
    *,
    origin: tuple[int, int] | None = None,
    right: tuple[int, int] | None = None,
    root: str | None = None,
) -> bytes:
    """One item struct: info byte, origins (or the root it hangs under), content."""
    info = kind | (_ORIGIN if origin else 0) | (_RIGHT if right else 0)
    out = bytes([info])
    if origin:
        out += write_var_uint(origin[0]) + write_var_uint(origin[1])
    if right:
        out += write_var_uint(right[0]) + write_var_uint(right[1])
    if origin is None and right is None:
        out += write_var_uint(1) + write_var_string(root or TEXT)
    return out + content


def string(text: str) -> bytes:
    return write_var_string(text)


def any_integer(value: int) -> bytes:
    """``ContentAny`` holding one small integer."""
    return write_var_uint(1) + bytes([125]) + write_var_uint(value & 0x3F)


def update(
    clients: Sequence[tuple[int, int, list[bytes]]],
    deletes: Sequence[tuple[int, list[tuple[int, int]]]] = (),
) -> bytes:
    """A v1 update: each client's structs from a start clock, then the delete set."""
    out = [write_var_uint(len(clients))]
    for client, clock, structs in clients:
        out += [write_var_uint(len(structs)), write_var_uint(client), write_var_uint(clock)]
        out += structs
    out.append(write_var_uint(len(deletes)))
    for client, ranges in deletes:
        out += [write_var_uint(client), write_var_uint(len(ranges))]
        out += [write_var_uint(start) + write_var_uint(length) for start, length in ranges]
    return b"".join(out)


def chained(client: int, units: list[bytes], kind: int, root: str, lengths: list[int]) -> bytes:
    """One client's items, each continuing the one before (what a Yjs client sends as ONE)."""
    structs = []
    clock = 0
    for content, length in zip(units, lengths, strict=True):
        origin = (client, clock - 1) if clock else None
        structs.append(item(kind, content, origin=origin, root=root))
        clock += length
    return update([(client, 0, structs)])


def unmerged_run(n: int, char: str = "a") -> Shape:
    """N one-character items of one client in a row: yrs recounts the run on each merge."""
    width = len(char.encode("utf-16-le")) // 2
    attack = chained(ATTACKER, [string(char)] * n, _STRING, TEXT, [width] * n)
    return Shape("run" if char == "a" else "run-emoji", [], attack)


def unmerged_any_run(n: int) -> Shape:
    """N one-value ``ContentAny`` items of one client in a row (an array's items)."""
    values = [any_integer(i) for i in range(n)]
    return Shape("any-run", [], chained(ATTACKER, values, _ANY, LIST, [1] * n))


def long_item(length: int, client: int = OWNER) -> bytes:
    """One pasted item of ``length`` characters: the long item a fragmenting update cuts."""
    return update([(client, 0, [item(_STRING, string("a" * length))])])


def fragmenting_deletes(n: int) -> Shape:
    """N one-character delete ranges, one every other character, over one long item."""
    ranges = [(2 * i, 1) for i in range(n)]
    return Shape("frag-delete", [long_item(4 * n)], update([], [(OWNER, ranges)]))


def fragmenting_inserts(n: int) -> Shape:
    """N one-character items, each between two characters of one long item."""
    structs = [
        item(_STRING, string("b"), origin=(OWNER, 2 * i), right=(OWNER, 2 * i + 1))
        for i in range(n)
    ]
    # Each item of its own (origin elsewhere): nothing to merge, every one splits the long item.
    return Shape("frag-insert", [long_item(4 * n)], update([(ATTACKER, 0, structs)]))


def typed_backwards(n: int) -> bytes:
    """A document of n characters each typed at the very start: every item hangs on the one
    typed before it as its right origin, and no history says how two of them are ordered."""
    structs = [item(_STRING, string("a"))]
    structs += [item(_STRING, string("a"), right=(OWNER, i - 1)) for i in range(1, n)]
    return update([(OWNER, 0, structs)])


def backwards_pairs(n: int, pairs: int | None = None) -> Shape:
    """A document of n characters typed backwards, and one update of ``pairs`` (n/4) items each
    hanging between two of its characters three apart, which history cannot order (each once
    needed a walk of the whole sequence; neighbours one or two apart are settled by their right
    origins)."""
    pairs = pairs or max(1, n // 4)
    step = max(1, (n - 4) // pairs)
    structs = [
        item(_STRING, string("x"), origin=(OWNER, j), right=(OWNER, j - 3))
        for j in range(3, n, step)
    ][:pairs]
    return Shape("backwards", [typed_backwards(n)], update([(ATTACKER, 0, structs)]))


def many_clients(n: int) -> Shape:
    """N clients with one character each, each typed after the one before."""
    base = 1_000_000
    clients = [(base, 0, [item(_STRING, string("a"))])]
    clients += [
        (base + i, 0, [item(_STRING, string("a"), origin=(base + i - 1, 0))]) for i in range(1, n)
    ]
    return Shape("many-clients", [], update(clients))


def map_entries(n: int) -> Shape:
    """N keys of one root map, each set once by one client in one update: nothing to merge or
    cut, linear in yrs, but every struct costs the server's Python per item on the loop."""
    structs = [
        bytes([_ANY | _MAP_KEY])
        + write_var_uint(1)
        + write_var_string("m")
        + write_var_string(f"k{i}")
        + any_integer(i)
        for i in range(n)
    ]
    return Shape("map-entries", [], update([(ATTACKER, 0, structs)]))


def many_roots(n: int) -> Shape:
    """One character under each of N root types: N shared types made by one update."""
    structs = [item(_STRING, string("a"), root=f"r{i}") for i in range(n)]
    return Shape("many-roots", [], update([(ATTACKER, 0, structs)]))


def mixture(n: int) -> Shape:
    """A run, fragmenting deletes and fragmenting inserts in one update."""
    third = max(1, n // 3)
    run = [item(_STRING, string("a"), root=TEXT)]
    run += [item(_STRING, string("a"), origin=(ATTACKER, i - 1)) for i in range(1, third)]
    splits = [
        item(_STRING, string("b"), origin=(OWNER, 4 * i), right=(OWNER, 4 * i + 1))
        for i in range(third)
    ]
    deletes = [(4 * i + 2, 1) for i in range(third)]
    attack = update([(ATTACKER, 0, run + splits)], [(OWNER, deletes)])
    return Shape("mixture", [long_item(4 * n)], attack)


def paste(n: int) -> Shape:
    """Control: one honest item of n characters (what a Yjs client sends for a paste)."""
    return Shape("paste", [], long_item(n, ATTACKER))


SHAPES: dict[str, Callable[[int], Shape]] = {
    "run": unmerged_run,
    "run-emoji": lambda n: unmerged_run(n, "\N{GRINNING FACE}"),
    "any-run": unmerged_any_run,
    "frag-delete": fragmenting_deletes,
    "frag-insert": fragmenting_inserts,
    "backwards": backwards_pairs,
    "many-clients": many_clients,
    "map-entries": map_entries,
    "many-roots": many_roots,
    "mixture": mixture,
    "paste": paste,
}
