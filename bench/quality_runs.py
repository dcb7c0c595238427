"""What the quality bench compares and what it records: a ``Run`` (a model, a prompt shape,
sampling and the stopping rules it is scored at) and the ``Generation`` it gave on one case.
Shared by the bench (``quality``), its model time (``quality_drive``) and its figures
(``quality_report``), which import this and not each other's types.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

STOPS_FULL = ("full", "sentence", "phrase", "word")
SURE_VIEWS = ("sure@0.3", "sure@0.5", "sure@0.7", "sure@0.9")  # the sure rule, its threshold


@dataclass(frozen=True, slots=True)
class Run:
    name: str
    model: str = "smollm2-q4_0"  # what the server loads by default
    wrapper: str = "chat"  # chat: the server's ChatML wrapper; raw: the document text alone
    layout: str = "today"  # today: recently edited paragraphs last; docorder
    budget: int = 700  # context tokens (the server's --ai-context-budget default)
    heal: bool = True  # end the prompt before the typed space; the model writes it
    temperature: float = 0.0
    repeat_penalty: float = 1.0
    # The longest stopping rule scored: generation stops once it has decided. "phrase" also
    # gives "word"; "full" gives every rule (the whole MAX_TOKENS).
    cap: str = "phrase"
    provider: str = "local"  # or "openai": the server's OpenAIProvider against --openai-url
    api: str = "chat"  # the upstream API (openai runs): chat or completions
    extra: tuple[tuple[str, float], ...] = ()  # more JSON fields sent upstream (openai runs)
    # The model may not end or break the line before its first word (``GenerationRequest``;
    # the server's --ai-start, on by default).
    must_start: bool = True
    # Only on the subset of cases (``--subset-every``): runs that need a prompt of their own
    # (another shape or model) cost a full prompt evaluation per case; the rest reuse the
    # reference's evaluated prompt and run on every case.
    subset: bool = False

    @property
    def stops(self) -> tuple[str, ...]:
        # The sure rule's views need the whole generation (it extends while the model is sure).
        sure = SURE_VIEWS if self.cap == "full" else ()
        return STOPS_FULL[STOPS_FULL.index(self.cap) :] + sure

    @property
    def ttft_group(self) -> tuple[Any, ...]:
        """Runs with the same model and prompt shape share one cold TTFT measurement: they
        differ only in sampling or the healed space (one token)."""
        if self.provider == "openai":
            return (self.name,)
        return (self.model, self.wrapper, self.layout, self.budget)


@dataclass(slots=True)
class Generation:
    text: str  # what the model wrote (up to where the run's longest rule decided)
    ttft: float | None
    decode_tps: float | None
    prompt_chars: int
    pieces: int = 0
    shown: str = ""  # what the editor would see (after healing)
    ttft_kind: str = "warm"  # cold: whole prompt evaluated; warm: prefix reused; wire: upstream
    error: str = ""
    # Where each piece ends in ``shown`` and the model's confidence in it (``Piece``), for
    # the ``sure`` rule's views.
    confidences: list[tuple[int, float | None]] = field(default_factory=list)


def errors(generations: Iterable[Generation]) -> int:
    return sum(1 for g in generations if g.error)
