"""What a rewrite dropped: the numbers, dates, weekdays, names, negations and clauses its passage
had that the rewrite no longer has.

A rewrite is meant to say the same thing better; a small model often says less ("...and decide
ship it friday." came back as "...we discussed many things."). ``dropped`` compares the two texts
with plain English string rules and names each loss; the server puts them on the rewrite's
``suggestion.end`` (``dropped``), and ``accept`` applies such a rewrite only when the editor
confirms them. What each rule catches and misses is written in docs/ai.md ("Faithful rewrites").

Pure and bounded: one pass over each text (at most ``READ_CHARS`` of it: far more than a
rewrite's selection or its answer can be), a set look-up per word, and at most ``MOST_LOSSES``
losses of at most ``MOST_CHARS`` characters each. Knows nothing of models, documents or sockets.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from .faithful_words import (
    ABBREVIATIONS,
    AUXILIARIES,
    CLAUSE_WORDS,
    CLOSING,
    IRREGULAR,
    LINE_MARKERS,
    MODALS,
    MONTH_ABBREVIATIONS,
    MONTHS,
    MONTHS_ONLY_CAPITALISED,
    NEGATIONS,
    NOT,
    NOT_NAMES,
    NOT_PAST,
    NOT_WITHOUT_APOSTROPHE,
    NUMBER_WORDS,
    OPENING,
    ORDINALS,
    QUIET_NUMBERS,
    RELATIVE_DAYS,
    SCALES,
    SENTENCE_ENDS,
    STOPWORDS,
    SUBJECTS,
    VERBS,
    WEEKDAY_ABBREVIATIONS,
    WEEKDAYS,
)

NUMBER = "number"
DATE = "date"
WEEKDAY = "weekday"
NAME = "name"
NEGATION = "negation"
CLAUSE = "clause"
KINDS = (NUMBER, DATE, WEEKDAY, NAME, NEGATION, CLAUSE)

READ_CHARS = 32_768  # of each text; the server's selections are ~3,000 characters at most
MOST_LOSSES = 16
MOST_CHARS = 80  # of one loss's text (a clause is cut with "…")
LARGEST = 10**18  # a run of number words is read up to this value


class Loss(NamedTuple):
    kind: str  # one of KINDS
    text: str  # as the passage has it


def dropped(passage: str, rewrite: str) -> list[Loss]:
    """What ``rewrite`` lost of ``passage``, in the passage's order (empty: nothing). The
    rewrite is read up to 4 times the passage's length (and 256 characters more): a rewrite
    longer than that is a model running on, and reading all of it would cost the event loop
    more than the passage is worth."""
    had = _read(passage[:READ_CHARS], clauses=True)
    kept = _read(rewrite[: min(READ_CHARS, 4 * len(passage) + 256)], clauses=False)
    found: list[tuple[int, int, str, str]] = []

    def lose(start: int, kind: str, text: str) -> None:
        found.append((start, KINDS.index(kind), kind, text[: 4 * MOST_CHARS]))

    for start, text, values in had.numbers:
        if any(("n", value) not in kept.atoms for value in values):
            lose(start, NUMBER, text)
    for start, text, needs in had.dates:
        if any(need.isdisjoint(kept.atoms) for need in needs):
            lose(start, DATE, text)
    for start, text, day in had.weekdays:
        if day not in kept.weekday_set:
            lose(start, WEEKDAY, text)
    for start, text, words in had.names:
        if not all(word in kept.words for word in words):
            lose(start, NAME, text)
    for start, text in _lost_negations(had, kept):
        lose(start, NEGATION, text)
    for start, text, stems in had.clauses:
        if stems.isdisjoint(kept.stems):
            lose(start, CLAUSE, text)
    found.sort(key=lambda item: (item[0], item[1]))
    losses: dict[Loss, None] = {}  # in order, each once
    for _start, _rank, kind, text in found:
        losses.setdefault(Loss(kind, _clip(text)))
        if len(losses) == MOST_LOSSES:
            break
    return list(losses)


def summary(losses: Sequence[Loss], most: int = 5) -> str:
    """For people: "the date '3 March' and the weekday 'friday'" (the first ``most``)."""
    shown = [f"the {loss.kind} '{loss.text}'" for loss in losses[:most]]
    if len(losses) > most:
        shown.append(f"{len(losses) - most} more")
    if len(shown) == 1:
        return shown[0]
    return ", ".join(shown[:-1]) + " and " + shown[-1]


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MOST_CHARS else text[: MOST_CHARS - 1] + "…"


def _lost_negations(had: _Reading, kept: _Reading) -> list[tuple[int, str]]:
    """Negations of the passage the rewrite has fewer of: "n't" and "not" are one class, and a
    negation of another class in the rewrite stands for one ("no money" → "not any money")."""
    missing = sum(had.negation_counts.values()) - sum(kept.negation_counts.values())
    if missing <= 0:
        return []
    short = {c: n - kept.negation_counts[c] for c, n in had.negation_counts.items()}
    lost: list[tuple[int, str]] = []
    for start, text, kind in had.negations:
        if short.get(kind, 0) > 0 and len(lost) < missing:
            short[kind] -= 1
            lost.append((start, text))
    return lost


# ---- reading a text --------------------------------------------------------------------------

_TOKEN = re.compile(
    r"(?P<num>\d+(?:[.,:/\-]\d+)*)(?:(?:st|nd|rd|th|am|pm)\b)?"
    r"|(?P<word>[^\W\d_]+(?:'[^\W\d_]+)*)"
    r"|(?P<nl>\n)"
    r"|(?P<mark>[^\w\s])"
)


def _stem(word: str) -> str:
    # Words repeat within a text and across rewrites: short ones are remembered (at most
    # 4096 of at most 24 characters), long ones worked out each time.
    return _short_stem(word) if len(word) <= 24 else _stem_of(word)


@functools.lru_cache(maxsize=4096)
def _short_stem(word: str) -> str:
    return _stem_of(word)


def _stem_of(word: str) -> str:
    """A crude stem of a casefolded word, the same for its inflections ("decide", "decided",
    "deciding" → "decid"; "ship", "shipped" → "ship"; "went" → "go"): what "the same word"
    means when a clause is looked for in the rewrite."""
    word = IRREGULAR.get(word, word)
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            break
    if len(word) > 3 and word.endswith("e"):  # every trailing "e", keeping 3 characters
        stripped = word.rstrip("e")
        word = stripped if len(stripped) >= 3 else word[:3]
    if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "aeiouy":
        word = word[:-1]
    return word


VERB_STEMS = frozenset(_stem(verb) for verb in VERBS) | frozenset(IRREGULAR)


def _plain(word: str) -> str:
    """Casefolded, without a possessive "'s"."""
    low = word.casefold()
    if low.endswith("'s") and len(low) > 2:
        low = low[:-2]
    return low


def _canonical(digits: str) -> str:
    """A number's value as text: "06" → "6", "3.50" → "3.5", "1,500" → "1500"."""
    if re.fullmatch(r"\d{1,3}(?:,\d{3})+", digits):
        digits = digits.replace(",", "")
    whole, _, fraction = digits.partition(".")
    whole = whole.lstrip("0") or "0"
    fraction = fraction.rstrip("0")
    return f"{whole}.{fraction}" if fraction else whole


