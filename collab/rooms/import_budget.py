"""The memory the imports in flight (Markdown, ProseMirror JSON, HTML) may take together,
process-wide: each import is charged the most it can take before it starts (``estimate``,
``estimate_tree``: from its size and the node cap), imports that do not fit wait a little in
arrival order, then are refused (``ImportBusy``: REST answers 503 with ``Retry-After``). An
import whose worst case alone is over the budget still runs when nothing else is in flight, so
every import the size limits allow can be made. Knows nothing of HTTP; loop side only (one
budget per event loop, as the worker pools are).

Why: one 512 KiB Markdown body of empty list items took +350 MB of server memory, three at
once +1.2 GB (issue 37). What an import holds at its peak (measured on the real server, RSS,
``docs/rich-text.md``): markdown-it's tokens of the biggest paragraph (about 370 bytes per byte
of it), then per tree node the tree, the yrs copy it is written into, the update, the import's
scans and slices, and what the document itself grows by. When the last import in flight ends,
the C heap is trimmed, so what the imports freed goes back to the system, not kept resident.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
import weakref
from collections import deque
from dataclasses import dataclass

from ..content.markdown_in import DEFAULT_MAX_NODES
from ..runtime.heap import give_back_freed

# Measured on the real server (peak RSS over the import, docs/rich-text.md): 512 KiB of "#"
# lines (an empty heading and its level per 2 bytes) took 880 MB, 1.7 KB per byte, the most
# of the shapes tried; per node, one bold-italic-struck word per 12 bytes took 5.5 KB.
PER_BYTE = 1800  # the whole import, per byte of Markdown, at its worst
PARSE_PER_BYTE = 400  # markdown-it's tokens of one paragraph the size of the text
PER_NODE = 6000  # what a node costs after parsing: tree, yrs copy, update, scans, document
BASE = 8 * 1024 * 1024
_MIN_RETRY_S = 1
_MAX_RETRY_S = 60


def estimate(markdown_bytes: int, max_nodes: int) -> int:
    """The most memory a Markdown import of ``markdown_bytes`` bytes can take: what its size
    allows, or, when the node cap binds first, its parse and ``max_nodes`` nodes."""
    by_size = PER_BYTE * markdown_bytes
    by_cap = PARSE_PER_BYTE * markdown_bytes + PER_NODE * max_nodes
    return BASE + min(by_size, by_cap)


# ProseMirror JSON and HTML bodies (collab.content.prosemirror_json, html_in): the JSON's
# values take up to 25 bytes per byte of it while they are read (a list of one-key objects,
# measured with tracemalloc; a document's usual shapes take 9-13), HTML is read as a stream;
# then each node costs what a Markdown import's does. A node takes at least this many bytes
# of its body (``{"type":"a"},``; ``<p>``), which bounds the nodes a body can make.
TREE_PER_BYTE = {"json": 26, "html": 4}
TREE_NODE_BYTES = {"json": 13, "html": 3}


def estimate_tree(kind: str, body_bytes: int, max_nodes: int) -> int:
    """The most memory importing a ProseMirror JSON ("json") or HTML ("html") body of
    ``body_bytes`` bytes can take."""
    nodes = min(max_nodes, body_bytes // TREE_NODE_BYTES[kind] + 1)
    return BASE + TREE_PER_BYTE[kind] * body_bytes + PER_NODE * nodes


@dataclass(frozen=True, slots=True)
class ImportLimits:
    max_nodes: int = DEFAULT_MAX_NODES  # a Markdown import's tree nodes (max_import_nodes)
    memory_budget: int = 1024 * 1024 * 1024  # import_memory_budget, bytes
    budget_wait: float = 2.0  # import_budget_wait, seconds


class ImportBusy(Exception):
    """The imports in flight leave no room for this one; nothing was applied."""

    def __init__(self, retry_after: int, budget: int) -> None:
        super().__init__(
            f"the server is busy with other imports (import_memory_budget {budget} bytes);"
            f" try again in {retry_after} s"
        )
        self.retry_after = retry_after


class Charge:
    """One import's share of the budget, given back by ``release`` (or when ``with`` ends)."""

    __slots__ = ("_amount", "_budget", "_since")

    def __init__(self, budget: ImportBudget, amount: int) -> None:
        self._budget: ImportBudget | None = budget
        self._amount = amount
        self._since = time.monotonic()

    def release(self) -> None:
        budget, self._budget = self._budget, None
        if budget is not None:
            budget._give_back(self._amount, time.monotonic() - self._since)

    def __enter__(self) -> Charge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class ImportBudget:
    """``total`` bytes shared by the imports in flight; a waiter waits at most ``wait`` s."""

    def __init__(self, total: int, wait: float) -> None:
        self.total = total
        self.wait = wait
        self.charged = 0
        self.in_flight = 0
        self._waiting: deque[tuple[int, asyncio.Future[None]]] = deque()
        self._mean_s = 5.0  # recent imports' time, for Retry-After

    async def charge(self, amount: int) -> Charge:
        """A charge of ``amount`` bytes (at most the whole budget), at once if it fits and
        nobody waits before it, else after the imports ahead of it; ``ImportBusy`` if that
        takes longer than ``wait``."""
        amount = min(max(amount, 0), self.total)
        if not self._waiting and self._fits(amount):
            return self._take(amount)
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (amount, granted)
        self._waiting.append(entry)
        try:
            await asyncio.wait_for(asyncio.shield(granted), self.wait)
        except (TimeoutError, asyncio.CancelledError) as exc:
            if granted.done() and not granted.cancelled():  # granted as the wait ended
                charge = Charge(self, amount)
                if isinstance(exc, asyncio.CancelledError):
                    charge.release()
                    raise
                return charge
            self._waiting.remove(entry)
            granted.cancel()
            self._grant()  # those behind it may fit now
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise ImportBusy(self.retry_after(), self.total) from None
        return Charge(self, amount)

    def retry_after(self) -> int:
        ahead = self.in_flight + len(self._waiting)
        return min(_MAX_RETRY_S, max(_MIN_RETRY_S, math.ceil(self._mean_s * max(ahead, 1))))

    def _fits(self, amount: int) -> bool:
        return self.in_flight == 0 or self.charged + amount <= self.total

    def _take(self, amount: int) -> Charge:
        self.charged += amount
        self.in_flight += 1
        return Charge(self, amount)

    def _grant(self) -> None:
        while self._waiting and self._fits(self._waiting[0][0]):
            amount, granted = self._waiting.popleft()
            self.charged += amount
            self.in_flight += 1
            granted.set_result(None)

    def _give_back(self, amount: int, took_s: float) -> None:
        self.charged -= amount
        self.in_flight -= 1
        self._mean_s = 0.8 * self._mean_s + 0.2 * took_s
        self._grant()
        if self.in_flight == 0:
            _trim_heap_soon()


_budgets: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, ImportBudget] = (
    weakref.WeakKeyDictionary()
)


def budget_of(limits: ImportLimits) -> ImportBudget:
    """The running loop's budget (made from ``limits`` the first time)."""
    loop = asyncio.get_running_loop()
    budget = _budgets.get(loop)
    if budget is None:
        budget = ImportBudget(limits.memory_budget, limits.budget_wait)
        _budgets[loop] = budget
    return budget


def _trim_heap_soon() -> None:
    """glibc keeps what a thread freed in that thread's arena, resident: after three big
    imports 1.0 GB stayed. The trim walks the heap (a few ms per hundred MB), so it runs in a
    thread of its own, off the loop."""
    threading.Thread(target=give_back_freed, name="heap-trim").start()
