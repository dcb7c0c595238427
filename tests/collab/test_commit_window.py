"""The commit window's policy: a commit waits only when other writes come while one is in flight."""

from __future__ import annotations

import random

from tether.collab.storage.commit_window import CommitWindow


def test_a_window_of_zero_never_waits():
    window = CommitWindow(0.0)
    for step in range(100):  # heavy company
        window.queued(step / 1000)
    assert window.wait_before_commit() == 0.0
    assert window.waits == 0


def test_a_writer_that_awaits_each_ack_never_brings_company():
    window = CommitWindow(0.005)
    now = 0.0
    for _ in range(1000):
        assert window.wait_before_commit() == 0.0
        window.queued(now)
        now += 0.0003  # its commit
        window.settled(1, now)
        now += 0.0007  # its ack travels, it types the next
    assert window.company == 0.0 and window.waits == 0


def _poisson_writes(window: CommitWindow, rate: float, seconds: float, seed: int = 1) -> float:
    """Independent writers at ``rate`` a second, each write settled when its batch commits; the
    batch waits what the window says. Returns the writes per commit."""
    rng = random.Random(seed)
    now, commits, writes = 0.0, 0, 0
    next_write = rng.expovariate(rate)
    while now < seconds:
        now = next_write  # the writer is idle: the next write opens a batch
        window.queued(now)
        batch = 1
        next_write = now + rng.expovariate(rate)
        done = now + window.wait_before_commit() + 0.0003
        while next_write < done:  # these come while the batch waits or commits
            window.queued(next_write)
            batch += 1
            next_write += rng.expovariate(rate)
        window.settled(batch, done)
        commits += 1
        writes += batch
        now = done
    return writes / commits


def test_many_editors_bring_company_and_the_commits_share_syncs():
    window = CommitWindow(0.005)
    per_commit = _poisson_writes(window, rate=400.0, seconds=10.0)
    assert 1.8 <= window.company <= 2.2  # 400 writes a second, 5 ms: two more per wait
    assert per_commit > 2.5  # without waits it is ~1.1 (0.3 ms commits at 400 a second)
    assert window.waits > 0


def test_a_trickle_of_writes_does_not_make_commits_wait():
    window = CommitWindow(0.005)
    per_commit = _poisson_writes(window, rate=20.0, seconds=30.0)
    assert window.company < 1 and window.waits == 0
    assert per_commit < 1.05


def test_when_the_editors_leave_the_waiting_stops_within_a_few_seconds():
    window = CommitWindow(0.005)
    _poisson_writes(window, rate=400.0, seconds=5.0)
    assert window.wait_before_commit() > 0
    start = now = 5.1
    while window.wait_before_commit():  # one writer left, awaiting its acks
        window.queued(now)
        window.settled(1, now + 0.0053)
        now += 0.01
        assert now - start < 3.0
    assert now - start > 0.25  # not at the first quiet moment: the rate is averaged


def test_a_hundred_writes_a_second_rarely_wait_four_hundred_always_do():
    """Scenario A's rate (0.4 writes per 4 ms wait) is left alone: its waits would add to the
    ack tail and save little; scenario B's (1.6) waits."""
    moderate, busy = CommitWindow(0.004), CommitWindow(0.004)
    per_commit = _poisson_writes(moderate, rate=100.0, seconds=20.0)
    assert moderate.waits <= 0.03 * (100 * 20 / per_commit)
    per_commit = _poisson_writes(busy, rate=400.0, seconds=20.0)
    assert busy.waits >= 0.95 * (400 * 20 / per_commit)


def test_one_write_in_flight_beside_another_is_not_yet_a_rate():
    window = CommitWindow(0.005)
    window.queued(0.0)
    window.queued(0.0001)  # a fluke
    window.settled(2, 0.0004)
    assert window.company == 0.0
