"""``tether bench model``: prompt-evaluation and decode speed of llama.cpp builds, side by side.

Each build is a directory holding an installed ``llama_cpp`` package (``pip install --target
DIR --no-deps <wheel>``), or the one installed in this environment. Every measurement runs in a
fresh subprocess (a build that faults costs its own row, not the bench), builds take turns
round by round so machine noise falls on all of them alike, and medians are reported.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

# Long enough that prompt evaluation dominates: ~270 tokens, like a suggestion's context.
PROMPT = (
    "Meeting notes, product sync. We agreed that the onboarding flow needs fewer steps, that the "
    "pricing page should explain the team plan before the enterprise one, and that support "
    "tickets about exports have doubled since the last release. Maria will draft a shorter "
    "welcome email; Tom owns the export bug and will report on Thursday. The design review "
    "moves to next week because the prototype is not ready. Open questions: do we keep the "
    "free tier's document limit, and who talks to the two customers who asked for single "
    "sign-on? Next steps: ship the export fix, test the new welcome email with ten users, and "
) * 2
DECODE_TOKENS = 64

_MEASURE = r"""
import json, sys, time
from llama_cpp import Llama
path, threads, prompt, n_decode = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
llm = Llama(model_path=path, n_ctx=2048, n_threads=threads, n_threads_batch=threads,
            n_batch=512, verbose=False)
tokens = llm.tokenize(prompt.encode(), special=True)
began = time.perf_counter()
llm.eval(tokens)
prompt_s = time.perf_counter() - began
llm.reset()
out = llm.create_completion(prompt, max_tokens=n_decode, temperature=0.0, stream=True)
first = None
count = 0
for _ in out:
    count += 1
    if first is None:
        first = time.perf_counter()
decode_s = time.perf_counter() - first
print(json.dumps({"prompt_tokens": len(tokens), "prompt_tps": len(tokens) / prompt_s,
                  "decode_tps": (count - 1) / decode_s if count > 1 else 0.0}))
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--build",
        action="append",
        default=[],
        metavar="NAME=DIR",
        help="a build to measure: a directory holding llama_cpp (repeatable); "
        "'installed' measures this environment's",
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--model", default="", help="GGUF file (default: the shipped model)")


def run(args: argparse.Namespace) -> int:
    from tether.ai.model.providers.local import default_model_path

    model = args.model or str(default_model_path())
    builds = [_parse_build(spec) for spec in args.build] or [("installed", None)]
    results: dict[str, list[dict[str, float]]] = {name: [] for name, _ in builds}
    failures: dict[str, str] = {}
    for _ in range(args.rounds):
        for name, site in builds:
            if name in failures:
                continue
            outcome = _measure_once(site, model, args.threads)
            if isinstance(outcome, str):
                failures[name] = outcome
            else:
                results[name].append(outcome)
    print(f"model {Path(model).name}, {args.threads} thread(s), medians of {args.rounds} rounds")
    print(f"{'build':<14} {'prompt tok/s':>13} {'decode tok/s':>13}")
    for name, _ in builds:
        if name in failures:
            print(f"{name:<14} failed: {failures[name]}")
            continue
        rows = results[name]
        prompt = statistics.median(r["prompt_tps"] for r in rows)
        decode = statistics.median(r["decode_tps"] for r in rows)
        print(f"{name:<14} {prompt:>13.0f} {decode:>13.1f}")
    return 1 if failures else 0


def _parse_build(spec: str) -> tuple[str, str | None]:
    if spec == "installed":
        return "installed", None
    name, _, site = spec.partition("=")
    if not site:
        raise SystemExit(f"--build wants NAME=DIR, not {spec!r}")
    return name, None if site == "installed" else site


def _measure_once(site: str | None, model: str, threads: int) -> dict[str, float] | str:
    env = dict(os.environ)
    if site is not None:
        env["PYTHONPATH"] = site + os.pathsep + env.get("PYTHONPATH", "")
    command = [sys.executable, "-c", _MEASURE, model, str(threads), PROMPT, str(DECODE_TOKENS)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        tail = (done.stderr or "").strip().splitlines()[-1:] or [""]
        return f"exit {done.returncode} {tail[0]}"
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))
