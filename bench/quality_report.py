"""The quality bench's figures: every run seen through each stopping rule it was generated for,
with and without the junk filter, scored against the truth with bootstrap intervals and paired
differences against the reference (what ``tether serve`` does by default); the printed table and
the PNG. Knows nothing of models.
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from tether.ai.text.junk import KINDS as JUNK_KINDS
from tether.ai.text.junk import screen  # the server's junk filter, exactly
from tether.ai.text.stopping import SURE, stop_at, sure_cut  # what the server applies

from .quality_corpus import KINDS, Case
from .quality_metrics import Score, bootstrap, paired_difference, score
from .quality_runs import Generation, Run, errors

SPLITS = ("dev", "heldout")
ACCEPTABILITY_RULE = (
    "not junk, and its leading words are the author's next words (case and punctuation "
    "ignored) for at least min(2, its length in words) words"
)


def view_name(run: str, stop: str, filtered: bool = False) -> str:
    return f"{run}/{stop}" + ("/filter" if filtered else "")


def summarize(
    runs: list[Run],
    cases: list[Case],
    results: dict[str, dict[str, Generation]],
    reference: str,
) -> dict[str, Any]:
    """Every figure, by view name (``run/stop[/filter]``); ``reference`` is the view the
    paired differences are taken against, on the cases both have."""
    configs: dict[str, Any] = {}
    per_case: dict[str, dict[str, dict[str, Score]]] = {}
    ttfts = _ttfts(runs, cases, results)
    for run in runs:
        for stop in run.stops:
            for filtered in (False, True):
                name = view_name(run.name, stop, filtered)
                figures, scored = _view_figures(run, stop, filtered, cases, results)
                for split in SPLITS:
                    figures[split].update(ttfts[run.name][split])
                configs[name] = figures
                per_case[name] = scored
    for name, figures in configs.items():
        for split in SPLITS:
            if reference in per_case and name != reference:
                mine, theirs = per_case[name][split], per_case[reference][split]
                both = [ident for ident in mine if ident in theirs]
                for measure in ("acceptable", "chars_accepted"):
                    low_high = paired_difference(
                        [float(getattr(mine[i], measure)) for i in both],
                        [float(getattr(theirs[i], measure)) for i in both],
                    )
                    figures[split][f"{measure}_vs_reference"] = _ci(low_high, 3)
                # The reference on the same cases (a subset run has a quarter of them).
                figures[split]["reference_same_cases"] = (
                    round(sum(theirs[i].acceptable for i in both) / len(both), 3) if both else None
                )
    return {
        "cases": {
            "dev": sum(c.split == "dev" for c in cases),
            "heldout": sum(c.split == "heldout" for c in cases),
            "documents": len({c.document for c in cases}),
        },
        "reference": reference,
        "acceptability_rule": ACCEPTABILITY_RULE,
        "configs": configs,
        # Each one-word view's acceptability per case (1/0), so reports of separate runs on
        # the same cases (another upstream, say) can be compared case by case.
        "per_case": {
            name: {
                ident: float(scored.acceptable)
                for split in SPLITS
                for ident, scored in values[split].items()
            }
            for name, values in per_case.items()
            if name.endswith("/word")
        },
        "examples": _examples(runs, cases, results),
    }


def _filtered(scored: Score, case: Case) -> Score:
    """What the editor gets once junk is dropped before it is shown: nothing."""
    if scored.junk is None:
        return scored
    return replace(score("", case.truth, case.text), junk=None)


def _view_figures(
    run: Run,
    stop: str,
    filtered: bool,
    cases: list[Case],
    results: dict[str, dict[str, Generation]],
) -> tuple[dict[str, Any], dict[str, dict[str, Score]]]:
    figures: dict[str, Any] = {}
    by_case: dict[str, dict[str, Score]] = {}
    mine = results[run.name]
    for split in SPLITS:
        scores: list[Score] = []
        gens: list[Generation] = []
        kinds: list[str] = []
        by_case[split] = {}
        for case in cases:
            if case.split != split or case.ident not in mine:
                continue
            gen = mine[case.ident]
            suggestion = cut(gen, stop)
            if filtered:  # what the server's own junk filter shows of it
                suggestion, _ = screen(suggestion, case.text, stop.split("@")[0])
            scored = score(suggestion, case.truth, case.text)
            scored = _filtered(scored, case) if filtered else scored
            scores.append(scored)
            gens.append(gen)
            by_case[split][case.ident] = scored
            kinds.append(case.kind)
        tps = [g.decode_tps for g in gens if g.decode_tps is not None]
        figures[split] = {
            "n": len(scores),
            "acceptable": _ci(bootstrap([float(s.acceptable) for s in scores])),
            "first_word": _ci(bootstrap([float(s.first_word) for s in scores])),
            "first3": _ci(bootstrap([float(s.first3) for s in scores])),
            "chrf": _ci(bootstrap([s.chrf for s in scores]), 1),
            "words_saved": _ci(bootstrap([float(s.words_saved) for s in scores]), 2),
            "chars_accepted": _ci(bootstrap([float(s.chars_accepted) for s in scores]), 2),
            "junk": _ci(bootstrap([float(s.junk is not None) for s in scores])),
            "junk_kinds": {k: sum(s.junk == k for s in scores) for k in JUNK_KINDS},
            "shown": _ci(bootstrap([float(s.shown) for s in scores])),
            "decode_tps_median": round(statistics.median(tps), 1) if tps else None,
            "prompt_chars_median": statistics.median(g.prompt_chars for g in gens) if gens else 0,
            "errors": errors(gens),
            "by_kind": _by_kind(scores, kinds),
        }
    return figures, by_case


def cut(gen: Generation, stop: str) -> str:
    """What the editor is shown of a generation under a stopping rule: ``sure@0.5`` is the
    sure rule at that threshold, on the confidences the provider gave."""
    rule, _, threshold = stop.partition("@")
    if rule == SURE:
        return sure_cut(gen.shown, gen.confidences, float(threshold), final=True)[0]
    return stop_at(gen.shown, stop)


def _by_kind(scores: list[Score], kinds: list[str]) -> dict[str, dict[str, Any]]:
    """The figures per cursor class (mid-sentence, sentence end, paragraph start)."""
    out: dict[str, dict[str, Any]] = {}
    for kind in KINDS:
        mine = [s for s, k in zip(scores, kinds, strict=True) if k == kind]
        out[kind] = {
            "n": len(mine),
            "acceptable": _ci(bootstrap([float(s.acceptable) for s in mine])),
            "empty": _ci(bootstrap([float(not s.shown) for s in mine])),
            "junk": _ci(bootstrap([float(s.junk is not None) for s in mine])),
            "chars_accepted": _ci(bootstrap([float(s.chars_accepted) for s in mine]), 2),
        }
    return out


def _ttfts(
    runs: list[Run], cases: list[Case], results: dict[str, dict[str, Generation]]
) -> dict[str, dict[str, dict[str, Any]]]:
    """Per run: median and p90 TTFT over the generations that measured it, both splits pooled
    (time does not depend on the split): the cold ones of every run with the same prompt shape
    (``Run.ttft_group``) for the embedded model, on the same cases for every run; every request
    for an upstream (``wire``)."""
    pools: dict[Any, list[float]] = {}
    for run in runs:
        pool = pools.setdefault(run.ttft_group, [])
        for case in cases:
            gen = results[run.name].get(case.ident)
            if gen is not None and gen.ttft is not None and gen.ttft_kind in ("cold", "wire"):
                pool.append(gen.ttft)
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for run in runs:
        values = pools[run.ttft_group]
        figures = {
            "ttft_kind": "wire" if run.provider == "openai" else "cold",
            "ttft_n": len(values),
            "ttft_ms_median": round(statistics.median(values) * 1000, 1) if values else None,
            "ttft_ms_p90": round(_quantile(values, 0.9) * 1000, 1) if values else None,
        }
        out[run.name] = {split: figures for split in SPLITS}
    return out


def _ci(triple: tuple[float, float, float], digits: int = 3) -> list[float]:
    return [round(value, digits) for value in triple]


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _examples(
    runs: list[Run], cases: list[Case], results: dict[str, dict[str, Generation]]
) -> list[dict[str, Any]]:
    shown = []
    everywhere = [
        c for c in cases if c.split == "dev" and all(c.ident in results[r.name] for r in runs)
    ]
    for case in everywhere[:12]:
        row: dict[str, Any] = {"case": case.ident, "kind": case.kind}
        row["before"] = case.text[-80:]
        row["truth"] = case.truth[:60]
        for run in runs:
            row[run.name] = results[run.name][case.ident].shown
        shown.append(row)
    return shown


# ---- the table and the plot -------------------------------------------------------------------


def print_table(report: dict[str, Any], runs: list[Run]) -> None:
    """Each run at one word (the server's default length); the reference and upstream runs at
    every length they were generated for. The JSON has every view."""
    print(
        f"{'config':<32} {'split':<7} {'accept':>17} {'Δ vs ref':>21} {'1st word':>8} "
        f"{'chrF':>5} {'junk':>5} {'shown':>5} {'chars':>5} {'chars Δ':>20} {'TTFT ms':>8} "
        f"{'tok/s':>6}"
    )
    reference_run = report["reference"].split("/")[0]
    for run in runs:
        wide = run.name == reference_run or run.provider == "openai" or run.cap == "full"
        for stop in run.stops if wide else ("word",):
            for filtered in (False, True) if wide and stop == "sentence" else (False,):
                name = view_name(run.name, stop, filtered)
                if name not in report["configs"]:
                    continue
                for split in SPLITS:
                    print(_row(name, split, report["configs"][name][split]))


def print_kinds(report: dict[str, Any], runs: list[Run]) -> None:
    """Per cursor class, held-out then dev: acceptable and empty shares (95% CI) and the
    characters a writer keeps, for each run at one word and at every ``sure`` threshold."""
    print(f"\n{'per cursor class':<32} {'split':<7} " + " ".join(f"{k:>27}" for k in KINDS))
    print(f"{'':<32} {'':<7} " + " ".join(f"{'accept / empty / chars':>27}" for _ in KINDS))
    for run in runs:
        for stop in ("word", *(v for v in run.stops if v.startswith(SURE))):
            name = view_name(run.name, stop)
            if name not in report["configs"]:
                continue
            for split in reversed(SPLITS):
                kinds = report["configs"][name][split]["by_kind"]
                cells = []
                for kind in KINDS:
                    k = kinds[kind]
                    a, e, chars = k["acceptable"], k["empty"], k["chars_accepted"][0]
                    cells.append(f"{a[0]:.2f} [{a[1]:.2f},{a[2]:.2f}] {e[0]:.2f} {chars:>4.1f}")
                print(f"{name:<32} {split:<7} " + " ".join(f"{c:>27}" for c in cells))


def _row(name: str, split: str, f: dict[str, Any]) -> str:
    a = f["acceptable"]
    d = f.get("acceptable_vs_reference")
    delta = f"{d[0]:+.3f} [{d[1]:+.2f},{d[2]:+.2f}]" if d else "-"
    c = f.get("chars_accepted_vs_reference")
    chars_delta = f"{c[0]:+.2f} [{c[1]:+.2f},{c[2]:+.2f}]" if c else "-"
    ttft = f["ttft_ms_median"]
    return (
        f"{name:<32} {split:<7} {a[0]:>5.3f} [{a[1]:.2f},{a[2]:.2f}] {delta:>21} "
        f"{f['first_word'][0]:>8.3f} {f['chrf'][0]:>5.1f} {f['junk'][0]:>5.3f} "
        f"{f['shown'][0]:>5.3f} {f['chars_accepted'][0]:>5.2f} {chars_delta:>20} "
        f"{(f'{ttft:.0f}' if ttft else '-'):>8} {f['decode_tps_median'] or 0:>6.1f}"
    )


def plot(report: dict[str, Any], runs: list[Run], path: Path) -> None:
    """Acceptability (95% CI) against median TTFT, per split: each run at one word (o) and at a
    phrase of up to 4 words (s); upstream runs' TTFT is over the wire (^)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot (pip install 'tether[bench]')", file=sys.stderr)
        return
    figure, axes = plt.subplots(1, 2, figsize=(13, 5.5), sharey=True)
    colours = plt.get_cmap("tab20")
    for axis, split in zip(axes, SPLITS, strict=True):
        for number, run in enumerate(runs):
            for view, marker, nudge in (("word", "o", 0), ("phrase", "s", 6)):
                figures = report["configs"].get(view_name(run.name, view))
                if figures is None or figures[split]["ttft_ms_median"] is None:
                    continue
                f = figures[split]
                value, low, high = f["acceptable"]
                axis.errorbar(
                    f["ttft_ms_median"] + nudge,  # side by side
                    value,
                    yerr=[[value - low], [high - value]],
                    fmt="^" if run.provider == "openai" and view == "word" else marker,
                    color=colours(number % 20),
                    mfc="none" if view != "word" else None,
                    capsize=3,
                    label=run.name if view == "word" and split == "dev" else None,
                )
        axis.set_title(f"{split}: {report['cases'][split]} cases")
        axis.set_xlabel("median TTFT, ms (embedded: cold, 1 thread; ^ upstream: over the wire)")
        axis.grid(alpha=0.3)
    axes[0].legend(fontsize=7, loc="best")
    axes[0].set_ylabel("acceptable share (95% bootstrap CI)")
    figure.suptitle(
        "tether bench quality: acceptability vs TTFT (filled: one word, the default; "
        "open squares: up to 4 words)"
    )
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
