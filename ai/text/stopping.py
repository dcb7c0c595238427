"""How long a completion is, and token healing: the rules ``tether bench quality`` measured,
applied to the model's stream as it comes (the generation stops as soon as a rule has decided).

Healing: a prompt that ends with the space the editor just typed makes small models go on
with a word they would not start after a space; the healed prompt stops before that space and
the model writes it. If the model does not (it continued the last word instead), nothing is
shown. Stopping rules, on the text after the cursor: ``word`` (one word, its trailing
punctuation not included; clause marks the model writes before it come with it: ", and" — a
lone "," would be screened as empty, and a model at a clause end writes one first most of the
time), ``phrase`` (up to 4 words or a clause mark), ``sentence`` (through the first
sentence's end), ``sure`` (the first word, then word by word while the model is sure of each:
``sure_cut``) and ``tokens`` (no rule: the token limit alone, as before).

``tether bench quality`` uses ``stop_at`` and ``heal_output`` from here, so the server shows
exactly what the bench scored. Knows nothing of models or sockets.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import AsyncIterator, Sequence

WORD = "word"
PHRASE = "phrase"
SENTENCE = "sentence"
SURE = "sure"
TOKENS = "tokens"
STOP_RULES = (WORD, PHRASE, SENTENCE, SURE, TOKENS)
# The lowest token probability a word after the first may have: at 0.9 the quality bench found
# the sure rule never less acceptable than one word, and longer where the model was sure.
DEFAULT_SURE = 0.9
# The sure rule decides after this many words: no ghost text is worth more, and the rule's work
# per piece of the stream stays bounded however long a generation runs.
MAX_SURE_WORDS = 32
# Where each piece of a stream ends in its text, and how sure the model was of it (None: the
# provider did not say).
Confidences = Sequence[tuple[int, float | None]]

_MARKS = ",;:.!?"
# One word; clause marks before it (the model closing the clause the editor is in) come with
# the word after them on the same line (", and"), or alone if a line break follows.
_WORD_RE = re.compile(r"\s*(?:[,;:.!?]+[ \t]*)?[^\s,;:.!?]+|\s*[,;:.!?]+")
_PHRASE_RE = re.compile(r"\s*(?:[^\s,;:.!?]+[ \t]*){1,4}")
_SENTENCE_RE = re.compile(r"[.!?](?=\s|$)")
_SENTENCE_DONE_RE = re.compile(r"[.!?](?=\s)")
_NEXT_WORD_RE = re.compile(r"[ \t]*[^\s]+")


def stop_at(text: str, rule: str) -> str:
    """The suggestion a stopping rule leaves of the whole of ``text``."""
    if rule in (TOKENS, "full"):
        return text
    if rule == SENTENCE:
        match = _SENTENCE_RE.search(text)
        return text[: match.end()] if match else text
    if rule == PHRASE:
        match = _PHRASE_RE.match(text)
        return match.group(0).rstrip() if match else text
    if rule == WORD:
        match = _WORD_RE.match(text)
        return match.group(0) if match else text
    raise ValueError(rule)


def sure_cut(
    text: str, confidences: Confidences, threshold: float, *, final: bool, offset: int = 0
) -> tuple[str, bool]:
    """The ``sure`` rule on a stream that so far produced ``text`` (``final``: all of it):
    (the part of the suggestion known so far, whether more text cannot change it).
    ``confidences`` give each piece's end ``offset`` characters before ``text``'s start (the
    stream's healed-away characters), so a stream keeps one list and never shifts it.

    The first word as the ``word`` rule gives it, whatever the model's confidence (what the
    server showed before this rule). Then each next word, its spaces and punctuation with it,
    while every piece it touches has a confidence of at least ``threshold``; it stops before
    the first word that falls short, after a sentence's end, at a line break, or where the
    provider gives no confidence. The request's ``max_tokens`` bounds the whole."""
    first, decided = _word_settled(text)
    if not decided:
        return (stop_at(text, WORD), True) if final else (first, False)
    at = len(first)
    for _ in range(MAX_SURE_WORDS - 1):
        if _SENTENCE_RE.search(text, max(at - 1, 0), at):
            break
        match = _NEXT_WORD_RE.match(text, at)
        if match is None:  # a line break next, or the end of what came so far
            done = final or (at < len(text) and text[at:].lstrip(" \t")[:1] != "")
            return text[:at], done
        complete = final or match.end() < len(text)
        if _lowest(confidences, at + offset, match.end() + offset) < threshold:
            return text[:at], True
        if not complete:
            return text[:at], False
        at = match.end()
    return text[:at], True


