"""How long a completion is, and token healing: the rules ``tether bench quality`` measured,
applied to the model's stream as it comes (the generation stops as soon as a rule has decided).

Healing: a prompt that ends with the space the editor just typed makes small models go on
with a word they would not start after a space; the healed prompt stops before that space and
the model writes it. If the model does not (it continued the last word instead), nothing is
shown. Stopping rules, on the text after the cursor: ``word`` (one word, its trailing
punctuation not included; clause marks the model writes before it come with it: ", and" — a
lone "," would be screened as empty, and a model at a clause end writes one first most of the
time), ``phrase`` (up to 4 words or a clause mark), ``sentence`` (through the first
sentence's end) and ``tokens`` (no rule: the token limit alone, as before).

``tether bench quality`` uses ``stop_at`` and ``heal_output`` from here, so the server shows
exactly what the bench scored. Knows nothing of models or sockets.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

WORD = "word"
PHRASE = "phrase"
SENTENCE = "sentence"
TOKENS = "tokens"
STOP_RULES = (WORD, PHRASE, SENTENCE, TOKENS)

_MARKS = ",;:.!?"
# One word; clause marks before it (the model closing the clause the editor is in) come with
# the word after them on the same line (", and"), or alone if a line break follows.
_WORD_RE = re.compile(r"\s*(?:[,;:.!?]+[ \t]*)?[^\s,;:.!?]+|\s*[,;:.!?]+")
_PHRASE_RE = re.compile(r"\s*(?:[^\s,;:.!?]+[ \t]*){1,4}")
_SENTENCE_RE = re.compile(r"[.!?](?=\s|$)")
_SENTENCE_DONE_RE = re.compile(r"[.!?](?=\s)")


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


def heal_output(text: str, leftover: str) -> str:
    """What the editor sees from a healed prompt's output: the model had to write the space
    the editor already typed; if it did not (it went on with the word), there is nothing."""
    if not leftover:
        return text
    if text.startswith(leftover):
        return text[len(leftover) :]
    return ""


async def shape(pieces: AsyncIterator[str], *, leftover: str, rule: str) -> AsyncIterator[str]:
    """``pieces`` as the editor should see them: healed (``leftover`` removed, or nothing at
    all if the model did not write it) and cut by ``rule``. Returning closes ``pieces``,
    which stops the generation (its provider cancels on close)."""
    iterator = aiter(pieces)
    raw = ""  # the model's text, leftover included
    sent = ""
    try:
        async for piece in iterator:
            raw += piece
            if len(raw) < len(leftover):
                if not leftover.startswith(raw):
                    return  # not the typed space: nothing to show
                continue
            if not raw.startswith(leftover):
                return
            safe, decided = settled(raw[len(leftover) :], rule)
            if len(safe) > len(sent):
                yield safe[len(sent) :]
                sent = safe
            if decided:
                return
        if len(raw) >= len(leftover):
            final = stop_at(heal_output(raw, leftover), rule)
            if len(final) > len(sent):
                yield final[len(sent) :]
    finally:
        closer = getattr(iterator, "aclose", None)
        if closer is not None:
            await closer()
