"""Builds the model prompt from the server-held document: no document text travels in requests.

Order, chosen so consecutive requests from one editor share the longest token prefix (the local
provider then evaluates only the new tokens): the fixed prefix (system text, instruction;
tokenized once at start), then whole paragraphs before the cursor's (the opening one, and the
nearest within a token budget) with recently edited ones last, and finally the cursor's own
paragraph up to the cursor, which the model continues.

Before anything is split, hashed, counted or copied, the builder cuts what it was given to
what a prompt could hold (``context_chars`` before the cursor, at paragraph boundaries, and
the document's opening): a prompt on a 3 MB document or in a 2 MB paragraph costs the same as
one on a page, and the whole prompt stays within the token budget (the cursor's paragraph
leaves a quarter of it to the opening). Knows nothing of sockets or providers.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import BadRequest
from .junk import BEFORE_CHARS
from .regions import SEPARATOR, Region, RegionIndex

PROMPT_VERSION = "3"  # 3: rewrites stop at a blank line their passage lacks
HOT_SECONDS = 30.0
# A token is about four characters of prose: no part of a prompt (the cursor's paragraph, a
# paragraph of context, a passage to rewrite) is longer than this many characters per token of
# the budget. Cut by characters before anything is tokenized or framed: a 1 MB paragraph cost
# the model 7.8 s of tokenizing per suggest, and a bigger one broke the worker channel's frame.
CHARS_PER_TOKEN = 4
# More characters than this per token of budget are more tokens than the budget in any prose:
# what lies further from the cursor cannot be in a prompt.
MOST_CHARS_PER_TOKEN = 8


def context_chars(budget_tokens: int) -> int:
    """How far before the cursor a prompt of ``budget_tokens`` may reach, in characters."""
    return MOST_CHARS_PER_TOKEN * budget_tokens


def most_tokens(text: str) -> int:
    """An upper estimate of ``text``'s tokens, without the model's tokenizer: prose is about
    four characters a token, but a byte-level BPE may spend a token per UTF-8 byte of other
    scripts and emoji (2,800 characters of emoji cut by characters alone were 8,400 tokens,
    the whole context window: 8-19 s of the model per request)."""
    if text.isascii():
        return -(-len(text) // CHARS_PER_TOKEN)
    ascii_chars = sum(1 for char in text if char < "\x80")
    return (
        -(-ascii_chars // CHARS_PER_TOKEN)
        + len(text.encode("utf-8", "surrogatepass"))
        - (ascii_chars)
    )


def bounded_count(count: Callable[[str], int], budget_tokens: int) -> Callable[[str], int]:
    """``count`` (an exact tokenizer) on text a prompt of ``budget_tokens`` could hold; the
    upper estimate (``most_tokens``) on longer text: more than 8 characters a token of budget
    is more tokens than the budget in any prose, so the answer is "too long" either way, and a
    huge paragraph costs no tokenizing on the event loop."""
    limit = max(4096, context_chars(budget_tokens))

    def counted(text: str) -> int:
        return count(text) if len(text) <= limit else most_tokens(text)

    return counted


def _unit_cost(char: str) -> int:
    """What one character adds to ``most_tokens``, in quarter tokens."""
    if char < "\x80":
        return 1
    return CHARS_PER_TOKEN * len(char.encode("utf-8", "surrogatepass"))


def tail_start(text: str, start: int, end: int, max_tokens: int) -> int:
    """Where the longest tail of ``text[start:end]`` within ``max_tokens`` (``most_tokens``)
    begins: the cursor paragraph's end that goes into a prompt."""
    start = max(start, end - CHARS_PER_TOKEN * max_tokens)
    if text[start:end].isascii():
        return start
    budget, at = CHARS_PER_TOKEN * max_tokens, end
    while at > start:
        budget -= _unit_cost(text[at - 1])
        if budget < 0:
            break
        at -= 1
    return at


def head_end(text: str, max_tokens: int) -> int:
    """Where the longest opening of ``text`` within ``max_tokens`` (``most_tokens``) ends."""
    end = min(len(text), CHARS_PER_TOKEN * max_tokens)
    if text[:end].isascii():
        return end
    budget, at = CHARS_PER_TOKEN * max_tokens, 0
    while at < end:
        budget -= _unit_cost(text[at])
        if budget < 0:
            break
        at += 1
    return at


