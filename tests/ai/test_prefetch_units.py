"""The pure parts behind prefetch and type-ahead: cursor inference, debounce, duty cycle,
anchors after typing, type-ahead cuts, and the cache's prefetch bookkeeping."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pycrdt import Doc, Text

from tether.ai.cache.suggestions import CacheQuery, CacheSettings, SuggestionCache, typed_ahead
from tether.ai.suggest.prefetch import DutyCycle, Pause, edited_end
from tether.ai.suggest.scheduler import INTERACTIVE, PREFETCH, Scheduler
from tether.ai.text.anchors import SHORT_SPAN, TextAnchor


def test_edited_end_is_where_typing_stopped() -> None:
    assert edited_end("Hello world", "Hello brave world") == len("Hello brave ")
    assert edited_end("Hello world", "Hello world!") == len("Hello world!")
    assert edited_end("Hello brave world", "Hello world") == len("Hello ")  # a deletion
    assert edited_end("same", "same") is None
    assert edited_end("", "typed") == 5


@given(st.text(max_size=40), st.text(max_size=10), st.text(max_size=40))
def test_edited_end_after_one_insert_is_at_or_after_it(head: str, typed: str, tail: str) -> None:
    before, after = head + tail, head + typed + tail
    end = edited_end(before, after)
    if typed:
        assert end is not None
        # Ambiguous when the typed text repeats its surroundings; never before the insert's
        # earliest possible end, never past the text.
        assert len(typed) <= end <= len(after)
    else:
        assert end is None


def test_pause_arms_one_timer_and_reports_what_is_left() -> None:
    pause = Pause()
    assert pause.touch(0.0) is True  # the first keystroke arms the timer
    assert pause.touch(0.1) is False  # later ones only move the time
    assert pause.remaining(0.2, 0.2) == pytest.approx(0.1)  # typed at 0.1: not paused yet
    assert pause.remaining(0.3, 0.2) == 0.0  # paused: the timer is spent
    assert pause.touch(0.4) is True


def test_duty_cycle_caps_prefetch_time_in_its_window() -> None:
    budget = DutyCycle(0.5, window=10.0)
    assert budget.allows(0.0)
    budget.record(0.0, 4.0)
    assert budget.allows(4.0)
    budget.record(4.0, 6.0)
    assert not budget.allows(6.0)  # 6 s of the last 10
    assert budget.allows(12.0)  # runs age out of the window


def test_anchor_typed_reports_what_was_typed_at_it() -> None:
    text = "The tide came in"
    anchor = TextAnchor.at(text, len(text))
    assert anchor.typed(text) == ""
    assert anchor.typed(text + " and the") == " and the"
    assert not anchor.intact(text + " and")  # at the end: typing there is typing at it
    middle = TextAnchor.at("Before. After.", 7)
    assert middle.typed("Before. Then. After.") == " Then."
    assert middle.typed("Befxre. After.") is None


def test_typed_ahead_finds_how_much_of_an_answer_was_typed() -> None:
    assert typed_ahead("The nets were heavy", "The nets were heavy and", " and the gulls") == 4
    assert typed_ahead("The nets were heavy", "The nets were heavy  and", " and the") == 4
    assert typed_ahead("The nets were heavy", "The nets were heavy or", " and the") is None
    assert typed_ahead("The nets were heavy", "The nets were light and", " and") is None
    assert typed_ahead("x", "x and", " and") == 4  # all of a still-streaming answer


def _query(doc: str, window: str) -> CacheQuery:
    return CacheQuery(doc, "complete:24", "m", window, window)


def test_a_prefetched_entry_is_reported_as_prefetch_once_then_as_exact() -> None:
    cache = SuggestionCache()
    query = _query("d", "The tide came in")
    cache.put(query, " and the gulls cried.", prefetched=True)
    assert cache.has_exact(query) and cache.misses == 0  # a peek counts nothing
    first, second = cache.lookup(query), cache.lookup(query)
    assert first is not None and first.layer == "prefetch"
    assert second is not None and second.layer == "exact"
    assert cache.prefetch_used == 1 and cache.prefetch_unused == 0


def test_an_unused_prefetched_entry_counts_as_wasted_when_evicted() -> None:
    now = [0.0]
    cache = SuggestionCache(CacheSettings(ttl_seconds=1.0), clock=lambda: now[0])
    cache.put(_query("d", "a"), " b", prefetched=True)
    now[0] = 2.0
    cache.expire()
    assert len(cache) == 0 and cache.prefetch_unused == 1


def test_a_vector_added_later_makes_the_entry_findable_and_leaves_with_it() -> None:
    now = [0.0]
    cache = SuggestionCache(CacheSettings(ttl_seconds=1.0), clock=lambda: now[0])
    vector = np.ones(384, dtype=np.float32)
    entry = cache.put(_query("d", "The tide came in"), " and")
    assert entry is not None and cache.vectors() == 0
    assert cache.add_vector(entry, vector) and not cache.add_vector(entry, vector)
    hit = cache.lookup(_query("d", "The  tide came in"), vector)  # spacing: exact already
    assert hit is not None
    assert cache.vectors() == 1
    now[0] = 2.0
    cache.expire()
    assert cache.vectors() == 0 and cache.ntotal("d") == 0


@pytest.mark.anyio
async def test_an_interactive_job_preempts_a_running_prefetch_but_not_a_promoted_one() -> None:
    async with Scheduler(max_queue=4) as scheduler:
        started = asyncio.Event()

        async def long_job() -> str:
            started.set()
            await asyncio.sleep(30)
            return "finished"

        async def quick_job() -> str:
            return "quick"

        speculative = scheduler.submit(long_job, PREFETCH)
        await asyncio.wait_for(started.wait(), 5)
        assert await asyncio.wait_for(scheduler.submit(quick_job, INTERACTIVE), 5) == "quick"
        assert speculative.cancelled()

        started.clear()
        wanted = scheduler.submit(long_job, PREFETCH)
        await asyncio.wait_for(started.wait(), 5)
        scheduler.promote(wanted)  # someone waits on it now
        queued = scheduler.submit(quick_job, INTERACTIVE)
        await asyncio.sleep(0)
        assert not wanted.cancelled() and not queued.done()
        wanted.cancel()
        assert await asyncio.wait_for(queued, 5) == "quick"


def test_an_anchor_near_the_cursor_ignores_edits_further_off() -> None:
    text = "The meeting is on Tuesday at noon."
    end = TextAnchor.at(text, len(text))
    fixed = "The meetings is on Tuesday at noon."  # a word 23 characters back
    assert not end.intact(fixed) and end.intact(fixed, span=SHORT_SPAN)
    right_before = "The meeting is on Tuesday at high noon."
    assert not end.intact(right_before, span=SHORT_SPAN)
    assert not end.intact(text + " And", span=SHORT_SPAN)  # typed at it
    middle = TextAnchor.at(text, len("The meeting is"))
    assert middle.intact("The meeting is on Tuesday at twelve.", span=SHORT_SPAN)  # well after it
    assert not middle.intact("The meeting is now on Tuesday at noon.", span=SHORT_SPAN)


def test_concurrent_inserts_at_the_top_of_a_short_document_leave_the_cursor_intact() -> None:
    """Two editors typing at position 0 at once: the CRDT orders their characters by client,
    so one may land inside the text the anchor saw before the cursor. Near the cursor nothing
    changed, and a completion streaming there must go on."""
    base = "Dear team, the quarterly report is ready and"
    broken = 0
    for seed in range(20):
        server, alice, bob = (
            Doc(client_id=1000),
            Doc(client_id=2000 + seed),
            Doc(client_id=3000 - seed),
        )
        content = server.get("content", type=Text)
        content += base
        for doc in (alice, bob):
            doc.apply_update(server.get_update())
        mine, theirs = alice.get("content", type=Text), bob.get("content", type=Text)
        mine.insert(0, "a")
        server.apply_update(alice.get_update())
        bob.apply_update(alice.get_update())
        theirs.insert(0, "b")
        server.apply_update(bob.get_update())
        alice.apply_update(bob.get_update())
        mine.insert(0, "a")  # reaches the server before bob sees it ...
        server.apply_update(alice.get_update())
        text = str(content)
        anchor = TextAnchor.at(text, len(text))  # ... and the request comes now
        theirs.insert(0, "b")  # bob, not having seen alice's last "a"
        server.apply_update(bob.get_update())
        now = str(content)
        broken += not anchor.intact(now)
        assert anchor.intact(now, span=SHORT_SPAN), (text, now)
        # And what the writer then types at the cursor is still typed there (type-ahead).
        assert anchor.typed(now + " the", span=SHORT_SPAN) == " the", now
    assert broken > 0  # the whole span did break, for some client order


def test_an_anchor_after_a_repeated_sentence_finds_its_own_copy() -> None:
    sentence = "The boats came home and the gulls cried over the harbour wall."
    text = f"Title. {sentence} Then {sentence} And the night fell."
    at = text.rindex(sentence) + len(sentence)
    anchor = TextAnchor.at(text, at)
    shifted = "Someone typed a long line at the top of the page. " + text
    # The first copy now ends nearer to the anchor's old index than its own copy does.
    first_end = shifted.index(sentence) + len(sentence)
    own_end = shifted.rindex(sentence) + len(sentence)
    assert abs(first_end - at) < abs(own_end - at)
    assert anchor.resolve(shifted) == own_end
    assert anchor.typed(shifted) == ""
