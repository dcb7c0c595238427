"""Whether a completion is junk (text an editor should never see as ghost text), and the junk
filter the server streams completions through.

Junk is worse than no suggestion (users learn to ignore the ghost text), so the server drops
it before showing it and ``tether bench quality`` counts it. The rules are cheap string checks
on the suggestion and the text right before the cursor; each names its kind, which is what a
dropped suggestion's ``suggestion.end`` reason says (``junk:<kind>``).

``JunkScreen`` is the filter on a stream: it holds text back until it can decide, releases
only text that is not junk, and stops at the first junk it sees. ``screen`` runs the same
filter on a whole text; ``tether bench quality`` scores its "junk filter" views with it, so the
bench and the server cannot disagree. Knows nothing of models or sockets.
"""

from __future__ import annotations

import collections
import re
import unicodedata
from collections.abc import AsyncIterator

from .stopping import PHRASE, WORD, settled

EMPTY = "empty"
ECHO = "echo"  # repeats the text before the cursor
LOOP = "loop"  # repeats itself
LANGUAGE = "language"  # another script than the document's
CHAT = "chat"  # an assistant talking ("Sure!") instead of continuing the text
KINDS = (EMPTY, ECHO, LOOP, LANGUAGE, CHAT)

# How much of the text before the cursor the rules read: the echo rule the last 400
# characters, the script rule all of it.
BEFORE_CHARS = 2000
_ECHO_CHARS = 400

_WORD = re.compile(r"\w+", re.UNICODE)
_WORD_START = re.compile(r"(?<!\w)\w", re.UNICODE)
_ASCII_LETTER = re.compile(r"[A-Za-z]")
_CHAT = re.compile(
    r"^\s*((sure|certainly|of course|absolutely|okay)\s*[!,.]|as an ai\b|i'm sorry\b|"
    r"i am sorry\b|i'd be happy\b|i would be happy\b|happy to help\b|great question\b|"
    r"here(?: is|'s| are) (?:the|a|your) (?:continu|complet|rewrit|next)|"
    r"assistant\s*:|user\s*:|system\s*:)",
    re.IGNORECASE,
)
_CHAT_ANYWHERE = re.compile(r"<\|im_(start|end)\|>|<start_of_turn>|<end_of_turn>")


def words(text: str) -> list[str]:
    """Lower-cased words, punctuation dropped: what "the same word" means here."""
    return [w.casefold() for w in _WORD.findall(text)]


class Before:
    """The text before the cursor as the rules read it: each part worked out once per
    request, and only when a rule asks (a one-word suggestion needs the last word and, for
    non-ASCII text, the scripts; runs of words only longer suggestions need)."""

    __slots__ = ("_grams", "_last", "_scripts", "_text", "_words")

    def __init__(self, before: str) -> None:
        self._text = before[-BEFORE_CHARS:]
        self._words: list[str] | None = None
        self._last: str | None = None
        self._grams: dict[int, set[tuple[str, ...]]] = {}
        self._scripts: set[str] | None = None

    @property
    def words(self) -> list[str]:
        if self._words is None:
            self._words = words(self._text[-_ECHO_CHARS:])
        return self._words

    @property
    def last_word(self) -> str:
        """``words[-1]`` ("" if none), found from the end without splitting the rest."""
        if self._last is None:
            tail = self._text[-_ECHO_CHARS:]
            start = max(0, len(tail) - 80)
            found = collections.deque(_WORD.finditer(tail, start), maxlen=1)
            if found and found[0].start() > start:
                self._last = found[0].group().casefold()
            else:  # no word near the end, or one that may begin further back
                self._last = self.words[-1] if self.words else ""
        return self._last

    def grams(self, run: int) -> set[tuple[str, ...]]:
        """Every run of ``run`` consecutive words."""
        grams = self._grams.get(run)
        if grams is None:
            said = self.words
            grams = self._grams[run] = {
                tuple(said[i : i + run]) for i in range(len(said) - run + 1)
            }
        return grams

    @property
    def scripts(self) -> set[str]:
        if self._scripts is None:
            self._scripts = _scripts(self._text)
        return self._scripts


def junk_kind(suggestion: str, before: str | Before) -> str | None:
    """The kind of junk ``suggestion`` is at a cursor preceded by ``before``, or None."""
    context = before if isinstance(before, Before) else Before(before)
    said = words(suggestion)
    if not said:
        return EMPTY
    if _CHAT.search(suggestion) or _CHAT_ANYWHERE.search(suggestion):
        return CHAT
    if _is_loop(said):
        return LOOP
    if _is_echo(said, context):
        return ECHO
    if _foreign_script(suggestion, context.scripts):
        return LANGUAGE
    return None


def _is_loop(said: list[str]) -> bool:
    """A word three times running, or a repeated run of 2-4 words ("the the the",
    "of the model of the model")."""
    for i in range(len(said) - 2):
        if said[i] == said[i + 1] == said[i + 2]:
            return True
    for size in (2, 3, 4):
        for i in range(len(said) - 2 * size + 1):
            if said[i : i + size] == said[i + size : i + 2 * size]:
                return True
    return False


def _is_echo(said: list[str], before: Before) -> bool:
    """The suggestion restarts with the word just typed ("the" after "...of the "), or copies
    a run of 4 or more words (all of it, if shorter) that the text before already has."""
    last = before.last_word
    if not last:
        return False
    if said[0] == last and len(said[0]) > 1:
        return True
    run = min(4, len(said))
    if run < 2:
        return False
    grams = before.grams(run)
    return any(tuple(said[i : i + run]) in grams for i in range(len(said) - run + 1))


