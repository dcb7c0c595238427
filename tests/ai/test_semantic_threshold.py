"""Measures the semantic cache's precision and hit rate on a labelled set of context pairs
with the real MiniLM embedder, at several thresholds; `pytest -s` prints the table.

Each pair is (cached context, new context, cached answer, is the answer right for the new
context). A fresh cache holds the cached context (in the new request's document, or in another
one for the other-document pairs); the new request is then looked up through every layer.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from ai.cache import CacheQuery, CacheSettings, SuggestionCache, embedding_text
from ai.embedder import Embedder

PAIRS = json.loads((Path(__file__).parent / "semantic_pairs.json").read_text())
THRESHOLDS = (0.85, 0.90, 0.92, 0.95)
DEFAULT = CacheSettings().threshold


@dataclass(frozen=True, slots=True)
class Row:
    threshold: float
    served: int
    served_right: int
    served_wrong: int
    right_total: int
    total: int
    layers: dict[str, int]

    @property
    def precision(self) -> float:
        return self.served_right / self.served if self.served else 1.0

    @property
    def hit_rate(self) -> float:
        """Of the requests whose cached answer is right, the fraction served from cache."""
        return self.served_right / self.right_total


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
    for pair, cached_vec, new_vec in zip(pairs, cached, new, strict=True):
        cache = SuggestionCache(CacheSettings(threshold=threshold, content_guard=content_guard))
        owner = "doc-a" if pair["same_document"] else "doc-b"
        cache.put(_query(owner, pair["cached"]), pair["answer"], cached_vec)
        hit = cache.lookup(_query("doc-a", pair["new"]), new_vec)
        if hit is None:
            continue
        served += 1
        served_right += pair["right"]
        layers[hit.layer] = layers.get(hit.layer, 0) + 1
    right_total = sum(pair["right"] for pair in pairs)
    return Row(
        threshold, served, served_right, served - served_right, right_total, len(pairs), layers
    )


def table(rows: list[Row]) -> str:
    lines = [
        "threshold  served  right  wrong  precision  hit rate (of right pairs)  layers",
    ]
    for row in rows:
        lines.append(
            f"{row.threshold:9.2f}  {row.served:6d}  {row.served_right:5d}  {row.served_wrong:5d}"
            f"  {row.precision:9.3f}  {row.hit_rate:25.3f}  {row.layers}"
        )
    return "\n".join(lines)


@pytest.fixture(scope="module")
def vectors() -> tuple[np.ndarray, np.ndarray]:
    async def embed_all() -> tuple[np.ndarray, np.ndarray]:
        async with Embedder() as embedder:
            # what the engine embeds: the cursor's paragraph up to the cursor
            cached = await embedder.embed([embedding_text(pair["cached"]) for pair in PAIRS])
            new = await embedder.embed([embedding_text(pair["new"]) for pair in PAIRS])
        return cached, new

    return asyncio.run(embed_all())


def test_the_labelled_set_covers_right_and_wrong_kinds_of_pairs() -> None:
    categories = {pair["category"] for pair in PAIRS}
    assert {"whitespace", "typo", "punctuation", "retyped", "boilerplate"} <= categories
    assert {"negation", "swapped_names", "numbers", "other_document"} <= categories
    assert len(PAIRS) >= 40


def test_precision_at_the_default_threshold_is_at_least_0_9(vectors) -> None:
    cached, new = vectors
    unguarded = [measure(PAIRS, cached, new, t, content_guard=False) for t in THRESHOLDS]
    print("\nsimilarity + last-words agreement only (content_guard=False):")
    print(table(unguarded))
    rows = [measure(PAIRS, cached, new, t) for t in THRESHOLDS]
    print("as served (with the content-word guard):")
    print(table(rows))
    for pair, a, b in zip(PAIRS, cached, new, strict=True):
        print(f"  {float(a @ b):.3f}  {'right' if pair['right'] else 'WRONG'}  {pair['category']}")
    by_threshold = {row.threshold: row for row in rows}
    assert by_threshold[DEFAULT].precision >= 0.9
    assert by_threshold[DEFAULT].hit_rate > 0.5
    # Other documents' entries are never served, whatever the threshold.
    others = [p for p in PAIRS if not p["same_document"]]
    lowest = measure(others, *_rows_of(vectors, others), threshold=0.0)
    assert lowest.served == 0


def _rows_of(
    vectors: tuple[np.ndarray, np.ndarray], subset: list[dict]
) -> tuple[np.ndarray, np.ndarray]:
    positions = [PAIRS.index(pair) for pair in subset]
    return vectors[0][positions], vectors[1][positions]
