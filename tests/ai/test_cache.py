"""SuggestionCache layers, scope isolation and bounds; the Embedder it takes vectors from."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from tether.ai.cache.embedder import DIMENSION, Embedder
from tether.ai.cache.suggestions import (
    CacheQuery,
    CacheSettings,
    SuggestionCache,
    content_words,
    embedding_text,
    one_typo_apart,
    same_content,
)


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"  # module scope, so the model loads once for this file


@pytest.fixture(scope="module")
async def embedder() -> AsyncIterator[Embedder]:
    async with Embedder() as loaded:
        yield loaded


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def q(window: str, document: str = "doc-a", *, context: str | None = None) -> CacheQuery:
    return CacheQuery(
        document, "complete", "smollm2", window if context is None else context, window
    )


def unit(seed: int) -> np.ndarray:
    vector = np.random.default_rng(seed).standard_normal(DIMENSION).astype(np.float32)
    return vector / np.linalg.norm(vector)


def near(vector: np.ndarray, seed: int, noise: float = 0.05) -> np.ndarray:
    moved = vector + noise * unit(seed)
    return moved / np.linalg.norm(moved)


# ---- the embedder -------------------------------------------------------------------------


@pytest.mark.anyio
async def test_embeddings_are_unit_float32_rows_computed_off_the_event_loop(embedder) -> None:
    loop_thread = threading.get_ident()
    vectors = await embedder.embed(["The cat sat on the mat.", "Quarterly revenue grew."])
    assert vectors.shape == (2, DIMENSION) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    worker = await embedder._run(threading.get_ident)
    assert worker != loop_thread


@pytest.mark.anyio
async def test_unchanged_texts_are_never_embedded_twice(embedder) -> None:
    before = embedder.computed
    first = await embedder.embed(
        ["A paragraph that stays.", "Another one.", "A paragraph that stays."]
    )
    assert embedder.computed == before + 2  # duplicates within a call count once
    again = await embedder.embed(["Another one.", "A paragraph that stays."])
    assert embedder.computed == before + 2
    np.testing.assert_array_equal(again[1], first[0])


class GatedEmbedder(Embedder):
    """The real memo and bookkeeping around a fake model that computes when a test says."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.batches: list[list[str]] = []
        self.started: asyncio.Queue[list[str]] = asyncio.Queue()

    @property
    def ready(self) -> bool:
        return True

    async def _compute(self, texts: list[str]) -> np.ndarray:
        self.batches.append(texts)
        self.started.put_nowait(texts)
        await self.gate.wait()
        return np.stack([unit(len(text)) for text in texts])


@pytest.mark.anyio
async def test_a_text_already_being_embedded_is_waited_for_not_computed_again() -> None:
    embedder = GatedEmbedder()
    ahead = asyncio.ensure_future(embedder.embed(["the prefetch's context"]))
    assert await embedder.started.get() == ["the prefetch's context"]
    asked = asyncio.ensure_future(embedder.embed(["the prefetch's context", "another"]))
    assert await embedder.started.get() == ["another"]  # only what no one computes yet
    asked.cancel()  # the request is superseded: the prefetch still gets its vector
    embedder.gate.set()
    (vector,) = await ahead
    assert embedder.computed == 2 and embedder.cached("the prefetch's context") is not None
    np.testing.assert_array_equal(vector, unit(len("the prefetch's context")))


# ---- exact and type-ahead -----------------------------------------------------------------


def test_the_same_context_after_whitespace_changes_is_an_exact_hit() -> None:
    cache = SuggestionCache()
    cache.put(q("We will meet on  Tuesday to review the"), " draft.")
    hit = cache.lookup(q("We will meet on Tuesday to review the"))
    assert hit is not None and hit.layer == "exact" and hit.text == " draft."
    assert cache.lookup(q("We will meet on Wednesday to review the")) is None
    assert cache.stats()["hits_exact"] == 1 and cache.stats()["misses"] == 1


def test_another_model_or_prompt_version_is_not_an_exact_hit() -> None:
    cache = SuggestionCache()
    cache.put(q("Dear team, thank you for"), " your patience.")
    other_model = CacheQuery(
        "doc-a", "complete", "gpt", "Dear team, thank you for", "Dear team, thank you for"
    )
    old_prompt = CacheQuery(
        "doc-a", "complete", "smollm2", "Dear team, thank you for", "Dear team, thank you for", "0"
    )
    assert cache.lookup(other_model) is None and cache.lookup(old_prompt) is None