def _script(ch: str) -> str:
    name = unicodedata.name(ch, "")
    return name.split(" ", 1)[0] if name else "?"


def _scripts(text: str) -> set[str]:
    if text.isascii():  # the common case, without a name lookup per character
        return {"LATIN"} if _ASCII_LETTER.search(text) else set()
    return {_script(ch) for ch in set(text) if ch.isalpha()}


def _foreign_script(suggestion: str, known: set[str]) -> bool:
    """Letters of a script (LATIN, CYRILLIC, CJK, ...) the document's recent text never uses,
    making up a third of the suggestion's letters."""
    if not known or (suggestion.isascii() and "LATIN" in known):
        return False  # ASCII letters are all LATIN
    letters = [ch for ch in suggestion if ch.isalpha()]
    if not letters:
        return False
    foreign = sum(1 for ch in letters if _script(ch) not in known)
    return foreign * 3 >= len(letters)


# ---- the filter on a stream ------------------------------------------------------------------


class JunkScreen:
    """The junk filter on one completion's stream (sans-IO): ``feed`` it the stream's text as it
    comes (after the stopping rule), ``close`` it at the end; each returns the text that may be
    shown now. Once ``kind`` is set the suggestion is junk: the stream must end there, and
    nothing more is shown.

    When it decides: text is released only up to where a word starts (a word is shown whole,
    never half of it), and only if everything released so far is not junk (``junk_kind``).
    The first part is held back until it is decided: with the ``word`` and ``phrase`` rules
    that is the whole suggestion (nothing is shown until the stream has ended); with longer
    rules it is the first phrase (up to 4 words or a clause mark: what chat talk such as
    "Sure!" or "As an AI" needs). After it, each word goes out once the next one starts, and
    the stream ends before a word that makes it a loop, a copy of the text before the cursor
    or another script. Every decision depends on the text alone, never on how it was split
    into pieces."""

    __slots__ = ("_before", "_head_done", "_hold_all", "_scanned", "kind", "shown", "text")

    def __init__(self, before: str, rule: str) -> None:
        self._before = Before(before)
        self._hold_all = rule in (WORD, PHRASE)  # the suggestion is one short unit
        self._head_done = False
        self._scanned = 1  # where the next word start may be (a start at 0 decides nothing)
        self.text = ""  # all the stream's text so far, shown or not
        self.shown = 0  # how much of it is released
        self.kind: str | None = None

    def feed(self, piece: str) -> str:
        if self.kind is not None:
            return ""
        self.text += piece
        if self._hold_all:
            return ""
        released = self.shown
        for match in _WORD_START.finditer(self.text, self._scanned):
            self._scanned = match.start() + 1
            if not self._judge(match.start(), self._head_done or self._head_ends(match.start())):
                break
        self._scanned = max(self._scanned, len(self.text))
        return self.text[released : self.shown]

    def close(self) -> str:
        """The stream ended: the rest, unless it makes the suggestion junk."""
        if self.kind is not None:
            return ""
        released = self.shown
        self._judge(len(self.text), True)  # the whole text is decided now
        return self.text[released : self.shown]

    def _head_ends(self, start: int) -> bool:
        """Whether the first phrase is over once a word begins at ``start``."""
        return settled(self.text[: start + 1], PHRASE)[1]

    def _judge(self, end: int, decided: bool) -> bool:
        """Release ``text[:end]`` if it is ``decided`` and clean; False once it is junk."""
        if not decided:
            return True  # the first phrase is not complete yet: hold on
        self._head_done = True
        self.kind = junk_kind(self.text[:end], self._before)
        if self.kind is not None:
            return False
        self.shown = end
        return True


class RewriteScreen(JunkScreen):
    """The junk filter on a rewrite: the passage rewritten, never talk about it. The first
    phrase is held until it is complete, so an assistant's "Sure! Here is the rewritten
    passage:" ends it as chat before anything is shown; then the rest goes out as it comes,
    and a chat-template marker anywhere ends it. (What a small model says after the passage is
    cut by the rewrite's stop at a blank line: ``ai.text.context.ContextBuilder.rewrite``.)"""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__("", PHRASE)

    def feed(self, piece: str) -> str:
        if self.kind is not None:
            return ""
        self.text += piece
        if not self._head_done:
            if not settled(self.text, PHRASE)[1]:
                return ""
            self._head_done = True
        return self._release()

    def close(self) -> str:
        if self.kind is not None:
            return ""
        if not self.text.strip():
            self.kind = EMPTY
            return ""
        return self._release()

    def _release(self) -> str:
        if _CHAT.search(self.text) or _CHAT_ANYWHERE.search(self.text):
            self.kind = CHAT
            return ""
        released, self.shown = self.shown, len(self.text)
        return self.text[released:]


def screen(text: str, before: str, rule: str) -> tuple[str, str | None]:
    """The junk filter on a whole suggestion: (what the editor is shown of it, the junk kind
    that ended it or None). Exactly what ``JunkScreen`` shows of any stream of ``text``."""
    screen_ = JunkScreen(before, rule)
    shown = screen_.feed(text)
    return shown + screen_.close(), screen_.kind


async def screened(pieces: AsyncIterator[str], screen_: JunkScreen) -> AsyncIterator[str]:
    """``pieces`` through ``screen_``: what may be shown, as soon as it may. Returning early
    (junk) closes ``pieces``, which stops the generation."""
    iterator = aiter(pieces)
    try:
        async for piece in iterator:
            released = screen_.feed(piece)
            if released:
                yield released
            if screen_.kind is not None:
                return
        released = screen_.close()
        if released:
            yield released
    finally:
        closer = getattr(iterator, "aclose", None)
        if closer is not None:
            await closer()
