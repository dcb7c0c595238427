"""The suggestion cache: exact, type-ahead and semantic layers, scoped per document, bounded.

A pure data structure: vectors come in already computed (the engine gets them from the
Embedder), time comes from an injectable clock. Knows nothing of models, sockets or rooms.

Scope is the isolation guarantee: every entry lives in exactly one scope, either one document's
or the explicitly shared template scope (whose entries, by the caller's promise, hold no
document text). Each scope has its own exact table, type-ahead table and FAISS index, and a
lookup for document A searches only A's scope and the template scope, so it cannot reach an
entry stored for document B.
"""

from __future__ import annotations

import hashlib
import itertools
import re
import time
import unicodedata
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

import faiss
import numpy as np

from ..text.context import PROMPT_VERSION
from ..text.positions import common_prefix

EXACT = "exact"
TYPEAHEAD = "typeahead"
SEMANTIC = "semantic"
PREFETCH = "prefetch"  # an exact hit on an answer computed ahead, served for the first time
LAYERS = (EXACT, TYPEAHEAD, SEMANTIC, PREFETCH)

TYPEAHEAD_CHARS = 64  # text before what was typed that must equal the cached window's end
TYPO_CANDIDATES = 32  # entries a typo-fixed lookup compares the cursor paragraph with, at most
# Entries ``semantic_possible`` compares, at most; past them it answers "possible" and lets the
# embedding (off the loop) and the index decide: a peek must not scan thousands on the loop.
POSSIBLE_CANDIDATES = 256
_ENTRY_OVERHEAD = 256  # bytes: dict slots, keys and the entry object, roughly
_SPACES = re.compile(r"[ \t\u00a0]+")
_BREAKS = re.compile(r"\n{2,}")
_WORDS = re.compile(r"\w+(?:['\u2019.,:/-]\w+)*")
_TOKENS = re.compile(r"\w+(?:['\u2019.,:/-]\w+)*|[^\w\s]")
# Words whose change rarely changes the right continuation; negations are NOT among them.
_STOPWORDS = frozenset(
    "a an the this that these those of to for in on at by with from into about as and or but so"
    " then than too also just very any some all each every is are was were be been being am"
    " it its which who whom whose what do does did has have had will would shall should can"
    " could may might must there here please".split()
)
# Words that must match exactly: negations, and every personal pronoun (who does it changes
# what comes next: "I will send it, so you..." against "You will send it, so you...").
_STRICT = frozenset(
    "not no never nor none nothing nobody neither cannot without i me my mine myself we us our"
    " ours ourselves you your yours yourself yourselves he him his himself she her hers herself"
    " they them their theirs themselves".split()
)
# Contractions written out, so "we're" and "we are" compare equal and "isn't" shows its "not".
_CONTRACTIONS = (
    (re.compile(r"\bthank you\b"), "thanks"),  # the one set phrase that holds a pronoun
    (re.compile(r"\b(can)['\u2019]t\b"), r"\1 not"),
    (re.compile(r"\bwon['\u2019]t\b"), "will not"),
    (re.compile(r"\b(\w+)n['\u2019]t\b"), r"\1 not"),
    (re.compile(r"\b(\w+)['\u2019]re\b"), r"\1 are"),
    (re.compile(r"\b(\w+)['\u2019]ll\b"), r"\1 will"),
    (re.compile(r"\b(\w+)['\u2019]ve\b"), r"\1 have"),
    (re.compile(r"\b(\w+)['\u2019]d\b"), r"\1 would"),
    (re.compile(r"\b(\w+)['\u2019]m\b"), r"\1 am"),
    (re.compile(r"\b(\w+)['\u2019]s\b"), r"\1"),  # is, has or possessive: none changes much
)


@dataclass(frozen=True, slots=True)
class CacheSettings:
    max_entries: int = 4096
    max_bytes: int = 16 * 2**20
    ttl_seconds: float = 600.0
    # Chosen from tests/ai/test_semantic_threshold.py's table (precision vs hit rate).
    threshold: float = 0.90
    # The semantic layer also needs these last words before the cursor to agree exactly
    # (after normalisation): for an edit suggestion one changed word can flip the answer.
    agreement_words: int = 4
    # Type-ahead: how much of the text before what was typed must equal the cached window.
    typeahead_chars: int = TYPEAHEAD_CHARS
    # Similarity alone cannot tell "is allergic" from "is not allergic" (MiniLM: 0.99), so a
    # semantic hit also needs the paragraph's content words to agree up to typos; see
    # ``same_content``. Off only to measure what the embedding alone would serve.
    content_guard: bool = True
    search_k: int = 8  # nearest neighbours examined per scope before the agreement filter
    dimension: int = 384