def test_typing_the_start_of_a_cached_answer_serves_the_rest() -> None:
    cache = SuggestionCache()
    cache.put(q("The meeting is moved to Thursday, so please"), " update your calendars.")
    hit = cache.lookup(q("The meeting is moved to Thursday, so please upd"))
    assert hit is not None and hit.layer == "typeahead" and hit.text == "ate your calendars."
    assert cache.lookup(q("The meeting is moved to Thursday, so please upgrade")) is None
    whole = cache.lookup(q("The meeting is moved to Thursday, so please update your calendars."))
    assert whole is None  # nothing left to serve


def test_typeahead_needs_the_same_place() -> None:
    cache = SuggestionCache()
    cache.put(q("Alice will chair the meeting and the notes go to"), " Bob.")
    assert cache.lookup(q("Maria will chair the meeting and the notes go to B")) is None


# ---- semantic -----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_retyped_sentence_is_a_semantic_hit(embedder) -> None:
    cached = "Thanks for your patience while we look into this issue. We expect an update by"
    new = "Thank you for your patience while we look into this issue. We expect an update by"
    vectors = await embedder.embed([cached, new])
    cache = SuggestionCache()
    cache.put(q(cached), " the end of the day.", vectors[0])
    hit = cache.lookup(q(new), vectors[1])
    assert hit is not None and hit.layer == "semantic" and hit.text == " the end of the day."
    assert hit.similarity is not None and hit.similarity >= 0.92


@pytest.mark.anyio
async def test_a_near_miss_with_different_words_before_the_cursor_is_not_served(embedder) -> None:
    cached = "The test results were significant, so we"
    new = "The test results were not significant, so we"
    cached_vec, new_vec = await embedder.embed([cached, new])
    cache = SuggestionCache(CacheSettings(threshold=0.5))  # similarity alone would serve it
    cache.put(q(cached), " can publish the findings.", cached_vec)
    assert float(cached_vec @ new_vec) >= 0.5
    assert cache.lookup(q(new), new_vec) is None
    assert cache.stats()["hits_semantic"] == 0 and cache.stats()["misses"] == 1


@pytest.mark.anyio
async def test_a_lookup_in_one_document_never_returns_another_documents_entry(embedder) -> None:
    secret = "Salary review for Dana Whitfield: her new salary will be"
    (vector,) = await embedder.embed([secret])
    cache = SuggestionCache(CacheSettings(threshold=0.0, agreement_words=0))
    cache.put(q(secret, "hr-private"), " $98,000.", vector)
    assert cache.lookup(q(secret, "public-notes"), vector) is None  # not exact, nor semantic
    assert cache.lookup(q(secret[:-2], "public-notes"), vector) is None  # nor type-ahead
    assert cache.ntotal("public-notes") == 0 and cache.ntotal("hr-private") == 1
    hit = cache.lookup(q(secret, "hr-private"), vector)
    assert hit is not None and hit.text == " $98,000."


@pytest.mark.anyio
async def test_a_negation_far_from_the_cursor_is_not_served_despite_high_similarity(
    embedder,
) -> None:
    cached = "The patient is allergic to penicillin, so the doctor should"
    new = "The patient is not allergic to penicillin, so the doctor should"
    cached_vec, new_vec = await embedder.embed([cached, new])
    assert float(cached_vec @ new_vec) >= 0.95  # the embedding alone cannot tell them apart
    cache = SuggestionCache()
    cache.put(q(cached), " prescribe a different antibiotic.", cached_vec)
    assert cache.lookup(q(new), new_vec) is None
    unguarded = SuggestionCache(CacheSettings(content_guard=False))
    unguarded.put(q(cached), " prescribe a different antibiotic.", cached_vec)
    assert unguarded.lookup(q(new), new_vec) is not None


def test_content_words_agree_up_to_typos_but_not_numbers_names_or_negations() -> None:
    def same(a: str, b: str) -> bool:
        return same_content(content_words(a), content_words(b))

    assert same("The comittee approved the budget", "the committee approved this budget")
    assert same("Thanks for your help, we", "Thank you for your help; we")
    # Personal pronouns must match ("I will send it" is not "You will send it"), so changing
    # "your help" to "the help" is a miss: the guard gives up such hits for precision.
    assert not same("Thanks for your help, we", "Thank you for the help; we")
    assert not same("I will send the copy, so you", "You will send the copy, so you")
    assert not same("The client replied 👍 so we", "The client replied 👎 so we")
    assert not same("The total is $1,250, so", "The total is $1,500, so")
    assert not same("Alice thanked Bob and", "Bob thanked Alice and")
    assert not same("The tests were significant", "The tests were not significant")
    assert not same("She said she would", "He said he would")
    assert not same("Support for 3.8 was removed, so", "Support for 3.8 was added, so")


def test_only_the_cursor_paragraph_is_embedded() -> None:
    assert embedding_text("Intro.\n\n\nFooter text, see our") == "Footer text, see our"
    assert embedding_text("One  paragraph") == "One paragraph"


