"""The AI pipeline's settings, as the engine and its parts read them; knows no other module."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class AiSettings:
    default_max_tokens: int = 24
    # Completions (not rewrites): how long (ai.text.stopping's rules) and whether the prompt is
    # healed; the defaults are what tether bench quality found acceptable most often.
    stop_rule: str = "sure"
    sure: float = 0.9  # the sure rule's threshold (ai.text.stopping.sure_cut)
    heal: bool = True
    # The model may not stop before a word (at sentence and paragraph ends it would).
    must_start: bool = True
    # Completions are held back until known not to be junk (ai.text.junk), and junk ends them
    # with reason "junk:<kind>" instead of being shown.
    junk_filter: bool = True
    coalesce_seconds: float = 0.05
    request_timeout: float = 60.0
    queue_limit: int = 8
    context_budget_tokens: int = 700
    # Prefetch: after an editor's typing pauses this long, compute the suggestion at its
    # cursor ahead of any request (0: off), within this share of the model's time.
    prefetch_seconds: float = 0.2
    prefetch_budget: float = 0.5