@dataclass(frozen=True, slots=True)
class CacheQuery:
    """What a request is cached under. ``context`` is the whole context the answer depends on
    (e.g. the built prompt's text); ``window`` the text right before the cursor."""

    document: str
    kind: str
    model: str
    context: str
    window: str
    prompt_version: str = PROMPT_VERSION


@dataclass(frozen=True, slots=True)
class CacheHit:
    layer: str
    text: str  # what to serve: the whole answer, or for type-ahead the untyped rest
    entry_id: int
    similarity: float | None = None


_Scope = tuple[str, str]  # ("doc", name) or ("template", "")
TEMPLATE: _Scope = ("template", "")


@dataclass(slots=True, eq=False)
class _Entry:
    id: int
    scope: _Scope
    exact_key: bytes
    variant: tuple[str, str, str]  # kind, model, prompt version
    tail: str  # the window's last ``typeahead_chars`` normalised characters
    agreement: str
    content: tuple[str, ...]
    text: str  # the cursor paragraph up to the cursor (``embedding_text``): typo fixes
    answer: str
    size: int
    expires: float
    has_vector: bool
    prefetched: bool  # computed ahead of any request (prefetch), not for one
    used: bool = False


@dataclass(slots=True)
class _ScopeTables:
    index: faiss.IndexIDMap2
    exact: dict[bytes, int] = field(default_factory=dict)
    by_tail: dict[str, set[int]] = field(default_factory=dict)
    by_agreement: dict[str, set[int]] = field(default_factory=dict)
    longest_answer: int = 0