SYSTEM_COMPLETE = (
    "You are a writing assistant inside a collaborative editor. Continue the document exactly"
    " where it stops, in the same language and voice. Write at most one sentence."
)
SYSTEM_REWRITE = (
    "You are a writing assistant inside a collaborative editor. Rewrite the given passage so it"
    " reads clearly. Keep its meaning and language. Reply with the rewritten passage only."
)
STOP_COMPLETE = ("<|im_end|>", "\n\n")
STOP_REWRITE = ("<|im_end|>",)


def _past_newlines(text: str, at: int, end: int) -> int:
    """Where a paragraph separator's run of line breaks from ``at`` ends (before ``end``): a
    paragraph's trailing blank lines are its own (``regions.split_paragraphs``)."""
    while at < end and text[at] == "\n":
        at += 1
    return at


def _chat(system: str, user: str) -> str:
    return (
        f"<|im_start|>system\n{system}<|im_end|>\n"
        f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
    )


COMPLETE_PREFIX = _chat(SYSTEM_COMPLETE, "Continue my document.")


@dataclass(frozen=True, slots=True)
class BuiltPrompt:
    text: str
    kind: str
    # The text right before the cursor that the prompt ends with: the cache's agreement key.
    window: str
    stop: tuple[str, ...]
    context_tokens: int
    # The text before the cursor that the junk filter reads (a completion's; "" for rewrites).
    before: str = ""


@dataclass(slots=True)
class ContextMemo:
    """One editor's last context part (the paragraphs before its cursor's), for reuse."""

    context: str = ""
    tokens: int = 0
    # Where it was built: the key of the paragraph right before the cursor's (b"" when the
    # cursor's is the first); None until built. Content, not an index: the builder reads a
    # window of the document, whose indexes move with it.
    place: bytes | None = None
    built_at: float = 0.0
    order: tuple[bytes, ...] = ()  # the context's paragraphs (region keys), in prompt order
    # Which of the editor's warm model states holds this context: a refresh built in the
    # background gets its own (epoch + 1), so the live one stays warm until it is ready.
    epoch: int = 0

    def usable(self, place: bytes, now: float, ttl: float) -> bool:
        return self.place == place and now - self.built_at <= ttl

    def same_place(self, other: ContextMemo) -> bool:
        return self.place == other.place

    def refreshes(self, older: ContextMemo) -> bool:
        """This memo is ``older`` rebuilt for its age alone: same cursor paragraph, new
        context, which a request would not have rebuilt yet."""
        return older.built_at > 0 and self.built_at != older.built_at and self.same_place(older)

    def remember(
        self,
        context: str,
        tokens: int,
        place: bytes,
        now: float,
        order: tuple[bytes, ...] = (),
    ) -> None:
        self.context, self.tokens, self.place, self.built_at = context, tokens, place, now
        self.order = order


