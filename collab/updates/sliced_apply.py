"""A big update applied to its document on the event loop, slice by slice (``slicing`` cut it in
a worker thread), the slices of every room taking turns. Knows nothing of peers, acks or
storage: what it asks of the room is ``SliceTarget``, and what follows the last slice (the
broadcast, the store, the ack) is the room's ``then``.

While the slices go in, the document holds part of the update, which nobody may read, build on
or store: the room is held (as during a rebuild) from the first slice until the whole update has
been handed on. The work runs to its end even if whoever asked goes away meanwhile: stopping
halfway would leave part of the update in the document. A slice refused after others were
applied leaves part of it there too; the room then rebuilds the document from storage (nothing
of the update was broadcast or stored).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from typing import Protocol

from pycrdt import Doc

from .applying import apply_update
from .guard import Spend, UpdateGuard, check_applied_origin_order, check_origin_order
from .slicing import SlicedUpdate

# The slices of every room take turns, one at a time, each followed by a turn of the loop of at
# least this long: with five big imports applying at once, the loop waited out a slice per room,
# back to back, between its other work; now one. Measured (six 64 KiB Markdown imports, /health
# every 10 ms, medians of 4): p99 60 -> 33 ms, max 74 -> 52 ms.
_BETWEEN_SLICES_S = 0.001
_SLICE_TURNS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
    weakref.WeakKeyDictionary()
)


class SliceTarget(Protocol):
    """What applying slices asks of the room they go into."""

    @property
    def doc(self) -> Doc: ...

    @property
    def guard(self) -> UpdateGuard: ...

    def hold(self) -> None:
        """Turn updates, state vectors, joiners, readers and folds away, as a rebuild does."""

    def release(self, *, resync: bool = True) -> None:
        """End ``hold``; with ``resync`` the peers turned away meanwhile are asked to resend."""

    def rebuild(self) -> None:
        """Rebuild the document from storage: it may hold part of a refused update."""


async def apply_sliced(
    target: SliceTarget,
    sliced: SlicedUpdate,
    origin: object,
    then: Callable[[], asyncio.Future[int]],
) -> asyncio.Future[int]:
    """Hold ``target``, apply the slices with ``origin``, then ``then()`` (broadcast, store and
    ack the update whole, as any other) before the hold ends. Returns what ``then`` returned
    (the store's future); raises ``UpdateRefused`` or ``InvalidUpdate`` as the guard or yrs
    refused a slice, the hold released and, if a slice went in, the document rebuilt."""
    target.hold()
    work = _apply_then(target, sliced, origin, then)
    return await asyncio.shield(asyncio.ensure_future(work))


async def _apply_then(
    target: SliceTarget,
    sliced: SlicedUpdate,
    origin: object,
    then: Callable[[], asyncio.Future[int]],
) -> asyncio.Future[int]:
    await _apply_each_slice(target, sliced, origin)
    written = then()
    target.release()
    return written


async def _apply_each_slice(target: SliceTarget, sliced: SlicedUpdate, origin: object) -> None:
    """Each slice checked, applied and admitted as an update of its own, the loop free between
    them. The budgets meant per update (cuts, walks) are shared by its slices: ``spent``. Rooms
    take turns (``_slice_turns``): a slice, then the loop's turn, then the next room's."""
    applied = False
    spent = Spend()
    turns = _slice_turns()
    try:
        for piece, scan in sliced.slices:
            async with turns:
                parents = target.guard.check(scan, spent=spent)
                pairs = check_origin_order(target.doc, scan, target.guard, spent)
                applied = True
                apply_update(target.doc, piece, origin=origin, layers=[piece])  # in order
                if pairs:
                    check_applied_origin_order(target.doc, pairs)
                target.guard.admit(scan, parents)
                # Held meanwhile: the loop's turn, timers too, before any room's next slice.
                await asyncio.sleep(_BETWEEN_SLICES_S)
    except BaseException:
        target.release(resync=not applied)
        if applied:
            target.rebuild()
        raise


def _slice_turns() -> asyncio.Lock:
    """This event loop's turnstile for slices (a process serves from one; tests run many)."""
    loop = asyncio.get_running_loop()
    turns = _SLICE_TURNS.get(loop)
    if turns is None:
        turns = _SLICE_TURNS[loop] = asyncio.Lock()
    return turns
