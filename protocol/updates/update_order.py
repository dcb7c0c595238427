"""Cuts one Yjs v1 update into a sequence of updates, each of whose structs depends only on the
document before it and on the updates before it in the sequence: yrs then integrates every struct
as it arrives, never parking one as pending.

Sans-IO and pure. Why: yrs integrates one update client by client in its own order, and a struct
whose origin is in a client it has not integrated yet waits in a pending set that is walked again
as others land. N clients each typing after the one before (any order of ids an attacker picks)
cost O(N²) that way: 32,000 one-character clients, 384 KB, held the loop 1.3 s, and every load
of such a document again (snapshot included; a thread does not help, pycrdt holds the GIL while
yrs applies). Fed in dependency order, as layers, the same structs cost 0.05 s.

A layer is, for each client, the longest run of its next structs whose dependencies (origin,
right origin, parent item, and the client's own previous struct) are in the document or in an
earlier layer; it is encoded as one update of those runs. Clients blocked on another wait for
that client's next layer (each struct is looked at a bounded number of times, so the cut is
linear). The delete set goes with the last layer. Applied one after the other in one
transaction, the layers make exactly the document the update makes. ``None`` when there is
nothing to gain (one client or few) or the update cannot be ordered (a Skip, a dependency on a
later clock): the caller applies it whole, as before.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..wire.lib0 import Decoder, write_var_uint
from .update_scan import ID, read_item_header, skip_content

_GC, _SKIP = 0, 10
# Fewer clients than this in one update: applied whole (yrs' pending set stays small).
MIN_CLIENTS = 64


@dataclass(slots=True)
class _Struct:
    clock: int
    length: int
    raw: bytes
    deps: tuple[ID, ...]


@dataclass(slots=True)
class _Client:
    id: int
    structs: list[_Struct]
    next: int = 0  # index of the first struct not yet in a layer
    done_clock: int = 0  # every clock below it is in an emitted layer (or the document)
    waiting: list[int] = field(default_factory=list)  # clients blocked on this one


def in_dependency_order(update: bytes, min_clients: int = MIN_CLIENTS) -> list[bytes] | None:
    """``update`` as layers to apply in order (see the module docstring), or None."""
    if update and update[0] < min(min_clients, 0x80):
        return None  # the usual update: its client count fits one byte, and it is small
    ordered = _ordered(update, min_clients, skips=False)
    if ordered is None:
        return None
    layers, delete_set = ordered
    # The deletes refer to structs of any layer: they go last, as one more update.
    return [_encode(runs, b"\x00") for runs in layers] + [b"\x00" + delete_set]


def in_slices(update: bytes, max_structs: int, max_bytes: int) -> list[bytes] | None:
    """``update`` as updates of at most ``max_structs`` structs (or delete ranges) and about
    ``max_bytes`` each (a single struct may be bigger), in dependency order: applied one after
    the other, in transactions of their own, they make the document ``update`` makes, and each
    is a bounded amount of work for yrs and the guard. How a big update is applied without
    holding the event loop (``collab.updates.slicing``). Skips are kept (each covers clocks
    the document must already have). None if the update cannot be put in order (no history a
    Yjs client could have made)."""
    ordered = _ordered(update, 0, skips=True)
    if ordered is None:
        return None
    layers, delete_set = ordered
    slices: list[bytes] = []
    # A slice holds each client's structs as one run (an update lists a client once): a run
    # met again in a later layer continues where its last one ended. Its structs may then
    # depend on others later in the same slice; yrs parks those, at a cost bounded by the slice.
    runs: list[tuple[_Client, int, int]] = []
    at: dict[int, int] = {}  # client id → its run's index in ``runs``
    structs = size = 0
    for layer in layers:  # within a layer no struct depends on another client's: cut anywhere
        for client, first, end in layer:
            while first < end:
                if structs >= max_structs or size >= max_bytes:
                    slices.append(_encode(runs, b"\x00"))
                    runs, at, structs, size = [], {}, 0, 0
                stop = first
                while stop < end and structs < max_structs and size < max_bytes:
                    size += len(client.structs[stop].raw)
                    structs += 1
                    stop += 1
                index = at.get(client.id)
                if index is None:
                    at[client.id] = len(runs)
                    runs.append((client, first, stop))
                else:
                    runs[index] = (client, runs[index][1], stop)
                first = stop
    if runs:
        slices.append(_encode(runs, b"\x00"))
    slices += [b"\x00" + part for part in _cut_delete_set(delete_set, max_structs)]
    return slices


def _ordered(
    update: bytes, min_clients: int, *, skips: bool
) -> tuple[list[list[tuple[_Client, int, int]]], bytes] | None:
    """The update's layers (each a list of runs) and its delete set's bytes, or None."""
    read = _read_clients(update, min_clients, skips=skips)
    if read is None:
        return None
    clients, delete_set = read
    layers = _layers(clients)
    return None if layers is None else (layers, delete_set)


def _read_clients(
    update: bytes, min_clients: int, *, skips: bool
) -> tuple[dict[int, _Client], bytes] | None:
    """Each client's structs and the delete set's bytes; None when there are fewer than
    ``min_clients`` clients or a struct cannot be ordered."""
    d = Decoder(update)
    count = d.read_var_uint()
    if count < min_clients:
        return None
    clients: dict[int, _Client] = {}
    for _ in range(count):
        structs_count = d.read_var_uint()
        client = d.read_var_uint()
        clock = d.read_var_uint()
        structs = []
        for _ in range(structs_count):
            struct = _read_struct(d, update, clock, skips)
            if struct is None:
                return None
            structs.append(struct)
            clock += struct.length
        if client in clients or not structs:
            return None
        clients[client] = _Client(client, structs, done_clock=structs[0].clock)
    return clients, update[d.pos :]


def _cut_delete_set(delete_set: bytes, max_ranges: int) -> list[bytes]:
    """The delete set as delete sets of at most ``max_ranges`` ranges each (none if empty)."""
    d = Decoder(delete_set)
    ranges: list[tuple[int, int, int]] = []
    for _ in range(d.read_var_uint()):
        client = d.read_var_uint()
        for _ in range(d.read_var_uint()):
            clock = d.read_var_uint()
            ranges.append((client, clock, d.read_var_uint()))
    parts: list[bytes] = []
    for begin in range(0, len(ranges), max(1, max_ranges)):
        by_client: dict[int, list[bytes]] = {}
        for client, clock, length in ranges[begin : begin + max_ranges]:
            by_client.setdefault(client, []).append(write_var_uint(clock) + write_var_uint(length))
        out = [write_var_uint(len(by_client))]
        for client, encoded in by_client.items():
            out += [write_var_uint(client), write_var_uint(len(encoded)), *encoded]
        parts.append(b"".join(out))
    return parts


def _read_struct(d: Decoder, update: bytes, clock: int, skips: bool = False) -> _Struct | None:
    start = d.pos
    info = d.read_bytes(1)[0]
    kind = info & 0x1F
    if kind == _SKIP:
        if not skips:
            return None  # a gap: let yrs judge it whole
        length = d.read_var_uint()
        return _Struct(clock, length, update[start : d.pos], ())
    if kind == _GC:
        length = d.read_var_uint()
        return _Struct(clock, length, update[start : d.pos], ())
    origin, right_origin, _, parent_id, _ = read_item_header(d, info)
    length = skip_content(d, kind)
    deps = tuple(dep for dep in (origin, right_origin, parent_id) if dep is not None)
    return _Struct(clock, length, update[start : d.pos], deps)


def _layers(clients: dict[int, _Client]) -> list[list[tuple[_Client, int, int]]] | None:
    """Each layer as its runs: (client, first struct index, end index)."""
    ready = list(clients.values())
    layers: list[list[tuple[_Client, int, int]]] = []
    remaining = sum(len(c.structs) for c in ready)
    while ready:
        runs: list[tuple[_Client, int, int]] = []  # client, first index, end index
        for client in ready:
            first = client.next
            end = _runnable_end(client, clients)
            if end > first:
                runs.append((client, first, end))
        if not runs:
            return None  # nothing can move: not a history yrs could integrate either
        woken: dict[int, _Client] = {}
        for client, first, end in runs:  # the layer's clocks count only from the next layer
            client.next = end
            last = client.structs[end - 1]
            client.done_clock = last.clock + last.length
            remaining -= end - first
            if end < len(client.structs):
                woken[client.id] = client  # it may go on next layer, or block again there
            for waiter in client.waiting:
                woken[waiter] = clients[waiter]
            client.waiting = []
        layers.append(runs)
        ready = [c for c in woken.values() if c.next < len(c.structs)]
    if remaining:
        return None
    return layers


def _runnable_end(client: _Client, clients: dict[int, _Client]) -> int:
    """How far this client's structs may go in this layer: each dependency is before this
    struct in its own client, or in the document (a client not in the update), or in a layer
    already emitted. A struct blocked on another client registers this client as its waiter."""
    structs = client.structs
    index = client.next
    own_clock = structs[index].clock if index < len(structs) else 0
    while index < len(structs):
        struct = structs[index]
        for dep_client, dep_clock in struct.deps:
            if dep_client == client.id:
                if dep_clock >= own_clock:
                    return index  # a dependency on a later clock of its own: never runnable
                continue
            other = clients.get(dep_client)
            if other is None or dep_clock < other.structs[0].clock:
                continue  # in the document already (the guard checked it is)
            if dep_clock >= other.done_clock:
                other.waiting.append(client.id)
                return index
        own_clock = struct.clock + struct.length
        index += 1
    return index


def _encode(runs: list[tuple[_Client, int, int]], delete_set: bytes) -> bytes:
    out = [write_var_uint(len(runs))]
    for client, first, end in runs:
        structs = client.structs[first:end]
        out += [write_var_uint(len(structs)), write_var_uint(client.id)]
        out.append(write_var_uint(structs[0].clock))
        out += [s.raw for s in structs]
    out.append(delete_set)
    return b"".join(out)