class SuggestionCache:
    def __init__(
        self,
        settings: CacheSettings | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings or CacheSettings()
        self._clock = clock
        self._entries: OrderedDict[int, _Entry] = OrderedDict()  # least recently used first
        self._by_birth: OrderedDict[int, float] = OrderedDict()  # insertion = expiry order
        self._scopes: dict[_Scope, _ScopeTables] = {}
        self._next_id = 1
        self.bytes = 0
        self.hits: Counter[str] = Counter()
        self.misses = 0
        self.evictions: Counter[str] = Counter()  # by reason: entries, bytes, ttl, replaced
        self.prefetch_used = 0  # prefetched entries that served a request
        self.prefetch_unused = 0  # prefetched entries removed before serving any

    def __len__(self) -> int:
        return len(self._entries)

    # ---- lookup -----------------------------------------------------------------------------

    def lookup(
        self, query: CacheQuery, vector: np.ndarray | None = None, *, final: bool = True
    ) -> CacheHit | None:
        """The first layer that can serve ``query``: exact, then type-ahead, then semantic
        (only with a ``vector`` of the query's context). ``final=False`` for a first look
        that will be followed by another (with the vector): its miss is not counted."""
        self._expire()
        scopes = [s for s in (_doc(query.document), TEMPLATE) if s in self._scopes]
        variant = (query.kind, query.model, query.prompt_version)
        window = normalise(query.window)
        hit = (
            self._exact(scopes, exact_key(query))
            or self._typeahead(scopes, variant, window)
            or self._typo_fixed(scopes, variant, window)
            or (self._semantic(scopes, variant, window, vector) if vector is not None else None)
        )
        if hit is None:
            self.misses += final
            return None
        entry = self._entries[hit.entry_id]
        if entry.prefetched and not entry.used:
            self.prefetch_used += 1
            if hit.layer == EXACT:
                hit = CacheHit(PREFETCH, hit.text, hit.entry_id)
        entry.used = True
        self.hits[hit.layer] += 1
        self._entries.move_to_end(hit.entry_id)
        return hit

    def semantic_possible(self, query: CacheQuery) -> bool:
        """Whether some vector could make ``lookup`` find a semantic hit for ``query``: an
        entry of its scopes has the same variant, the same last words and (with the guard)
        the same content words up to typos. False means embedding the query's context cannot
        change the answer, so it need not be computed (a peek: nothing is counted). Bounded:
        past ``POSSIBLE_CANDIDATES`` entries ending in the same words it says True, unchecked
        (a document whose entries all end alike, made to, costs an embedding, not a scan)."""
        self._expire()
        variant = (query.kind, query.model, query.prompt_version)
        window = normalise(query.window)
        agreement = _agreement(window, self.settings.agreement_words)
        content: tuple[str, ...] | None = None
        compared = 0
        for scope in (_doc(query.document), TEMPLATE):
            tables = self._scopes.get(scope)
            for entry_id in tables.by_agreement.get(agreement, ()) if tables else ():
                if compared == POSSIBLE_CANDIDATES:
                    return True
                compared += 1
                entry = self._entries[entry_id]
                if entry.variant != variant:
                    continue
                if not self.settings.content_guard:
                    return True
                content = content_words(window) if content is None else content
                if same_content(entry.content, content):
                    return True
        return False

    def has_exact(self, query: CacheQuery) -> bool:
        """Whether the exact layer holds ``query`` (a peek: no hit or miss is counted)."""
        self._expire()
        key = exact_key(query)
        scopes = (_doc(query.document), TEMPLATE)
        return any(key in self._scopes[s].exact for s in scopes if s in self._scopes)

    def _exact(self, scopes: list[_Scope], key: bytes) -> CacheHit | None:
        for scope in scopes:
            entry_id = self._scopes[scope].exact.get(key)
            if entry_id is not None:
                return CacheHit(EXACT, self._entries[entry_id].answer, entry_id)
        return None

    def _typeahead(
        self, scopes: list[_Scope], variant: tuple[str, str, str], window: str
    ) -> CacheHit | None:
        """The editor typed the first ``n`` characters of a cached answer where it was given:
        the window minus those characters is the cached window, and they begin the answer."""
        for scope in scopes:
            tables = self._scopes[scope]
            for typed_len in range(1, min(len(window), tables.longest_answer)):
                before, typed = window[:-typed_len], window[-typed_len:]
                for entry_id in tables.by_tail.get(_tail(before, self.settings), ()):
                    entry = self._entries[entry_id]
                    rest = _rest_after(entry.answer, typed) if entry.variant == variant else None
                    if rest:
                        return CacheHit(TYPEAHEAD, rest, entry_id)
        return None

    def _typo_fixed(
        self, scopes: list[_Scope], variant: tuple[str, str, str], window: str
    ) -> CacheHit | None:
        """The semantic layer's answer where no embedding is needed to decide it: the cursor
        paragraph is an entry's with one word's typo fixed (or made), all else identical to the
        character, and the content guard agrees. Such a pair is as similar as two texts get,
        so the embedding (tens of ms when asked right after the edit) would only confirm it.
        Off with the content guard, which it is made of."""
        if not self.settings.content_guard:
            return None
        agreement = _agreement(window, self.settings.agreement_words)
        text: str | None = None
        content: tuple[str, ...] | None = None
        for scope in scopes:
            same_words = self._scopes[scope].by_agreement.get(agreement, ())
            # Bounded per lookup: a document whose entries all end in the same words (made to)
            # must not make every request compare against thousands of them.
            for entry_id in itertools.islice(same_words, TYPO_CANDIDATES):
                entry = self._entries[entry_id]
                if entry.variant != variant:
                    continue
                text = embedding_text(window) if text is None else text
                if not one_typo_apart(entry.text, text):
                    continue
                content = content_words(window) if content is None else content
                if same_content(entry.content, content):
                    return CacheHit(SEMANTIC, entry.answer, entry_id)
        return None

    def _semantic(
        self,
        scopes: list[_Scope],
        variant: tuple[str, str, str],
        window: str,
        vector: np.ndarray,
    ) -> CacheHit | None:
        query = _as_row(vector, self.settings.dimension)
        agreement = _agreement(window, self.settings.agreement_words)
        content = content_words(window)
        guard = self.settings.content_guard
        best: CacheHit | None = None
        for scope in scopes:
            index = self._scopes[scope].index
            if index.ntotal == 0:
                continue
            scores, ids = index.search(query, min(self.settings.search_k, index.ntotal))
            for score, entry_id in zip(scores[0], ids[0], strict=True):
                if entry_id < 0 or score < self.settings.threshold:
                    continue
                entry = self._entries[int(entry_id)]
                if entry.variant != variant or entry.agreement != agreement:
                    continue
                if guard and not same_content(entry.content, content):
                    continue
                if best is None or score > (best.similarity or 0.0):
                    best = CacheHit(SEMANTIC, entry.answer, entry.id, float(score))
                break  # results come best first: the first that agrees is this scope's best
        return best

    # ---- store ------------------------------------------------------------------------------

    def put(
        self,
        query: CacheQuery,
        answer: str,
        vector: np.ndarray | None = None,
        *,
        shared: bool = False,
        prefetched: bool = False,
    ) -> int | None:
        """Store ``answer`` for ``query`` in its document's scope, or with ``shared=True`` in
        the template scope (only for contexts that hold no document text). ``prefetched``: it
        was computed ahead, before anyone asked. Returns the entry id, or None when the entry
        alone exceeds the byte bound."""
        if not answer:
            return None
        self._expire()
        settings = self.settings
        scope = TEMPLATE if shared else _doc(query.document)
        window = normalise(query.window)
        size = _ENTRY_OVERHEAD + len(answer.encode()) + 2 * len(window.encode())
        size += settings.dimension * 4 if vector is not None else 0
        if size > settings.max_bytes:
            return None
        tables = self._scopes.get(scope) or self._new_scope(scope)
        key = exact_key(query)
        replaced = tables.exact.get(key)
        if replaced is not None:
            self._remove([replaced], "replaced")
            tables = self._scopes.get(scope) or self._new_scope(scope)
        entry = _Entry(
            id=self._next_id,
            scope=scope,
            exact_key=key,
            variant=(query.kind, query.model, query.prompt_version),
            tail=_tail(window, settings),
            agreement=_agreement(window, settings.agreement_words),
            content=content_words(window),
            text=embedding_text(window),
            answer=answer,
            size=size,
            expires=self._clock() + settings.ttl_seconds,
            has_vector=vector is not None,
            prefetched=prefetched,
        )
        self._next_id += 1
        self._entries[entry.id] = entry
        self._by_birth[entry.id] = entry.expires
        self.bytes += size
        tables.exact[key] = entry.id
        tables.by_tail.setdefault(entry.tail, set()).add(entry.id)
        tables.by_agreement.setdefault(entry.agreement, set()).add(entry.id)
        tables.longest_answer = max(tables.longest_answer, len(normalise(answer)) + 1)
        if vector is not None:
            row = _as_row(vector, settings.dimension)
            tables.index.add_with_ids(row, np.array([entry.id], dtype=np.int64))
        self._bound()
        return entry.id if entry.id in self._entries else None

    def add_vector(self, entry_id: int, vector: np.ndarray) -> bool:
        """Give a stored entry its context's vector once computed (the semantic layer can then
        find it). False when the entry is gone or already has one."""
        entry = self._entries.get(entry_id)
        if entry is None or entry.has_vector:
            return False
        extra = self.settings.dimension * 4
        entry.has_vector = True
        entry.size += extra
        self.bytes += extra
        row = _as_row(vector, self.settings.dimension)
        self._scopes[entry.scope].index.add_with_ids(row, np.array([entry_id], dtype=np.int64))
        self._bound()
        return True

    def forget(self, document: str) -> int:
        """Drop every entry of one document (deleted, or its readers changed)."""
        ids = [e.id for e in self._entries.values() if e.scope == _doc(document)]
        self._remove(ids, "forgotten")
        return len(ids)

    def ntotal(self, document: str | None) -> int:
        """Vectors in a document's FAISS index, or with None the template scope's."""
        tables = self._scopes.get(TEMPLATE if document is None else _doc(document))
        return 0 if tables is None else tables.index.ntotal

    def expire(self) -> None:
        """Drop entries past their TTL now (lookups and stores also do, as they go)."""
        self._expire()

    def vectors(self) -> int:
        """Vectors in every scope's FAISS index together."""
        return sum(tables.index.ntotal for tables in self._scopes.values())

    def stats(self) -> dict[str, int]:
        out = {f"hits_{layer}": self.hits[layer] for layer in LAYERS}
        out.update({f"evictions_{why}": n for why, n in self.evictions.items()})
        out.update(misses=self.misses, entries=len(self._entries), bytes=self.bytes)
        out.update(vectors=self.vectors(), prefetch_used=self.prefetch_used)
        out.update(prefetch_unused=self.prefetch_unused)
        return out

    # ---- bounds -----------------------------------------------------------------------------

    def _expire(self) -> None:
        now = self._clock()
        expired = []
        for entry_id, expires in self._by_birth.items():
            if expires > now:
                break
            expired.append(entry_id)
        self._remove(expired, "ttl")

    def _bound(self) -> None:
        settings = self.settings
        while len(self._entries) > settings.max_entries:
            self._remove([next(iter(self._entries))], "entries")
        victims: list[int] = []
        excess = self.bytes - settings.max_bytes
        for entry in self._entries.values():
            if excess <= 0:
                break
            victims.append(entry.id)
            excess -= entry.size
        self._remove(victims, "bytes")

    def _remove(self, ids: list[int], reason: str) -> None:
        vectors: dict[_Scope, list[int]] = {}
        touched: set[_Scope] = set()
        for entry_id in ids:
            entry = self._entries.pop(entry_id)
            del self._by_birth[entry_id]
            self.bytes -= entry.size
            self.evictions[reason] += 1
            self.prefetch_unused += entry.prefetched and not entry.used
            tables = self._scopes[entry.scope]
            touched.add(entry.scope)
            del tables.exact[entry.exact_key]
            _discard(tables.by_tail, entry.tail, entry_id)
            _discard(tables.by_agreement, entry.agreement, entry_id)
            if entry.has_vector:
                vectors.setdefault(entry.scope, []).append(entry_id)
        for scope, scope_ids in vectors.items():
            self._scopes[scope].index.remove_ids(np.array(scope_ids, dtype=np.int64))
        for scope in touched:
            if not self._scopes[scope].exact:
                del self._scopes[scope]  # an empty scope's index is freed, not kept around

    def _new_scope(self, scope: _Scope) -> _ScopeTables:
        index = faiss.IndexIDMap2(faiss.IndexFlatIP(self.settings.dimension))
        tables = self._scopes[scope] = _ScopeTables(index)
        return tables


def normalise(text: str) -> str:
    """Unicode NFC; runs of spaces and tabs become one space, of blank lines one paragraph
    break. Leading and trailing space is kept: it changes what the right continuation is."""
    text = unicodedata.normalize("NFC", text).replace("\r\n", "\n")
    return _BREAKS.sub("\n\n", _SPACES.sub(" ", text))


def embedding_text(window: str) -> str:
    """What to embed for the semantic layer: the cursor's paragraph up to the cursor. Earlier
    paragraphs stay out, so the same boilerplate typed elsewhere in a document still matches."""
    window = normalise(window)
    return window[window.rfind("\n\n") + 2 :] if "\n\n" in window else window


def content_words(window: str) -> tuple[str, ...]:
    """The cursor paragraph's words that carry meaning, case-folded, in order."""
    text = embedding_text(window).casefold()
    for pattern, replacement in _CONTRACTIONS:
        text = pattern.sub(replacement, text)
    tokens = _TOKENS.findall(text)
    # Symbols count as content: a currency sign or an emoji (👍 against 👎, $ against €) can
    # flip the answer, and the embedding barely sees them (MiniLM: 1.000 for 👍 against 👎).
    return tuple(
        token
        for token in tokens
        if token not in _STOPWORDS
        and (len(token) > 1 or token.isalnum() or unicodedata.category(token).startswith("S"))
    )


def same_content(cached: tuple[str, ...], new: tuple[str, ...]) -> bool:
    """True when ``new`` differs from ``cached`` only by typos in content words: no content
    word added, removed or swapped, and numbers, negations and gendered pronouns identical."""
    if len(cached) != len(new):
        return False
    return all(old == now or _is_typo(old, now) for old, now in zip(cached, new, strict=True))


def _is_typo(old: str, now: str) -> bool:
    """Whether ``now`` is ``old`` mistyped (or corrected), not another word."""
    if not old or not now:
        return False
    if old in _STRICT or now in _STRICT or _has_digit(old) or _has_digit(now):
        return False
    if old.endswith("n't") or now.endswith("n't"):
        return False
    # A typo keeps a word's first letter and length class; a different word that happens
    # to be a few letters away ("increased"/"decreased", "GB"/"MB") does not.
    if old[0] != now[0] or min(len(old), len(now)) <= 3:
        return False
    allowed = 1 if max(len(old), len(now)) <= 5 else 2 if max(len(old), len(now)) <= 8 else 3
    return _edit_distance(old, now) <= allowed


def one_typo_apart(cached: str, new: str) -> bool:
    """Whether ``new`` is ``cached`` with the letters of one word changed (a typo fixed or
    made) and every other character the same; the changed word must pass ``same_content``'s
    typo rule. Linear in the texts' length."""
    if cached == new:
        return True
    if abs(len(cached) - len(new)) > 3:
        return False
    start = common_prefix(cached, new)
    tail = common_prefix(cached[start:][::-1], new[start:][::-1])
    old_mid, new_mid = cached[start : len(cached) - tail], new[start : len(new) - tail]
    if not all(part.isalpha() or not part for part in (old_mid, new_mid)):
        return False  # a space, a digit or punctuation changed: not a typo in one word
    while start > 0 and cached[start - 1].isalpha():
        start -= 1
    old_end, new_end = len(cached) - tail, len(new) - tail
    while old_end < len(cached) and cached[old_end].isalpha():
        old_end += 1
    while new_end < len(new) and new[new_end].isalpha():
        new_end += 1
    return _is_typo(cached[start:old_end].casefold(), new[start:new_end].casefold())


def _has_digit(word: str) -> bool:
    return any(ch.isdigit() for ch in word)


def _edit_distance(a: str, b: str) -> int:
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def _discard(index: dict[str, set[int]], key: str, entry_id: int) -> None:
    same = index[key]
    same.discard(entry_id)
    if not same:
        del index[key]


def _doc(document: str) -> _Scope:
    return ("doc", document)


def exact_key(query: CacheQuery) -> bytes:
    """The exact layer's key: also how the engine recognises an identical request in flight."""
    parts = (normalise(query.context), query.kind, query.model, query.prompt_version)
    return hashlib.blake2b("\0".join(parts).encode(), digest_size=16).digest()


def _tail(window: str, settings: CacheSettings) -> str:
    return window[-settings.typeahead_chars :]


def _agreement(window: str, words: int) -> str:
    """The last ``words`` words before the cursor, and whether a space follows them."""
    last = window.split()[-words:] if words > 0 else []
    return " ".join(last) + ("\u2423" if window[-1:].isspace() else "")


def _rest_after(answer: str, typed: str) -> str | None:
    """What remains of ``answer`` once ``typed`` (normalised) has been typed; None when
    ``typed`` is not how the answer begins, or is all of it."""
    for cut in range(1, len(answer)):
        head = normalise(answer[:cut])
        if head == typed:
            return answer[cut:]
        if len(head) > len(typed):
            return None
    return None


def typed_ahead(window: str, new_window: str, answer: str) -> int | None:
    """When ``new_window`` is ``window`` followed by the first characters of ``answer`` (all
    normalised), how many characters of ``answer`` were typed; None otherwise. For an answer
    still being generated, so having typed all of it so far counts."""
    window, new_window = normalise(window), normalise(new_window)
    tail = TYPEAHEAD_CHARS
    for typed_len in range(1, min(len(new_window), len(normalise(answer))) + 1):
        before, typed = new_window[:-typed_len], new_window[-typed_len:]
        if before[-tail:] != window[-tail:]:
            continue
        for cut in range(1, len(answer) + 1):
            head = normalise(answer[:cut])
            if head == typed:
                return cut
            if len(head) > len(typed):
                break
    return None


def _as_row(vector: np.ndarray, dimension: int) -> np.ndarray:
    row = np.asarray(vector, dtype=np.float32).reshape(1, dimension)
    norm = float(np.linalg.norm(row))
    # A vector not of unit length would make the threshold mean something else.
    return np.ascontiguousarray(row / norm) if norm > 0 else np.ascontiguousarray(row)