def test_the_shared_template_scope_serves_every_document() -> None:
    cache = SuggestionCache()
    vector = unit(1)
    footer = "You can unsubscribe at any time. For more information, see our"
    cache.put(q(footer, "newsletter-1"), " privacy policy.", vector, shared=True)
    hit = cache.lookup(q(footer, "newsletter-2", context="other paragraphs\n\n" + footer), vector)
    assert hit is not None and hit.layer == "semantic"
    assert cache.ntotal(None) == 1 and cache.ntotal("newsletter-1") == 0


def test_synthetic_vectors_below_the_threshold_miss_and_above_it_hit() -> None:
    # The vectors alone decide here: with the content guard on, the same cursor paragraph is
    # served without one (a real embedding of the same text is the same vector).
    cache = SuggestionCache(CacheSettings(threshold=0.92, content_guard=False))
    base = unit(7)
    cache.put(q("so the team will", context="ctx one"), " ship it.", base)
    assert cache.lookup(q("so the team will", context="ctx two"), near(base, 8, 0.05)) is not None
    assert cache.lookup(q("so the team will", context="ctx three"), unit(9)) is None


LABELLED = [
    pair
    for name in ("semantic_pairs.json", "semantic_pairs_heldout.json", "semantic_pairs_fresh.json")
    for pair in json.loads((Path(__file__).parent / name).read_text())
]


@pytest.mark.parametrize("guard", [True, False])
def test_the_semantic_layer_is_only_possible_where_the_best_vector_would_hit(guard) -> None:
    # The engine embeds a request's context only when semantic_possible says some vector
    # could hit; the most favourable vector (the entry's own, similarity 1) must then hit,
    # and with any other answer no vector could: skipping the embedding loses no hit.
    settings = CacheSettings(content_guard=guard)
    checked = 0
    for pair in LABELLED:
        cache = SuggestionCache(settings)
        vector = unit(len(pair["cached"]))
        owner = "doc-a" if pair["same_document"] else "doc-b"
        cache.put(q(pair["cached"], owner), pair["answer"], vector)
        query = q(pair["new"], "doc-a")
        possible = cache.semantic_possible(query)
        hit = cache.lookup(query, vector)
        if hit is not None and hit.layer != "semantic":
            continue  # exact or type-ahead answered first
        assert possible == (hit is not None), pair
        checked += 1
    assert checked > 100


def test_a_fixed_typo_is_served_without_an_embedding_and_other_changes_are_not() -> None:
    """Issue 28, item 7: a semantic hit asked right after the edit waited ~50 ms for the
    embedding. A cursor paragraph that is an entry's with one word's typo fixed, all else
    identical, is decided by text; anything else still needs the vector."""
    cache = SuggestionCache()
    cache.put(q("Our quarterly reprot shows that revenue grew"), " by 12%.", unit(1))
    hit = cache.lookup(q("Our quarterly report shows that revenue grew"))  # no vector
    assert hit is not None and (hit.layer, hit.text) == ("semantic", " by 12%.")
    for changed in (
        "Our quarterly report shows that revenue fell",  # another word: the agreement differs
        "Our quarterly summary shows that revenue grew",  # another word, not a typo
        "Our yearly reprot shows that revenue grew",  # another word
        "Our quarterly reprot shows that revenue grew",  # the exact layer's, not this one's
        "Our quarterly reprot shows, that revenue grew",  # punctuation changed
        "Our quarterly reprot shows that no revenue grew",  # a word added (a negation)
        "Our quarterly reprot shows that revenue grew",
    ):
        query = q(changed, context=changed + "!")  # never the exact entry
        found = cache.lookup(query)
        same = changed == "Our quarterly reprot shows that revenue grew"
        assert (found is not None) == same, changed
    assert cache.lookup(q("Our quarterly report shows that revenue grew", "doc-b")) is None
    assert one_typo_apart("We recieved the files", "We received the files")
    assert not one_typo_apart("We received 12 files", "We received 13 files")
    assert not one_typo_apart("She said it was fine", "He said it was fine")
    assert not one_typo_apart("the results increased", "the results decreased")


def test_nothing_is_possible_for_new_text_or_in_another_document() -> None:
    cache = SuggestionCache()
    cache.put(q("Our quarterly reprot shows that revenue grew"), " by 12%.", unit(1))
    assert cache.semantic_possible(q("Our quarterly report shows that revenue grew"))
    assert not cache.semantic_possible(q("Our quarterly report shows that revenue fell"))
    assert not cache.semantic_possible(q("Our quarterly report shows that revenue grew", "doc-b"))
    cache.forget("doc-a")
    assert not cache.semantic_possible(q("Our quarterly report shows that revenue grew"))


