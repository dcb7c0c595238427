"""The quality bench's measures of one suggestion against what the author wrote next, and
bootstrap confidence intervals over cases. Pure functions: no model, no files.

Acceptability, the rule the bench ranks on: a suggestion is ACCEPTABLE when it is not junk
(``ai.text.junk``) and its leading words are the author's next words, after lower-casing and
dropping punctuation, for at least ``min(2, its length in words)`` words. That is a ghost text
the editor would take (whole, or its first words with a word-accept key) without correcting
it. ``words_saved`` counts how many leading words agree: the typing a user is spared.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tether.ai.text.junk import junk_kind, words

CHRF_ORDER = 6
CHRF_BETA = 2.0


@dataclass(frozen=True, slots=True)
class Score:
    shown: bool  # non-empty after any filter
    junk: str | None
    first_word: bool
    first3: bool
    chrf: float  # 0..100
    words_saved: int
    acceptable: bool
    # The characters of the leading words that agree (each with the space after it): what
    # the writer keeps of it, accepting word by word, and does not type.
    chars_accepted: int = 0


def normalize(text: str) -> str:
    return " ".join(words(text))


def leading_agreement(suggestion: str, truth: str) -> int:
    said, wrote = words(suggestion), words(truth)
    agree = 0
    for a, b in zip(said, wrote, strict=False):
        if a != b:
            break
        agree += 1
    return agree


def chrf(hypothesis: str, reference: str) -> float:
    """chrF (Popović 2015): character n-gram F-score, n = 1..6, recall weighted by beta = 2,
    whitespace ignored, averaged over the orders both strings have; 0..100."""
    hyp = "".join(hypothesis.split())
    ref = "".join(reference.split())
    if not hyp or not ref:
        return 100.0 if hyp == ref else 0.0
    precisions: list[float] = []
    recalls: list[float] = []
    for n in range(1, CHRF_ORDER + 1):
        h = Counter(hyp[i : i + n] for i in range(len(hyp) - n + 1))
        r = Counter(ref[i : i + n] for i in range(len(ref) - n + 1))
        if not h or not r:
            continue
        common = sum((h & r).values())
        precisions.append(common / sum(h.values()))
        recalls.append(common / sum(r.values()))
    if not precisions:
        return 0.0
    p = sum(precisions) / len(precisions)
    r = sum(recalls) / len(recalls)
    if p + r == 0:
        return 0.0
    b2 = CHRF_BETA**2
    return 100.0 * (1 + b2) * p * r / (b2 * p + r)


def score(suggestion: str, truth: str, before: str, chrf_chars: int = 40) -> Score:
    """One suggestion at a cursor preceded by ``before``; chrF against the truth's first
    ``chrf_chars`` characters (the suggestion cut to as many)."""
    junk = junk_kind(suggestion, before)
    said = words(suggestion)
    wrote = words(truth)
    agree = leading_agreement(suggestion, truth)
    shown = bool(said)
    return Score(
        shown=shown,
        junk=junk,
        first_word=bool(said) and bool(wrote) and said[0] == wrote[0],
        first3=len(said) >= 3 and len(wrote) >= 3 and said[:3] == wrote[:3],
        chrf=chrf(suggestion.strip()[:chrf_chars], truth.strip()[:chrf_chars]),
        words_saved=agree if junk is None else 0,
        acceptable=junk is None and shown and agree >= min(2, len(said)),
        chars_accepted=sum(len(w) + 1 for w in said[:agree]) if junk is None else 0,
    )


def bootstrap(
    values: Sequence[float], *, rounds: int = 2000, seed: int = 15
) -> tuple[float, float, float]:
    """(mean, low, high): the mean over cases and its 95% percentile interval over ``rounds``
    resamples of the cases, with a fixed seed."""
    if not values:
        return (0.0, 0.0, 0.0)
    data = np.asarray(values, dtype=float)
    picks = np.random.default_rng(seed).integers(0, len(data), (rounds, len(data)))
    means = data[picks].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return (float(data.mean()), float(low), float(high))


def paired_difference(
    a: Sequence[float], b: Sequence[float], *, rounds: int = 2000, seed: int = 15
) -> tuple[float, float, float]:
    """Mean of a - b over the same cases, with its 95% bootstrap interval: a difference
    whose interval excludes 0 is real on these cases."""
    return bootstrap([x - y for x, y in zip(a, b, strict=True)], rounds=rounds, seed=seed)