class _Tok(NamedTuple):
    kind: str  # num, word, nl, mark
    text: str
    start: int
    end: int
    spaced: bool  # whitespace (or the text's start) right before it


@dataclass(slots=True)
class _Item:
    """A token, or a run of number words read as one number."""

    kind: str
    text: str
    start: int
    end: int
    spaced: bool
    low: str = ""
    values: tuple[str, ...] = ()  # a number's values (a range "3-5" has two)
    parts: tuple[int, ...] = ()  # a numeric date's numbers ("12/6", "2026-12-06")
    quiet: bool = False  # a number word not reported on its own ("one")
    day: int | None = None  # the value, when it could be a day of a month


@dataclass(slots=True)
class _Reading:
    """What one text holds: the facts to look for (passage) and what is there (rewrite)."""

    numbers: list[tuple[int, str, tuple[str, ...]]] = field(default_factory=list)  # values
    # start, text, what the rewrite must have: one of each set
    dates: list[tuple[int, str, tuple[frozenset[tuple[str, object]], ...]]] = field(
        default_factory=list
    )
    weekdays: list[tuple[int, str, int]] = field(default_factory=list)
    names: list[tuple[int, str, tuple[str, ...]]] = field(default_factory=list)
    negations: list[tuple[int, str, str]] = field(default_factory=list)  # start, text, class
    clauses: list[tuple[int, str, frozenset[str]]] = field(default_factory=list)
    atoms: set[tuple[str, object]] = field(default_factory=set)  # ("n", "5"), ("m", 3), ("r", ..)
    weekday_set: set[int] = field(default_factory=set)
    words: set[str] = field(default_factory=set)
    stems: set[str] = field(default_factory=set)
    negation_counts: Counter[str] = field(default_factory=Counter)