def _lowest(confidences: Confidences, start: int, end: int) -> float:
    """The lowest confidence of the pieces overlapping ``text[start:end]`` (0 when unknown).
    Piece ends ascend: the first overlapping piece is found by bisection."""
    first = bisect.bisect_right(confidences, start, key=lambda piece: piece[0])
    lowest = 1.0
    for index in range(first, len(confidences)):
        piece_end, confidence = confidences[index]
        lowest = min(lowest, confidence if confidence is not None else 0.0)
        if piece_end >= end:
            break
    return lowest


def settled(text: str, rule: str) -> tuple[str, bool]:
    """For a stream that so far produced ``text``: the part that is in the final suggestion
    whatever comes next (a prefix of ``stop_at`` of any continuation), and whether the rule
    has decided (more text cannot change the suggestion)."""
    if rule == WORD:
        return _word_settled(text)
    if rule == SENTENCE:
        match = _SENTENCE_DONE_RE.search(text)
        return (text[: match.end()], True) if match else (text, False)
    if rule == PHRASE:
        match = _PHRASE_RE.match(text)
        if match is None:
            # Only whitespace yet (undecided), or punctuation first: then it is all of it.
            return ("", False) if not text.strip() else (text, False)
        return match.group(0).rstrip(), match.end() < len(text)
    return text, False


def _word_settled(text: str) -> tuple[str, bool]:
    start = len(text) - len(text.lstrip())
    if start == len(text):
        return text, False
    word = start
    while word < len(text) and text[word] in _MARKS:
        word += 1
    if word > start:  # marks first: the word after them, if one follows on this line
        marks_end = word
        while word < len(text) and text[word] in " \t":
            word += 1
        if word == len(text):
            return text[:marks_end], False
        if text[word].isspace() or text[word] in _MARKS:
            return text[:marks_end], True
    for index in range(word + 1, len(text)):
        if text[index].isspace() or text[index] in _MARKS:
            return text[:index], True
    return text, False


def heal_prompt(prompt: str) -> tuple[str, str]:
    """(the prompt without its trailing spaces, those spaces: what the model must write)."""
    healed = prompt.rstrip(" ")
    return healed, prompt[len(healed) :]


def heal_output(text: str, leftover: str, line_start: bool = False) -> str:
    """What the editor sees from a healed prompt's output: the model had to write the space
    the editor already typed; if it did not (it went on with the word), there is nothing.
    At the start of a line (``line_start``: the prompt ends with a line break) the line
    breaks the model writes before its first word are dropped: the cursor is on a fresh line
    already (SmolLM2 writes one more after a blank line most of the time)."""
    if leftover and not text.startswith(leftover):
        return ""
    text = text[len(leftover) :]
    return text.lstrip("\r\n") if line_start else text


def _line_breaks_first(text: str) -> int:
    return len(text) - len(text.lstrip("\r\n"))


async def shape(
    pieces: AsyncIterator[str],
    *,
    leftover: str,
    rule: str,
    sure: float = DEFAULT_SURE,
    line_start: bool = False,
) -> AsyncIterator[str]:
    """``pieces`` as the editor should see them: healed (``leftover`` removed, or nothing at
    all if the model did not write it; ``line_start``: see ``heal_output``) and cut by
    ``rule`` (``sure``: the ``sure`` rule's threshold). Returning closes ``pieces``, which
    stops the generation (its provider cancels on close)."""
    iterator = aiter(pieces)
    raw = ""  # the model's text, leftover included
    sent = ""
    ends: list[tuple[int, float | None]] = []  # each piece's end in raw, and its confidence
    try:
        async for piece in iterator:
            raw += piece
            ends.append((len(raw), getattr(piece, "confidence", None)))
            if len(raw) < len(leftover):
                if not leftover.startswith(raw):
                    return  # not the typed space: nothing to show
                continue
            if not raw.startswith(leftover):
                return
            text = raw[len(leftover) :]
            skip = len(leftover) + (_line_breaks_first(text) if line_start else 0)
            text = raw[skip:]
            if not text:
                continue
            if rule == SURE:
                safe, decided = sure_cut(text, ends, sure, final=False, offset=skip)
            else:
                safe, decided = settled(text, rule)
            if len(safe) > len(sent):
                yield safe[len(sent) :]
                sent = safe
            if decided:
                return
        if len(raw) >= len(leftover):
            healed = heal_output(raw, leftover, line_start)
            if rule == SURE:
                skip = len(raw) - len(healed)
                final = sure_cut(healed, ends, sure, final=True, offset=skip)[0]
            else:
                final = stop_at(healed, rule)
            if len(final) > len(sent):
                yield final[len(sent) :]
    finally:
        closer = getattr(iterator, "aclose", None)
        if closer is not None:
            await closer()
