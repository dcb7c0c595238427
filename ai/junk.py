"""Whether a completion is junk: text an editor should never see as ghost text.

Junk is worse than no suggestion (users learn to ignore the ghost text), so the server drops
it before showing it and ``tether bench quality`` counts it. The rules are cheap string checks
on the suggestion and the text right before the cursor; each names its kind, which is what a
dropped suggestion's ``suggestion.end`` reason says. Knows nothing of models or sockets.
"""

from __future__ import annotations

import re
import unicodedata

EMPTY = "empty"
ECHO = "echo"  # repeats the text before the cursor
LOOP = "loop"  # repeats itself
LANGUAGE = "language"  # another script than the document's
CHAT = "chat"  # an assistant talking ("Sure!") instead of continuing the text
KINDS = (EMPTY, ECHO, LOOP, LANGUAGE, CHAT)

_WORD = re.compile(r"\w+", re.UNICODE)
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


def junk_kind(suggestion: str, before: str) -> str | None:
    """The kind of junk ``suggestion`` is at a cursor preceded by ``before``, or None."""
    said = words(suggestion)
    if not said:
        return EMPTY
    if _CHAT.search(suggestion) or _CHAT_ANYWHERE.search(suggestion):
        return CHAT
    if _is_loop(said):
        return LOOP
    if _is_echo(said, words(before[-400:])):
        return ECHO
    if _foreign_script(suggestion, before[-2000:]):
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


def _is_echo(said: list[str], before: list[str]) -> bool:
    """The suggestion restarts with the word just typed ("the" after "...of the "), or copies
    a run of 4 or more words (all of it, if shorter) that the text before already has."""
    if not before:
        return False
    if said[0] == before[-1] and len(said[0]) > 1:
        return True
    run = min(4, len(said))
    if run < 2:
        return False
    grams = {tuple(before[i : i + run]) for i in range(len(before) - run + 1)}
    return any(tuple(said[i : i + run]) in grams for i in range(len(said) - run + 1))


def _scripts(text: str) -> set[str]:
    found: set[str] = set()
    for ch in text:
        if ch.isalpha():
            name = unicodedata.name(ch, "")
            found.add(name.split(" ", 1)[0] if name else "?")
    return found


def _foreign_script(suggestion: str, before: str) -> bool:
    """Letters of a script (LATIN, CYRILLIC, CJK, ...) the document's recent text never uses,
    making up a third of the suggestion's letters."""
    known = _scripts(before)
    if not known:
        return False
    letters = [ch for ch in suggestion if ch.isalpha()]
    if not letters:
        return False
    foreign = 0
    for ch in letters:
        name = unicodedata.name(ch, "")
        if (name.split(" ", 1)[0] if name else "?") not in known:
            foreign += 1
    return foreign * 3 >= len(letters)
