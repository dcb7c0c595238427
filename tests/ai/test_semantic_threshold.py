"""Measures the semantic cache's precision and hit rate on labelled sets of context pairs
with the real MiniLM embedder, at several thresholds; `pytest -s` prints a table per set.

Each pair is (cached context, new context, cached answer, is the answer right for the new
context). A fresh cache holds the cached context (in the new request's document, or in another
one for the other-document pairs); the new request is then looked up through every layer.

Three sets: ``semantic_pairs.json`` is the tuning set (the threshold and the content guard were
chosen on it, so its numbers are in-sample); ``semantic_pairs_heldout.json`` was written
without looking at the guard's rules, but has since been used to tune the guard as well.
``semantic_pairs_fresh.json`` was written blind (without reading the guard or the other two
sets' pairs) after both were used for tuning, so its numbers are the out-of-sample estimate.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from tether.ai.cache.embedder import Embedder
from tether.ai.cache.suggestions import CacheQuery, CacheSettings, SuggestionCache, embedding_text

HERE = Path(__file__).parent
PAIRS = json.loads((HERE / "semantic_pairs.json").read_text())
HELDOUT = json.loads((HERE / "semantic_pairs_heldout.json").read_text())
FRESH = json.loads((HERE / "semantic_pairs_fresh.json").read_text())
SETS = {"tuning": PAIRS, "heldout": HELDOUT, "fresh": FRESH}
THRESHOLDS = (0.85, 0.90, 0.92, 0.95)
DEFAULT = CacheSettings().threshold

Vectors = tuple[np.ndarray, np.ndarray]


@dataclass(frozen=True, slots=True)
class Row:
    threshold: float
    served: int
    served_right: int
    served_wrong: int
    right_total: int
    total: int
    layers: dict[str, int]
    served_indices: tuple[int, ...] = ()

    @property
    def precision(self) -> float:
        return self.served_right / self.served if self.served else 1.0

    @property
    def hit_rate(self) -> float:
        """Of the requests whose cached answer is right, the fraction served from cache."""
        return self.served_right / self.right_total if self.right_total else 0.0


def _query(document: str, window: str) -> CacheQuery:
    return CacheQuery(document, "complete", "smollm2", window, window)


def measure(
    pairs: list[dict],
    cached: np.ndarray,
    new: np.ndarray,
    threshold: float,
    *,
    content_guard: bool = True,
) -> Row:
    served = served_right = 0
    layers: dict[str, int] = {}
    served_indices: list[int] = []
    for index, (pair, cached_vec, new_vec) in enumerate(zip(pairs, cached, new, strict=True)):
        cache = SuggestionCache(CacheSettings(threshold=threshold, content_guard=content_guard))
        owner = "doc-a" if pair["same_document"] else "doc-b"
        cache.put(_query(owner, pair["cached"]), pair["answer"], cached_vec)
        hit = cache.lookup(_query("doc-a", pair["new"]), new_vec)
        if hit is None:
            continue
        served += 1
        served_right += pair["right"]
        served_indices.append(index)
        layers[hit.layer] = layers.get(hit.layer, 0) + 1
    right_total = sum(pair["right"] for pair in pairs)
    return Row(
        threshold,
        served,
        served_right,
        served - served_right,
        right_total,
        len(pairs),
        layers,
        tuple(served_indices),
    )


def table(unguarded: list[Row], guarded: list[Row]) -> str:
    """One line per threshold: similarity + last-words agreement only, then as served."""
    lines = [
        "           similarity + last words only (no guard)   with the content guard",
        "threshold  served  wrong  precision  hit rate        served  wrong  precision  hit rate"
        "  layers (guarded)",
    ]
    for bare, row in zip(unguarded, guarded, strict=True):
        assert bare.threshold == row.threshold
        lines.append(
            f"{row.threshold:9.2f}  {bare.served:6d}  {bare.served_wrong:5d}  {bare.precision:9.3f}"
            f"  {bare.hit_rate:8.3f}        {row.served:6d}  {row.served_wrong:5d}"
            f"  {row.precision:9.3f}  {row.hit_rate:8.3f}  {row.layers}"
        )
    return "\n".join(lines)


def report(name: str, pairs: list[dict], vectors: Vectors) -> tuple[list[Row], list[Row]]:
    """Measure ``pairs`` at every threshold with and without the guard, and print the table
    and, per pair, the similarity and whether it is served at the default threshold."""
    cached, new = vectors
    unguarded = [measure(pairs, cached, new, t, content_guard=False) for t in THRESHOLDS]
    guarded = [measure(pairs, cached, new, t) for t in THRESHOLDS]
    right = sum(pair["right"] for pair in pairs)
    print(f"\n== {name}: {len(pairs)} pairs, {right} right, {len(pairs) - right} wrong ==")
    print(table(unguarded, guarded))
    bare = next(row for row in unguarded if row.threshold == DEFAULT)
    row = next(row for row in guarded if row.threshold == DEFAULT)
    print(f"per pair: similarity, label, category, served at {DEFAULT} (no guard / guard)")
    for index, (pair, a, b) in enumerate(zip(pairs, cached, new, strict=True)):
        marks = (
            f"{'served' if index in bare.served_indices else '-':>6} / "
            f"{'served' if index in row.served_indices else '-':<6}"
        )
        label = "right" if pair["right"] else "WRONG"
        print(f"  {index:2d}  {float(a @ b):.3f}  {label}  {pair['category']:<15} {marks}")
    return unguarded, guarded


@pytest.fixture(scope="module")
def embedded() -> dict[str, Vectors]:
    async def embed_all() -> dict[str, Vectors]:
        out: dict[str, Vectors] = {}
        async with Embedder() as embedder:
            for name, pairs in SETS.items():
                # what the engine embeds: the cursor's paragraph up to the cursor
                cached = await embedder.embed([embedding_text(pair["cached"]) for pair in pairs])
                new = await embedder.embed([embedding_text(pair["new"]) for pair in pairs])
                out[name] = (cached, new)
        return out

    return asyncio.run(embed_all())


def _other_documents(pairs: list[dict], vectors: Vectors) -> tuple[list[dict], Vectors]:
    positions = [i for i, pair in enumerate(pairs) if not pair["same_document"]]
    return [pairs[i] for i in positions], (vectors[0][positions], vectors[1][positions])


def test_the_labelled_set_covers_right_and_wrong_kinds_of_pairs() -> None:
    categories = {pair["category"] for pair in PAIRS}
    assert {"whitespace", "typo", "punctuation", "retyped", "boilerplate"} <= categories
    assert {"negation", "swapped_names", "numbers", "other_document"} <= categories
    assert len(PAIRS) >= 40


def test_precision_at_the_default_threshold_is_at_least_0_9(embedded) -> None:
    _, rows = report("tuning set (semantic_pairs.json, in-sample)", PAIRS, embedded["tuning"])
    by_threshold = {row.threshold: row for row in rows}
    assert by_threshold[DEFAULT].precision >= 0.9
    assert by_threshold[DEFAULT].hit_rate > 0.5
    # Other documents' entries are never served, whatever the threshold.
    others, vectors = _other_documents(PAIRS, embedded["tuning"])
    lowest = measure(others, *vectors, threshold=0.0)
    assert lowest.served == 0


def test_the_heldout_set_covers_right_and_wrong_kinds_of_pairs() -> None:
    categories = {pair["category"] for pair in HELDOUT}
    assert {"whitespace", "typo", "retyped", "reformatted", "boilerplate"} <= categories
    assert {
        "negation",
        "swapped_names",
        "numbers",
        "units",
        "antonym",
        "pronoun",
        "other_document",
    } <= categories
    assert len(HELDOUT) >= 48
    _assert_balanced_and_new(HELDOUT, PAIRS)  # held out: no context shared with the tuning set


def _assert_balanced_and_new(pairs: list[dict], earlier: list[dict]) -> None:
    """About half the pairs right, and no context that an earlier set already has."""
    right = sum(pair["right"] for pair in pairs)
    assert 0.4 <= right / len(pairs) <= 0.6
    earlier_texts = {pair[key] for pair in earlier for key in ("cached", "new")}
    assert not earlier_texts & {pair[key] for pair in pairs for key in ("cached", "new")}


def _report_and_check_isolation(title: str, pairs: list[dict], vectors) -> None:
    """Print the set's table; other documents' entries are never served, whatever the
    threshold, guard or not."""
    report(title, pairs, vectors)
    others, other_vectors = _other_documents(pairs, vectors)
    for guard in (True, False):
        assert measure(others, *other_vectors, threshold=0.0, content_guard=guard).served == 0


def test_heldout_precision_and_hit_rate(embedded) -> None:
    _report_and_check_isolation(
        "held-out set (semantic_pairs_heldout.json)", HELDOUT, embedded["heldout"]
    )
    # Measured blind (MiniLM, threshold 0.92): without the guard precision 0.511, hit rate
    # 0.923; with the first guard precision 0.826, hit rate 0.731: it served 2 GB -> 2 MB,
    # increased -> decreased, I -> You, We -> They. The guard was then changed (pronouns strict,
    # typos keep the first letter, contractions written out): 1.000 and 0.808 at 0.92, 0.846 at
    # 0.90, but this set is no longer blind; the fresh set below was written after.


def test_the_fresh_set_covers_right_and_wrong_kinds_of_pairs() -> None:
    categories = {pair["category"] for pair in FRESH}
    assert {
        "whitespace",
        "typo",
        "punctuation",
        "reformatted",
        "retyped",
        "boilerplate",
        "determiner",
        "emoji",
    } <= categories
    assert {
        "negation",
        "swapped_names",
        "numbers",
        "dates",
        "currency",
        "units",
        "comparative",
        "tense",
        "modal",
        "other_document",
    } <= categories
    assert len(FRESH) >= 40
    assert all(not pair["right"] for pair in FRESH if not pair["same_document"])
    _assert_balanced_and_new(FRESH, PAIRS + HELDOUT)


def test_fresh_precision_and_hit_rate(embedded) -> None:
    _report_and_check_isolation(
        "fresh blind set (semantic_pairs_fresh.json)", FRESH, embedded["fresh"]
    )
    # Measured blind at 0.92 and 0.90 (after the pronoun and first-letter changes): with the
    # guard precision 0.944, hit rate 0.654; the one wrong pair served was 👍 -> 👎 (MiniLM
    # similarity 1.000, and the guard ignored symbols). Symbols are content since: 1.000 and
    # 0.577 (an added emoji now also refuses some right pairs); no longer blind either.
