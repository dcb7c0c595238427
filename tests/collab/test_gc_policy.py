"""tether serve's garbage-collector policy (collab.runtime.gc_policy), on this process's
collector."""

from __future__ import annotations

import gc
import sys
import weakref
from collections.abc import Iterator

import pytest

from tether.collab.runtime import gc_policy


class Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector frees it


@pytest.fixture
def policy() -> Iterator[gc_policy._Policy]:
    applied = gc_policy._Policy()
    gc.callbacks.append(applied.callback)
    try:
        yield applied
    finally:
        gc.callbacks.remove(applied.callback)
        gc.unfreeze()


def test_a_full_collection_freezes_what_survived_so_the_next_walks_only_what_is_new(policy):
    gc.collect()
    frozen = gc.get_freeze_count()
    assert frozen > 1000
    fresh = [Node() for _ in range(100)]
    gc.collect()
    assert gc.get_freeze_count() >= frozen + 100
    del fresh


def test_once_enough_connections_ended_a_full_collection_walks_everything_and_frees_cycles(
    policy,
):
    cycle = Node()
    gone = weakref.ref(cycle)
    policy.blocks_at_walk = sys.getallocatedblocks()  # a big suite process is not "grown"
    gc.collect()  # alive: frozen
    policy.blocks_at_walk = sys.getallocatedblocks()  # as if that was a complete walk
    del cycle
    policy.started()
    gc.collect()
    assert gone() is not None, "frozen: a cycle among frozen objects waits"
    for _ in range(gc_policy.MIN_ENDED):
        policy.started()
        policy.finished()
    walks_before = policy.complete_walks
    gc.collect()
    assert gone() is None, "the complete walk freed it"
    assert policy.complete_walks == walks_before + 1 and policy.ended == 0