def _tokens(text: str) -> list[_Tok]:
    tokens: list[_Tok] = []
    end = 0
    for match in _TOKEN.finditer(text):
        kind = match.lastgroup or "mark"
        spaced = match.start() == 0 or match.start() > end
        end = match.end()
        if kind == "num":  # without its suffix ("3rd" is 3); the suffix is part of the text
            tokens.append(_Tok(kind, match.group("num"), match.start(), end, spaced))
        else:
            tokens.append(_Tok(kind, match.group(), match.start(), end, spaced))
    return tokens


def _items(text: str) -> list[_Item]:
    """Tokens, with digits classified and runs of number words joined into one number. A right
    single quotation mark (U+2019) is read as an apostrophe: the same length, so
    offsets are the text's."""
    text = text.replace("\u2019", "'")
    tokens = _tokens(text)
    items: list[_Item] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.kind == "word" and tok.text.casefold() in NUMBER_WORDS:
            i = _number_words(text, tokens, i, items)
            continue
        item = _Item(tok.kind, tok.text, tok.start, tok.end, tok.spaced, tok.text.casefold())
        if tok.kind == "num":
            _digits(item)
        items.append(item)
        i += 1
    return items


def _digits(item: _Item) -> None:
    text = item.text
    pieces = re.split(r"[/\-.]", text)
    short = all(1 <= len(p) <= 4 and p.isdigit() for p in pieces)
    if short and (
        ("/" in text and 2 <= len(pieces) <= 3 and "-" not in text and "." not in text)
        or ("-" in text and len(pieces) == 3 and (len(pieces[0]) == 4 or len(pieces[2]) == 4))
        or (
            "." in text
            and len(pieces) == 3
            and len(pieces[2]) in (2, 4)
            and len(pieces[0]) <= 2
            and len(pieces[1]) <= 2
        )
    ):
        item.parts = tuple(int(p) for p in pieces)
        item.values = tuple(str(p) for p in item.parts)
        return
    if ":" in text:  # a time: "09:30" is "9:30"
        item.values = (text.lstrip("0") or "0",)
        return
    values: list[str] = []
    for piece in re.split(r"[/\-]", text):
        if re.fullmatch(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?", piece):
            values.append(_canonical(piece))
        else:
            values.extend(_canonical(p) for p in piece.split(",") if p)
    item.values = tuple(values)
    if (
        len(values) == 1
        and "." not in values[0]
        and len(values[0]) <= 2
        and 1 <= int(values[0]) <= 31
    ):
        item.day = int(values[0])


def _number_words(text: str, tokens: list[_Tok], i: int, items: list[_Item]) -> int:
    """Read the run of number words at ``tokens[i]`` ("twenty-five", "two hundred and six") as
    one number item; returns the index after it."""
    total = current = 0
    first, last = i, i
    words: list[str] = []
    while i < len(tokens):
        low = tokens[i].text.casefold()
        if tokens[i].kind != "word" or low not in NUMBER_WORDS:
            break
        words.append(low)
        value = NUMBER_WORDS[low]
        if low in SCALES and value >= 1000:
            total += max(current, 1) * value
            current = 0
        elif low in SCALES or low == "dozen":
            current = max(current, 1) * value
        else:
            current += value
        last = i
        if low in ORDINALS or total + current > LARGEST:
            break  # an ordinal ends a number; "hundred hundred ..." must not grow without end
        following = tokens[i + 1] if i + 1 < len(tokens) else None
        after = tokens[i + 2] if i + 2 < len(tokens) else None
        if (
            following is not None
            and after is not None
            and after.kind == "word"
            and after.text.casefold() in NUMBER_WORDS
            and (
                (following.text == "-" and not following.spaced and not after.spaced)
                or (following.text.casefold() == "and" and low in SCALES)
            )
        ):
            i += 2
        else:
            i += 1
    start, end = tokens[first].start, tokens[last].end
    value = total + current
    item = _Item(
        "num",
        text[start:end],
        start,
        end,
        tokens[first].spaced,
        text[start:end].casefold(),
        values=(str(value),),
        quiet=len(words) == 1 and words[0] in QUIET_NUMBERS,
        day=value if 1 <= value <= 31 else None,
    )
    items.append(item)
    return last + 1


def _month(item: _Item) -> int | None:
    if item.kind != "word":
        return None
    capitalised = item.text[:1].isupper()
    low = item.low
    if low in MONTHS and (capitalised or low not in MONTHS_ONLY_CAPITALISED):
        return MONTHS[low]
    if capitalised and low in MONTH_ABBREVIATIONS:
        return MONTH_ABBREVIATIONS[low]
    return None


def _weekday(item: _Item) -> int | None:
    if item.kind != "word":
        return None
    low = item.low[:-1] if item.low.endswith("s") and item.low[:-1] in WEEKDAYS else item.low
    if low in WEEKDAYS:
        return WEEKDAYS[low]
    if item.text[:1].isupper() and low in WEEKDAY_ABBREVIATIONS:
        return WEEKDAY_ABBREVIATIONS[low]
    return None


def _is_year(item: _Item) -> bool:
    return item.kind == "num" and not item.parts and len(item.text) == 4 and item.text.isdigit()


def _dates(text: str, items: list[_Item], reading: _Reading) -> set[int]:
    """Find the dates ("3 March", "March 3rd, 2026", "2026-12-06", "12/6", "tomorrow"); the
    indexes of the items they take (their numbers are the date's, not numbers of their own)."""
    taken: set[int] = set()
    for i, item in enumerate(items):
        if item.parts:  # "12/6" is 6 December or 12 June: each number as either
            each = tuple(
                frozenset({("n", str(p)), ("m", p)} if p <= 12 else {("n", str(p))})
                for p in item.parts
            )
            reading.dates.append((item.start, text[item.start : item.end], each))
            taken.add(i)
            continue
        if item.kind == "word" and item.low in RELATIVE_DAYS:
            day = (frozenset({("r", item.low)}),)
            reading.dates.append((item.start, text[item.start : item.end], day))
            taken.add(i)
            continue
        month = _month(item)
        if month is None or i in taken:
            continue
        used = [i]
        needs: list[frozenset[tuple[str, object]]] = [frozenset({("m", month)})]
        day = i - 1  # "3 March", "3rd of March"
        if day >= 1 and items[day].low == "of" and items[day - 1].day:
            day -= 1
        if day >= 0 and items[day].day and not items[day].parts and day not in taken:
            used.extend(range(day, i))
            needs.append(frozenset({("n", str(items[day].day))}))
        after = i + 1
        if len(used) == 1 and after < len(items) and items[after].day and not items[after].parts:
            used.append(after)  # "March 3"
            needs.append(frozenset({("n", str(items[after].day))}))
            after += 1
        if after + 1 < len(items) and items[after].text == "," and _is_year(items[after + 1]):
            after += 1  # "March 3, 2026"
        if after < len(items) and _is_year(items[after]):
            used.append(after)
            needs.append(frozenset({("n", items[after].values[0])}))
        first, last = min(used), max(used)
        reading.dates.append(
            (items[first].start, text[items[first].start : items[last].end], tuple(needs))
        )
        taken.update(used)
    return taken


def _read(text: str, *, clauses: bool) -> _Reading:
    reading = _Reading()
    items = _items(text)
    taken = _dates(text, items, reading)
    for item in items:  # what the text has, wherever it is
        if item.kind == "num":
            reading.atoms.update(("n", v) for v in item.values)
            reading.atoms.update(("m", p) for p in item.parts if p <= 12)
            reading.stems.update(item.values)
        elif item.kind == "word":
            plain = _plain(item.text)
            reading.words.add(plain)
            reading.stems.add(_stem(plain))
            month = _month(item)
            if month is not None:
                reading.atoms.add(("m", month))
            if item.low in RELATIVE_DAYS:
                reading.atoms.add(("r", item.low))
            day = _weekday(item)
            if day is not None:
                reading.weekday_set.add(day)
    _Scan(text, items, taken, reading, clauses).run()
    return reading


class _Scan:
    """One pass in order: where sentences start (a capitalised word there is no name), the
    numbers, weekdays, names and negations the text has, and its clauses."""

    def __init__(
        self, text: str, items: list[_Item], taken: set[int], reading: _Reading, clauses: bool
    ) -> None:
        self.text = text
        self.items = items
        self.taken = taken
        self.reading = reading
        self.clauses = clauses
        # The current sentence's name candidates (dropped if it is a title: see
        # ``_end_sentence``), its word counts and whether it has a comma.
        self.candidates: list[list[int]] = []
        self.words = 0
        self.capitalised = 0
        self.comma = False
        # The current clause: its content stems, whether it has a verb, its span, and whether
        # it is its sentence's first.
        self.content: set[str] = set()
        self.verb = False
        self.span: tuple[int, int] | None = None
        self.first = True

    def run(self) -> None:
        at_start = line_start = True
        previous: _Item | None = None
        for index, item in enumerate(self.items):
            if item.kind == "nl":
                self._end_sentence()
                at_start = line_start = True
            elif item.kind == "mark":
                at_start = self._mark(item, previous, at_start, line_start)
                if not (line_start and item.text in LINE_MARKERS):
                    line_start = False
            elif item.kind == "num":
                self._number(index, item)
                at_start = at_start and line_start
                line_start = False
            else:
                self._word(index, item, previous, at_start)
                at_start = line_start = False
            previous = item
        self._end_sentence()

    def _mark(self, item: _Item, previous: _Item | None, at_start: bool, line_start: bool) -> bool:
        """Whether a sentence starts after this mark."""
        mark = item.text
        if mark in SENTENCE_ENDS:
            if (
                mark == "."
                and previous is not None
                and previous.kind == "word"
                and (previous.low in ABBREVIATIONS or (len(previous.text) == 1))
            ):
                return at_start
            self._end_sentence(marked=True)
            return True
        if mark in ";:,":
            self.comma = self.comma or mark == ","
            self._end_clause()
            return mark == ":"  # a title after a colon starts capitalised
        if mark == '"' or mark in OPENING:
            opening = mark in OPENING or item.spaced or previous is None
            if not opening:
                return at_start
            # A quotation opens a sentence of its own after a sentence start, ":" or ","
            # ('She said, "We ship"'); a quoted word mid-sentence ('the "Apollo" plan') does not.
            return at_start or (previous is not None and previous.text in ",:")
        if mark in CLOSING or mark == "'":
            return at_start
        return at_start and line_start and mark in LINE_MARKERS

    def _number(self, index: int, item: _Item) -> None:
        if index not in self.taken and not item.quiet and item.values:
            self.reading.numbers.append((item.start, self._text(item), item.values))
        self.content.update(item.values)
        self._extend(item)

    def _word(self, index: int, item: _Item, previous: _Item | None, at_start: bool) -> None:
        reading, low = self.reading, item.low
        if low in CLAUSE_WORDS:
            self._end_clause()
        capitalised = item.text[:1].isupper()
        plain = _plain(item.text)
        if plain not in STOPWORDS:
            self.words += 1
            self.capitalised += capitalised
        day = _weekday(item)
        negation = self._negation(low)
        if day is not None:
            reading.weekdays.append((item.start, self._text(item), day))
        elif negation is not None:
            reading.negation_counts[negation] += 1
            following = self.items[index + 1] if index + 1 < len(self.items) else None
            end = item.end
            if following is not None and following.kind in ("word", "num"):
                end = following.end  # "not ship", "never Friday"
            reading.negations.append((item.start, self.text[item.start : end], negation))
        elif (
            capitalised
            and not at_start
            and index not in self.taken
            and plain not in NOT_NAMES
            and plain not in NUMBER_WORDS
        ):
            last = self.candidates[-1] if self.candidates else None
            if last is not None and last[-1] == index - 1:
                last.append(index)
            else:
                self.candidates.append([index])
        if not self.clauses or low in CLAUSE_WORDS:
            return
        if self._verb_like(low, previous):
            self.verb = True
        if plain not in STOPWORDS and len(plain) >= 3 and not self._pronoun_contraction(plain):
            self.content.add(_stem(plain))
        self._extend(item)

    @staticmethod
    def _negation(low: str) -> str | None:
        if low in NEGATIONS:
            return NOT if low == "not" else low
        if low.endswith("n't") or low in NOT_WITHOUT_APOSTROPHE:
            return NOT
        return None

    @staticmethod
    def _pronoun_contraction(plain: str) -> bool:
        head = plain.split("'", 1)[0]
        return head != plain and head in STOPWORDS

    @staticmethod
    def _verb_like(low: str, previous: _Item | None) -> bool:
        if low in AUXILIARIES or low.endswith(("n't", "'ll", "'re", "'ve")):
            return True
        if low in IRREGULAR or _stem(low) in VERB_STEMS:
            return True
        if previous is not None and previous.kind == "word" and low not in STOPWORDS:
            if previous.low in SUBJECTS or previous.low in MODALS:
                return True
        return low.endswith("ed") and len(low) >= 5 and low not in NOT_PAST

    def _text(self, item: _Item) -> str:
        return self.text[item.start : item.end]

    def _extend(self, item: _Item) -> None:
        self.span = (item.start, item.end) if self.span is None else (self.span[0], item.end)

    def _end_clause(self) -> None:
        """A clause counts if it has a verb and 2 content words (3 for a sentence's first
        clause, whose verb and object a rewrite rephrases most: "talk about" → "discussed")."""
        if self.span is None:
            return
        least = 3 if self.first else 2
        if self.clauses and self.verb and len(self.content) >= least:
            start, end = self.span
            self.reading.clauses.append((start, self.text[start:end], frozenset(self.content)))
        self.content = set()
        self.verb = False
        self.span = None
        self.first = False

    def _end_sentence(self, *, marked: bool = False) -> None:
        """A sentence ended (``marked``: by a full stop, "!" or "?"; else by a line's or the
        text's end). A title ("Launch Plan For Acme", no full stop, no comma, every word but
        the small ones capitalised) has no names: its capitals are the title's."""
        self._end_clause()
        title = not marked and not self.comma and self.words >= 3 and self.capitalised == self.words
        if not title:
            for run in self.candidates:
                first, last = self.items[run[0]], self.items[run[-1]]
                words = tuple(_plain(self.items[i].text) for i in run)
                self.reading.names.append((first.start, self.text[first.start : last.end], words))
        self.candidates = []
        self.words = self.capitalised = 0
        self.comma = False
        self.first = True
