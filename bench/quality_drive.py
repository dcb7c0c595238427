"""The quality bench's model time: build each run's prompt for a case, and stream it through the
server's own providers (``LocalProvider`` in this process, ``OpenAIProvider`` against an upstream
the user names), stopping each generation as soon as the longest stopping rule the run is scored
at has decided. Knows nothing of metrics or reports.

Cost, which is what keeps the default comparison short on 2 cores: prompt evaluation dominates
(SmolLM2 on one thread of these AVX2 cores: ~185 tokens a second), so for every case the local
runs go in the order of their prompt text, and each reuses the longest token prefix the model
already holds from the run before (the provider's own warm-prefix reuse): a run that only
changes sampling, or heals one space, evaluates almost nothing new, and a run whose prompt and
sampling are an earlier one's takes its text. Output does not depend on that (the same logits
either way); time does, so TTFT is measured COLD, the whole prompt evaluated, once per prompt
shape, on the same cases for every run: every ``ttft_every``-th case of the subset.
"""

from __future__ import annotations

import contextlib
import functools
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tether.ai.errors import ProviderError, ProviderUnavailable
from tether.ai.model.providers.base import (
    Cancellation,
    GenerationRequest,
    Provider,
    confidence_of,
)
from tether.ai.text.context import COMPLETE_PREFIX, STOP_COMPLETE, SYSTEM_COMPLETE, ContextBuilder
from tether.ai.text.regions import RegionIndex
from tether.ai.text.stopping import heal_output, heal_prompt, settled

from .quality_corpus import Case
from .quality_runs import Generation, Run

MAX_TOKENS = 24  # the server's default token limit (--ai-max-tokens)
SEED = 15
Progress = Callable[[str], None]


# ---- prompts ---------------------------------------------------------------------------------


def build_prompt(run: Run, case: Case) -> tuple[str, str]:
    """(prompt, the text the editor already has after the prompt's end): the second is the
    whitespace a healed prompt leaves for the model to write. Chat-wrapped prompts are exactly
    what the server sends a provider (``ContextBuilder``, then ``heal_prompt``)."""
    text = case.text
    count = _counter(run)  # what the server counts with for that provider
    regions = RegionIndex(count)
    parts = regions.refresh(text)
    builder = ContextBuilder(count, budget_tokens=run.budget)
    if run.layout == "today" and len(parts) > 2:
        # Today's layout puts paragraphs edited in the last 30 s after the stable ones. The
        # editor here wrote the document in order and went back once to fix an earlier
        # paragraph (the bench's stand-in for the out-of-order case): it is hot now.
        here = regions.region_at(len(text) - 1)
        hot = random.Random(case.ident).randrange(0, max(here - 1, 1))
        for i, part in enumerate(parts):
            part.born = 0.0 if i != hot else time.monotonic()
    else:
        for part in parts:
            part.born = 0.0
    prompt = builder.complete(regions, text, len(text)).text
    leftover = ""
    if run.heal:
        prompt, leftover = heal_prompt(prompt)
    body = prompt.removeprefix(COMPLETE_PREFIX)
    if run.wrapper == "raw":
        return body, leftover
    if run.model.startswith("gemma"):
        wrapper = (
            f"<start_of_turn>user\n{SYSTEM_COMPLETE}\n\nContinue my document."
            "<end_of_turn>\n<start_of_turn>model\n"
        )
        return wrapper + body, leftover
    return prompt, leftover