class ContextBuilder:
    def __init__(
        self,
        count_tokens: Callable[[str], int],
        *,
        budget_tokens: int = 700,
        memo_ttl: float = 20.0,
        memo_max_age: float | None = None,
        fill: float = 0.6,
    ) -> None:
        self.count_tokens = count_tokens
        self.budget_tokens = budget_tokens
        self.max_chars = CHARS_PER_TOKEN * budget_tokens
        self.context_chars = context_chars(budget_tokens)
        # The opening paragraph's share of a prompt whose cursor paragraph leaves no room.
        self.opening_tokens = budget_tokens // 4
        self.memo_ttl = memo_ttl
        # How stale a request may find the context when no prefetch has refreshed it.
        self.memo_max_age = 3 * memo_ttl if memo_max_age is None else memo_max_age
        self.prefix_tokens = count_tokens(COMPLETE_PREFIX)  # the fixed part, counted once
        # An editor's rebuilt context (with a memo; one prompt alone gets the whole budget)
        # takes this share of the budget, and new paragraphs are appended up to all of it.
        # Filled to the brim, every new paragraph past the budget would push the oldest out,
        # changing the prompt right after the fixed prefix: all of it evaluated again, every
        # paragraph. So a document longer than the budget is rebuilt once per ~40% of the
        # budget written instead.
        self.fill = fill

    def complete(
        self,
        regions: RegionIndex,
        text: str,
        cursor: int,
        memo: ContextMemo | None = None,
        *,
        refresh: bool = True,
    ) -> BuiltPrompt:
        """The prompt for a completion at ``cursor``. With a ``memo`` (one per editor), the
        paragraphs around the cursor's are reused as they were while the cursor stays in the
        same paragraph, so other editors' typing elsewhere does not invalidate the model's warm
        prefix on every request: for ``memo_ttl`` seconds, or with ``refresh=False`` (a request
        while prefetch refreshes the context in the background, when the editor pauses) for
        up to ``memo_max_age``. Rebuilding costs the model every token after the first changed
        paragraph, the cursor's own included. When the cursor moves on to a new paragraph
        right after its own, the finished one is appended to the reused context."""
        local, at = self._bounded(text, cursor)
        parts = regions.refresh(local)
        window_text = text[max(0, cursor - 200) : cursor]
        before = text[max(0, cursor - BEFORE_CHARS) : cursor]
        if not parts:
            return BuiltPrompt(
                COMPLETE_PREFIX, "complete", "", STOP_COMPLETE, self.prefix_tokens, before
            )
        here = regions.region_at(max(at - 1, 0))
        # The cursor's paragraph: always fresh, last; its end only, for a very long one, leaving
        # the opening paragraph its share of the budget.
        opening = min(self.opening_tokens, parts[0].tokens) if here > 0 else 0
        room = self.budget_tokens - opening
        window = local[tail_start(local, parts[here].start, at, room) : at]
        place = parts[here - 1].key if here > 0 else b""
        now = time.monotonic()
        limit = self.memo_ttl if refresh else self.memo_max_age
        if memo is not None and memo.usable(place, now, limit):
            context, used = memo.context, memo.tokens
        elif memo is not None and self._extend(memo, parts, here, now, limit):
            context, used = memo.context, memo.tokens
        else:
            previous = memo.order if memo is not None else ()
            fill = self.fill if memo is not None else 1.0
            order, used, share = self._context(parts, here, now, previous, fill)
            context = "".join(self._clip(parts[i].text, share if i == 0 else 0) for i in order)
            if memo is not None:
                keys = tuple(parts[i].key for i in order)
                memo.remember(context, used, place, now, keys)
        tokens = self.prefix_tokens + used + parts[here].tokens
        prompt = COMPLETE_PREFIX + context + window
        return BuiltPrompt(prompt, "complete", window_text, STOP_COMPLETE, tokens, before)

    def _bounded(self, text: str, cursor: int) -> tuple[str, int]:
        """What of ``text`` a prompt at ``cursor`` may use, cut before anything else reads
        it, and the cursor's index there: the paragraphs that start within ``context_chars``
        before the cursor (the cursor's own from there, if it is longer) up to the cursor, after
        the document's opening paragraph (or, if that is longer than ``context_chars``, the
        most of it a prompt could hold, as a paragraph of its own)."""
        start = max(0, cursor - self.context_chars)
        if start == 0:
            return text[:cursor], cursor
        cut = text.find(SEPARATOR, start - 1, cursor)
        begin = _past_newlines(text, cut + len(SEPARATOR), cursor) if cut >= 0 else cursor
        if begin < cursor:
            start = begin
        else:
            # The cursor's paragraph (or the one it starts after) is longer than any prompt
            # could use: one character more makes its count an estimate (``bounded_count``),
            # not the tokenizer's reading of thousands of characters on every request.
            start -= 1
        first = text.find(SEPARATOR, 0, min(start, self.context_chars))
        if first < 0:
            opening = text[: head_end(text, self.budget_tokens)] + SEPARATOR
        else:
            end = _past_newlines(text, first + len(SEPARATOR), start)
            if end >= start:
                return text[:cursor], cursor
            opening = text[:end]
        return opening + text[start:cursor], len(opening) + cursor - start

    def _extend(
        self, memo: ContextMemo, parts: list[Region], here: int, now: float, limit: float
    ) -> bool:
        """The cursor went on into a new paragraph right after the memo's cursor paragraph
        (the editor pressed Enter and writes on): append that finished paragraph to the memo's
        context. The model has evaluated it already, as the last prompt's end, so only the new
        paragraph is new to it. False when that is not the case or it would not fit."""
        if here < 1 or not memo.usable(parts[here - 2].key if here > 1 else b"", now, limit):
            return False
        finished = parts[here - 1]
        if finished.key in memo.order:  # already in the context: not the paragraph it was at
            return False
        used = memo.tokens + finished.tokens
        if used + parts[here].tokens > self.budget_tokens:
            return False
        memo.context += self._clip(finished.text)
        memo.tokens, memo.place = used, finished.key
        memo.order += (finished.key,)
        return True

    def _context(
        self,
        parts: list[Region],
        here: int,
        now: float,
        previous: tuple[bytes, ...] = (),
        fill: float = 1.0,
    ) -> tuple[list[int], int, int]:
        """The context's paragraphs in prompt order, their tokens, and the opening one's share
        of the budget if it is in only because it always is (else 0). First the ``previous``
        prompt's
        paragraphs that are unchanged, in their old order: up to the first change the model
        has them evaluated already, and the order stays put for next time. Then the changed
        and new ones: stable paragraphs, then those edited in the last HOT_SECONDS (each group
        in document order). Another editor typing above the cursor so invalidates only the
        tail of the prompt, not everything after the fixed prefix."""
        chosen, used, share = self._context_regions(parts, here, fill)
        left: dict[bytes, list[int]] = {}
        for i in chosen:
            left.setdefault(parts[i].key, []).append(i)  # a paragraph may appear twice
        order = [left[key].pop(0) for key in previous if left.get(key)]
        rest = sorted(i for indexes in left.values() for i in indexes)
        order += [i for i in rest if now - parts[i].born > HOT_SECONDS]
        order += [i for i in rest if now - parts[i].born <= HOT_SECONDS]
        return order, used, share

    def _context_regions(
        self, parts: list[Region], here: int, fill: float = 1.0
    ) -> tuple[list[int], int, int]:
        """Paragraphs before the cursor's, nearest first, within budget; plus the opening one,
        which when it did not fit gets what is left, at least ``opening_tokens`` (its share:
        the third value, else 0)."""
        budget = int(fill * self.budget_tokens) - parts[here].tokens
        chosen: list[int] = []
        used = 0
        for i in range(here - 1, -1, -1):
            if used + parts[i].tokens > budget:
                break
            chosen.append(i)
            used += parts[i].tokens
        share = 0
        if here > 0 and 0 not in chosen:
            chosen.append(0)  # the title or opening paragraph says what the document is
            share = max(self.opening_tokens, budget - used)
            used += min(parts[0].tokens, share)
        return sorted(chosen), used, share

    def _clip(self, paragraph: str, share: int = 0) -> str:
        """A context paragraph's opening, for one longer than a prompt may be (the opening
        paragraph is always chosen, whatever its length: then to its ``share``)."""
        return paragraph[: head_end(paragraph, share or self.budget_tokens)]

    def rewrite(self, text: str, start: int, end: int) -> BuiltPrompt:
        if end - start > self.max_chars or most_tokens(text[start:end]) > self.budget_tokens:
            raise BadRequest(
                f"the selection is too long to rewrite ({end - start} characters; at most"
                f" {self.max_chars} of prose, fewer of other scripts or emoji)"
            )
        passage = text[start:end]
        prompt = _chat(SYSTEM_REWRITE, passage)
        # A small model goes on after the rewritten passage with talk about it ("\n\nThe
        # passage is clear and grammatical..." in 3 of 8 rewrites measured): a passage with no
        # blank line in it gets a rewrite with none either.
        stop = STOP_REWRITE if "\n\n" in passage else (*STOP_REWRITE, "\n\n")
        return BuiltPrompt(prompt, "rewrite", passage, stop, self.count_tokens(prompt))