# ---- bounds -------------------------------------------------------------------------------


def test_whether_a_semantic_hit_is_possible_is_decided_in_bounded_work(monkeypatch) -> None:
    """A document whose entries all end in the same four words (made to) must not make every
    request's peek compare thousands of them on the event loop: past POSSIBLE_CANDIDATES it
    answers True unchecked, so the embedding and the index decide; under it, as before."""
    import tether.ai.cache.suggestions as suggestions

    cache = SuggestionCache(CacheSettings(max_entries=2000))
    for i in range(suggestions.POSSIBLE_CANDIDATES + 50):
        cache.put(q(f"Item {i} zebra{i} says that revenue grew"), " fast.", unit(i % 300))
    compared = 0
    real = suggestions.same_content

    def counted(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
        nonlocal compared
        compared += 1
        return real(a, b)

    monkeypatch.setattr(suggestions, "same_content", counted)
    query = q("Other words entirely, says that revenue grew")  # matches no entry's content
    assert cache.semantic_possible(query)  # unknown past the bound: the vector decides
    assert compared == suggestions.POSSIBLE_CANDIDATES
    assert cache.lookup(query, unit(1000)) is None  # and the guarded lookup still misses

    few = SuggestionCache()
    for i in range(10):
        few.put(q(f"Item {i} zebra{i} says that revenue grew"), " fast.", unit(i))
    assert not few.semantic_possible(query)  # under the bound every entry is compared


def test_eviction_by_entries_is_least_recently_used_first_and_removes_vectors() -> None:
    cache = SuggestionCache(CacheSettings(max_entries=3))
    for i in range(3):
        cache.put(q(f"window {i} of the text", context=f"c{i}"), f" answer {i}.", unit(i))
    assert cache.lookup(q("window 0 of the text", context="c0")) is not None  # 0 is now fresh
    cache.put(q("window 3 of the text", context="c3"), " answer 3.", unit(3))
    assert cache.lookup(q("window 1 of the text", context="c1")) is None  # LRU went first
    assert cache.lookup(q("window 0 of the text", context="c0")) is not None
    assert cache.ntotal("doc-a") == 3 and len(cache) == 3
    assert cache.stats()["evictions_entries"] == 1
    assert cache.lookup(q("window 1 of the text", context="c1x"), unit(1)) is None  # vector gone


def test_eviction_by_bytes_keeps_the_cache_within_its_bound_and_removes_vectors() -> None:
    cache = SuggestionCache(CacheSettings(max_bytes=8000))
    for i in range(10):
        cache.put(q(f"paragraph {i}", context=f"c{i}"), "x" * 500, unit(i))
    assert cache.bytes <= 8000
    assert cache.ntotal("doc-a") == len(cache) < 10
    assert cache.stats()["evictions_bytes"] == 10 - len(cache)
    assert cache.put(q("huge"), "y" * 9000) is None  # one entry over the bound is not stored


def test_entries_expire_after_the_ttl_and_their_vectors_leave_the_index() -> None:
    clock = FakeClock()
    cache = SuggestionCache(CacheSettings(ttl_seconds=60), clock=clock)
    cache.put(q("an old window", context="c0"), " old.", unit(0))
    clock.now += 30
    cache.put(q("a newer window", context="c1"), " newer.", unit(1))
    clock.now += 31
    assert cache.lookup(q("an old window", context="c0")) is None
    assert cache.ntotal("doc-a") == 1 and cache.stats()["evictions_ttl"] == 1
    assert cache.lookup(q("a newer window", context="c1")) is not None
    clock.now += 30
    assert cache.lookup(q("a newer window", context="c1")) is None
    assert cache.ntotal("doc-a") == 0 and len(cache) == 0 and cache.bytes == 0


def test_storing_the_same_context_again_replaces_the_entry_and_its_vector() -> None:
    cache = SuggestionCache()
    cache.put(q("the same place"), " first.", unit(0))
    cache.put(q("the same place"), " second.", unit(1))
    hit = cache.lookup(q("the same place"))
    assert hit is not None and hit.text == " second." and cache.ntotal("doc-a") == 1


def test_forgetting_a_document_drops_its_entries_only() -> None:
    cache = SuggestionCache()
    cache.put(q("shared words", "doc-a"), " a.", unit(0))
    cache.put(q("shared words", "doc-b"), " b.", unit(1))
    assert cache.forget("doc-a") == 1
    assert cache.ntotal("doc-a") == 0 and cache.ntotal("doc-b") == 1
    hit = cache.lookup(q("shared words", "doc-b"))
    assert hit is not None and hit.text == " b."