def _approximate_tokens(text: str) -> int:
    return max(1, len(text) // 4)


@functools.cache
def _smollm2_tokens() -> Callable[[str], int]:
    """The server's exact count for its embedded model (``ai.model.token_counter``), or its
    estimate where that cannot be built."""
    from tether.ai.model.providers.local import default_model_path
    from tether.ai.model.token_counter import gguf_token_counter

    try:
        return gguf_token_counter(default_model_path()) or _approximate_tokens
    except ProviderUnavailable:
        return _approximate_tokens


def _counter(run: Run) -> Callable[[str], int]:
    """The server counts SmolLM2's tokens exactly and estimates every other model's (an
    upstream's tokenizer is not known to it; Gemma's is not one it rebuilds)."""
    if run.provider == "local" and run.model.startswith("smollm2"):
        return _smollm2_tokens()
    return _approximate_tokens


def every_nth(cases: list[Case], every: int) -> set[str]:
    """Every ``every``-th case of each split, from its first (the TTFT sample, the subset)."""
    seen: dict[str, int] = {}
    chosen = set()
    for case in cases:
        index = seen.get(case.split, 0)
        seen[case.split] = index + 1
        if every > 0 and index % every == 0:
            chosen.add(case.ident)
    return chosen


# ---- one generation ---------------------------------------------------------------------------


def covers(longer: str, cap: str) -> bool:
    """Whether text generated up to rule ``longer`` decided rule ``cap`` too."""
    order = ("full", "sentence", "phrase", "word")
    return order.index(longer) <= order.index(cap)


def decided(raw: str, leftover: str, cap: str) -> bool:
    """Whether more text cannot change what the editor sees under stopping rule ``cap`` (or
    any shorter one): the healed space was not written (nothing is shown), or the rule has
    decided (``ai.text.stopping.settled``). ``full`` never decides: the token limit or a stop
    does."""
    if not (raw.startswith(leftover) or leftover.startswith(raw)):
        return True
    if cap == "full" or len(raw) < len(leftover):
        return False
    return settled(raw[len(leftover) :], cap)[1]


async def generate(
    provider: Provider, run: Run, prompt: str, leftover: str, *, cold: bool = False
) -> Generation:
    request = GenerationRequest(
        prompt,
        "quality",
        MAX_TOKENS,
        stop=STOP_COMPLETE,
        cold=cold,
        temperature=run.temperature,
        repeat_penalty=run.repeat_penalty,
        seed=SEED,
        must_start=run.must_start,
    )
    began = time.perf_counter()
    times: list[float] = []
    raw = ""
    ends: list[tuple[int, float | None]] = []  # each piece's end in raw, its confidence
    # Closing the stream stops the model (the local provider cancels, an upstream's connection
    # is dropped), as the server's stopping rules do.
    async with contextlib.aclosing(provider.stream(request, Cancellation())) as pieces:
        async for piece in pieces:
            times.append(time.perf_counter())
            raw += piece
            ends.append((len(raw), confidence_of(piece)))
            if decided(raw, leftover, run.cap):
                break
    # An answer that is empty at once (a stop first) still had its first token then.
    ttft = (times[0] if times else time.perf_counter()) - began
    tps = (len(times) - 1) / (times[-1] - times[0]) if len(times) > 2 else None
    # As the server heals: at a line start the model's own line breaks are dropped too.
    shown = heal_output(raw, leftover, line_start=run.heal and prompt.endswith("\n"))
    skip = len(raw) - len(shown)
    confidences = [(end - skip, confidence) for end, confidence in ends] if shown else []
    return Generation(raw, ttft, tps, len(prompt), len(times), shown, confidences=confidences)


# ---- the embedded model -----------------------------------------------------------------------


async def drive_local(
    path: Path,
    runs: list[Run],
    cases: list[Case],
    *,
    subset: set[str],
    threads: int,
    ttft_every: int,
    progress: Progress,
) -> dict[str, dict[str, Generation]]:
    """Every run on its cases (``Run.subset``: those in ``subset``) through one loaded model,
    prefixes reused (module docstring)."""
    from tether.ai.model.providers.local import LocalProvider

    provider = LocalProvider(path, threads=threads, state_budget_bytes=0)
    results: dict[str, dict[str, Generation]] = {run.name: {} for run in runs}
    # The same cases for every run's cold TTFT, so their medians compare: in the subset.
    timed = every_nth([c for c in cases if c.ident in subset], ttft_every)
    began = time.perf_counter()
    async with provider:
        for number, case in enumerate(cases, 1):
            mine = [run for run in runs if not run.subset or case.ident in subset]
            prompts = {run.name: build_prompt(run, case) for run in mine}
            measured: set[tuple[Any, ...]] = set()
            made: dict[tuple[Any, ...], tuple[Generation, str]] = {}
            # Shared prefixes adjacent; chat prompts last, so the next case's first one finds
            # the fixed chat prefix still evaluated.
            for run in sorted(mine, key=lambda r: (r.wrapper == "chat", prompts[r.name][0])):
                prompt, leftover = prompts[run.name]
                cold = case.ident in timed and run.ttft_group not in measured
                same = (prompt, leftover, run.temperature, run.repeat_penalty, run.must_start)
                earlier = made.get(same)
                if earlier is not None and not cold and covers(earlier[1], run.cap):
                    # The same prompt and sampling (a smaller context that fit whole): the same
                    # text again (greedy or seeded), so the model is not asked twice.
                    results[run.name][case.ident] = replace(earlier[0], ttft_kind="warm")
                    continue
                generation = await generate(provider, run, prompt, leftover, cold=cold)
                if cold:
                    measured.add(run.ttft_group)
                    generation.ttft_kind = "cold"
                made[same] = (generation, run.cap)
                results[run.name][case.ident] = generation
            _report(progress, path.name, number, len(cases), began)
    return results


# ---- an OpenAI-compatible upstream -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Upstream:
    url: str
    model: str
    api_key: str = ""
    timeout: float = 60.0


async def drive_openai(
    upstream: Upstream,
    runs: list[Run],
    cases: list[Case],
    *,
    subset: set[str] | None = None,
    progress: Progress,
) -> tuple[dict[str, dict[str, Generation]], dict[str, str]]:
    """Every run on its cases (``Run.subset``: those in ``subset``) through the server's
    ``OpenAIProvider``; one run after another, so the upstream's own prompt cache sees what a
    server's requests would (its fixed prefix warm, each case's document new). Returns
    (results, runs skipped with the reason)."""
    from tether.ai.model.providers.openai import OpenAIProvider

    results: dict[str, dict[str, Generation]] = {}
    skipped: dict[str, str] = {}
    for run in runs:
        provider = OpenAIProvider(
            upstream.url,
            upstream.model,
            api_key=upstream.api_key,
            api=run.api,
            timeout=upstream.timeout,
            extra_body=dict(run.extra),
            logprobs=True,  # as tether serve asks under its default stopping rule (sure)
        )
        mine: dict[str, Generation] = {}
        began = time.perf_counter()
        mine_cases = [c for c in cases if not run.subset or subset is None or c.ident in subset]
        async with provider:
            for number, case in enumerate(mine_cases, 1):
                prompt, leftover = build_prompt(run, case)
                try:
                    generation = await generate(provider, run, prompt, leftover)
                except ProviderUnavailable as exc:
                    if not mine:  # the upstream is not there at all: say so, once
                        skipped[run.name] = f"upstream unavailable: {exc}"
                        progress(f"skipping {run.name}: {exc}")
                        break
                    generation = Generation("", None, None, len(prompt), error=str(exc))
                except ProviderError as exc:  # one bad answer costs that case only
                    generation = Generation("", None, None, len(prompt), error=str(exc))
                generation.ttft_kind = "wire"
                mine[case.ident] = generation
                _report(progress, run.name, number, len(mine_cases), began)
        if run.name not in skipped:
            results[run.name] = mine
    return results, skipped


def _report(progress: Progress, label: str, number: int, total: int, began: float) -> None:
    if number % 25 == 0 or number == total:
        spent = time.perf_counter() - began
        progress(f"  {label}: {number}/{total} cases, {spent:.0f} s")
