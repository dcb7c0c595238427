"""The AI pipeline's pure parts: positions, regions, context order, streamer, scheduler."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from tether.ai.errors import BadRequest, Busy
from tether.ai.suggest.scheduler import INTERACTIVE, PREFETCH, Scheduler
from tether.ai.suggest.streamer import stream_coalesced
from tether.ai.text.context import (
    COMPLETE_PREFIX,
    ContextBuilder,
    ContextMemo,
    bounded_count,
    most_tokens,
)
from tether.ai.text.positions import index_to_utf8, index_to_utf16, utf16_to_index
from tether.ai.text.regions import RegionIndex, split_paragraphs

pytestmark = pytest.mark.anyio


def count(text: str) -> int:
    return max(1, len(text) // 4)


def test_utf16_positions_round_trip_through_emoji_and_astral_characters() -> None:
    text = "héllo 😀𝄞 end"
    for index in range(len(text) + 1):
        assert utf16_to_index(text, index_to_utf16(text, index)) == index
    assert utf16_to_index(text, 7) == 6  # inside 😀's surrogate pair: rounds down before it
    assert index_to_utf8(text, 7) == len("héllo 😀".encode())


def test_a_position_past_the_end_is_a_bad_request() -> None:
    with pytest.raises(BadRequest):
        utf16_to_index("abc", 4)


def test_paragraphs_split_and_join_back_to_the_text() -> None:
    text = "one\n\ntwo\n\n\nthree"
    assert "".join(split_paragraphs(text)) == text
    assert split_paragraphs(text) == ["one\n\n", "two\n\n\n", "three"]


def test_only_changed_regions_are_recomputed() -> None:
    regions = RegionIndex(count)
    regions.refresh("alpha\n\nbeta\n\ngamma")
    assert regions.recomputed == 3
    regions.mark_dirty()
    regions.refresh("alpha\n\nbeta!\n\ngamma")
    assert regions.recomputed == 4  # only "beta!" is new


def test_an_exact_tokenizer_reads_only_what_a_prompt_could_hold() -> None:
    """The server counts the embedded model's tokens exactly (ai.model.token_counter), on the
    event loop: a 1 MB document must not be tokenized whole. Regions count when asked, the
    builder asks near the cursor, and a paragraph too long for any prompt is estimated."""
    read: list[int] = []

    def exact(text: str) -> int:
        read.append(len(text))
        return count(text)

    counted = bounded_count(exact, budget_tokens=100)
    regions = RegionIndex(counted)
    paragraphs = [
        f"Paragraph {i} of a long document, about the same length each." for i in range(5000)
    ]
    huge = "x" * 100_000  # longer than any prompt could hold
    text = "Title\n\n" + "\n\n".join(paragraphs) + "\n\n" + huge + "\n\nThe writer types here"
    regions.refresh(text)
    assert read == []  # splitting and hashing only
    prompt = ContextBuilder(counted, budget_tokens=100).complete(regions, text, len(text))
    assert prompt.text.endswith("The writer types here")
    assert sum(read) < 4_000, read  # the cursor's paragraph, the opening one, a few near it
    assert 100_000 not in read  # the huge one was estimated, not tokenized
    assert counted(huge) == most_tokens(huge)


def test_typing_at_the_end_keeps_the_prompt_prefix() -> None:
    builder = ContextBuilder(count)
    regions = RegionIndex(count)
    text = "Title\n\nFirst paragraph.\n\nThe writer types here"
    first = builder.complete(regions, text, len(text))
    regions.mark_dirty()
    longer = text + " and more"
    second = builder.complete(regions, longer, len(longer))
    assert first.text.startswith(COMPLETE_PREFIX)
    assert second.text.startswith(first.text)


def test_no_part_of_a_prompt_is_longer_than_the_budget_in_characters() -> None:
    """Issue 26, finding 15: the whole cursor paragraph went into the prompt uncut (a 1 MB one
    cost 7.8 s of tokenizing in the worker), and the opening paragraph is always chosen."""
    builder = ContextBuilder(count, budget_tokens=100)
    opening, cursor_paragraph = "T" * 50_000, "w" * 60_000 + " the end"
    text = opening + "\n\n" + cursor_paragraph
    prompt = builder.complete(RegionIndex(count), text, len(text))
    assert len(prompt.text) <= len(COMPLETE_PREFIX) + 2 * builder.max_chars
    assert prompt.text.endswith("w the end") and "TTTT" in prompt.text
    with pytest.raises(BadRequest, match="too long to rewrite"):
        builder.rewrite(text, 0, builder.max_chars + 1)
    assert builder.rewrite(text, 0, builder.max_chars).window == "T" * builder.max_chars


def test_a_paragraph_edited_by_someone_else_moves_after_the_stable_ones() -> None:
    builder = ContextBuilder(count)
    regions = RegionIndex(count)
    old = "Title\n\nStable middle.\n\nCursor paragraph"
    builder.complete(regions, old, len(old))
    for region in regions.regions:
        region.born -= 3600  # make every current paragraph old and stable
    regions._by_key = {r.key: r for r in regions.regions}
    edited = "Title edited\n\nStable middle.\n\nCursor paragraph"
    regions.mark_dirty()
    prompt = builder.complete(regions, edited, len(edited)).text
    body = prompt[len(COMPLETE_PREFIX) :]
    assert body.index("Stable middle.") < body.index("Title edited") < body.index("Cursor")


def test_a_rebuilt_context_keeps_the_unchanged_paragraphs_in_their_old_order() -> None:
    # Every paragraph is new (hot) at first, so the first prompt is in document order; when
    # someone then edits the title, a rebuilt prompt must keep the evaluated paragraphs first
    # rather than re-sort them (which would re-evaluate everything after the fixed prefix).
    builder = ContextBuilder(count, memo_ttl=0.0)
    regions = RegionIndex(count)
    memo = ContextMemo()
    old = "Title\n\nFirst paragraph.\n\nSecond paragraph.\n\nCursor paragraph"
    first = builder.complete(regions, old, len(old), memo).text
    regions.mark_dirty()
    edited = old.replace("Title", "Title, edited")
    second = builder.complete(regions, edited, len(edited), memo).text
    body = second[len(COMPLETE_PREFIX) :]
    assert body.index("First") < body.index("Second") < body.index("Title, edited")
    assert first.index("First") < first.index("Second")  # document order the first time
    regions.mark_dirty()
    third = builder.complete(regions, edited + " goes on", len(edited) + 8, memo).text
    assert third.startswith(second)  # nothing changed above the cursor: prefix kept


def test_starting_a_new_paragraph_keeps_the_last_prompt_as_the_prefix() -> None:
    # The finished paragraph is appended to the reused context, though someone edited the
    # title meanwhile: the model evaluates only the new paragraph, not everything again.
    builder = ContextBuilder(count)
    regions = RegionIndex(count)
    memo = ContextMemo()
    text = "Title\n\nFirst paragraph.\n\nThe writer finishes this one."
    first = builder.complete(regions, text, len(text), memo).text
    text = text.replace("Title", "Title, edited") + "\n\nAnd starts"
    regions.mark_dirty()
    second = builder.complete(regions, text, len(text), memo)
    assert second.text.startswith(first) and second.text.endswith("one.\n\nAnd starts")
    assert "Title, edited" not in second.text  # reused as it was, refreshed later
    regions.mark_dirty()
    third = builder.complete(regions, text + " again", len(text) + 6, memo).text
    assert third.startswith(second.text)


def test_a_document_past_the_budget_is_not_rebuilt_at_every_new_paragraph() -> None:
    def rebuilds(fill: float) -> int:
        builder = ContextBuilder(count, budget_tokens=200, memo_max_age=1e9, fill=fill)
        regions, memo = RegionIndex(count), ContextMemo()
        text, previous, changed = "Title\n\n", "", 0
        for n in range(30):  # 30 paragraphs of ~25 tokens: 4 budgets' worth
            text += f"Paragraph {n} " + "word " * 18 + ".\n\nNext"
            regions.mark_dirty()
            prompt = builder.complete(regions, text, len(text), memo, refresh=False).text
            pairs = enumerate(zip(previous, prompt, strict=False))
            shared = next((i for i, (a, b) in pairs if a != b), len(previous))
            kept = shared - len(COMPLETE_PREFIX)
            changed += kept < 40  # the prompt changed right after the fixed prefix
            previous = prompt
        return changed

    assert rebuilds(1.0) >= 20  # filled to the brim: the oldest paragraph goes every time
    assert rebuilds(0.6) <= 8


def test_a_request_keeps_a_stale_context_warm_and_a_refresh_rebuilds_it() -> None:
    builder = ContextBuilder(count, memo_ttl=0.0, memo_max_age=60.0)
    regions = RegionIndex(count)
    memo = ContextMemo()
    text = "Title\n\nFirst paragraph.\n\nThe writer types here"
    first = builder.complete(regions, text, len(text), memo, refresh=False).text
    text = text.replace("Title", "Title, edited") + " and more"
    regions.mark_dirty()
    kept = replace(memo)
    second = builder.complete(regions, text, len(text), kept, refresh=False).text
    assert second.startswith(first) and "Title, edited" not in second
    assert not kept.refreshes(memo)
    fresh = replace(memo)
    third = builder.complete(regions, text, len(text), fresh, refresh=True).text
    assert "Title, edited" in third and fresh.refreshes(memo)


def test_a_paragraph_that_appears_twice_is_in_the_context_twice() -> None:
    builder = ContextBuilder(count, memo_ttl=0.0)
    regions = RegionIndex(count)
    memo = ContextMemo()
    text = "Title\n\nSame.\n\nSame.\n\nCursor"
    builder.complete(regions, text, len(text), memo)
    regions.mark_dirty()
    prompt = builder.complete(regions, text + "!", len(text) + 1, memo).text
    assert prompt.count("Same.") == 2


async def pieces(items: list[str], delay: float = 0.0) -> AsyncIterator[str]:
    for item in items:
        if delay:
            await asyncio.sleep(delay)  # a model's pace
        yield item


async def test_the_first_piece_goes_out_alone_and_later_ones_are_coalesced() -> None:
    frames: list[str] = []
    result = await stream_coalesced(pieces(list("abcdefghij"), 0.002), frames.append, interval=0.05)
    assert frames[0] == "a"
    assert "".join(frames) == "abcdefghij"
    assert len(frames) < 10
    assert result.pieces == 10


async def test_buffered_text_is_flushed_even_when_the_model_stalls() -> None:
    gate = asyncio.Event()
    flushed = asyncio.Event()
    frames: list[str] = []

    def emit(frame: str) -> None:
        frames.append(frame)
        if frames == ["a", "b"]:
            flushed.set()

    async def stalling() -> AsyncIterator[str]:
        yield "a"
        yield "b"
        await gate.wait()  # the model stalls until "b" has gone out on its own
        yield "c"

    task = asyncio.ensure_future(stream_coalesced(stalling(), emit, interval=0.02))
    async with asyncio.timeout(5):
        await flushed.wait()
    gate.set()
    await task
    assert frames == ["a", "b", "c"]


async def test_a_full_queue_answers_busy_at_once_and_interactive_displaces_prefetch() -> None:
    release = asyncio.Event()
    started = asyncio.Event()

    async def slow() -> str:
        started.set()
        await release.wait()
        return "done"

    async with Scheduler(max_queue=1) as scheduler:
        running = scheduler.submit(slow)
        async with asyncio.timeout(5):
            await started.wait()
        queued_prefetch = scheduler.submit(slow, PREFETCH)
        with pytest.raises(Busy):
            scheduler.submit(slow, PREFETCH)
        interactive = scheduler.submit(slow, INTERACTIVE)  # evicts the queued prefetch
        assert queued_prefetch.cancelled()
        release.set()
        assert await running == "done"
        assert await interactive == "done"


async def test_cancelling_a_queued_job_means_it_never_runs() -> None:
    ran: list[str] = []
    release = asyncio.Event()

    async def blocker() -> None:
        await release.wait()

    async def job() -> None:
        ran.append("ran")

    async with Scheduler(max_queue=4) as scheduler:
        first = scheduler.submit(blocker)
        second = scheduler.submit(job)
        second.cancel()
        release.set()
        await first
        third = scheduler.submit(job)
        await third
    assert ran == ["ran"]


def test_a_prompt_of_emoji_is_cut_by_its_tokens_not_its_characters() -> None:
    """Issue 26, finding 14 again: cut at 2,800 characters, a paragraph of emoji was 8,400 tokens
    (the whole context window; 8-19 s of the model per request). A byte-level tokenizer spends
    at most a token per UTF-8 byte, so that is what the cut counts for anything not ASCII."""
    builder = ContextBuilder(most_tokens, budget_tokens=100)
    emoji = "\N{GRINNING FACE}" * 100_000
    for text in (emoji, "intro\n\n" + emoji, "\N{CJK UNIFIED IDEOGRAPH-4E00}" * 5_000 + " end"):
        prompt = builder.complete(RegionIndex(most_tokens), text, len(text))
        assert most_tokens(prompt.text[len(COMPLETE_PREFIX) :]) <= 2 * 100
        assert prompt.window and text.endswith(prompt.window[-3:])
    with pytest.raises(BadRequest, match="too long to rewrite"):
        builder.rewrite(emoji, 0, 200)
    assert builder.rewrite("a" * 400, 0, 400).window == "a" * 400
    assert most_tokens("abcd") == 1 and most_tokens("\N{GRINNING FACE}") == 4
    assert most_tokens("ab\N{LATIN SMALL LETTER E WITH ACUTE}") == 1 + 2
