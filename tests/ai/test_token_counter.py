"""Exact token counts in the server process: the embedded model's BPE rebuilt from its GGUF file
(``ai.model.token_counter``) against llama.cpp's own tokenizer on the same file, and the GGUF
metadata reader on damaged files."""

from __future__ import annotations

import random
import struct
from pathlib import Path
from types import SimpleNamespace

import pytest

from tether.ai.factory import model_token_counter
from tether.ai.model.gguf_meta import GgufError, read_metadata
from tether.ai.model.providers.local import default_model_path
from tether.ai.model.token_counter import ResumingCount, gguf_token_counter, stable_cut
from tether.ai.text.context import COMPLETE_PREFIX

SAMPLES = [
    "The lighthouse keeper climbed the stairs every evening at dusk.",
    "Café au lait, naïve résumé — déjà vu.",
    "Emoji 🙂🚀 and flags 🇫🇷, then 日本語のテキスト and Ελληνικά.",
    "Numbers 1234567 and 3.14159, dates 2026-12-05, money $1,000,000.",
    "def f(x):\n    return x ** 2  # code\n\n\n\tindented",
    "   leading and trailing spaces   ",
    COMPLETE_PREFIX + "A document the model continues",
    "<|im_start|>user\nHi<|im_end|>\n<|endoftext|>",
    "",
]
ALPHABET = [*"aeiou xyz.,;!?'\"-\n\t0123456789", "é", "ß", "🙂", "日", "  ", "<|im_end|>", "\r\n"]


@pytest.fixture(scope="module")
def model_path() -> Path:
    return default_model_path()


@pytest.fixture(scope="module")
def llama_tokenize(model_path: Path):
    llama_cpp = pytest.importorskip("llama_cpp")
    llm = llama_cpp.Llama(str(model_path), vocab_only=True, verbose=False)
    return lambda text: llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)


def test_counts_equal_llama_cpp_s_on_every_sample_and_on_random_text(model_path, llama_tokenize):
    count = gguf_token_counter(model_path)
    assert count is not None
    rng = random.Random("token-counter")
    texts = SAMPLES + [
        "".join(rng.choice(ALPHABET) for _ in range(rng.randrange(1, 120))) for _ in range(400)
    ]
    for text in texts:
        assert count(text) == len(llama_tokenize(text)), text
    # The estimate it replaces was off by half on some of these.
    assert count(SAMPLES[2]) > len(SAMPLES[2]) // 4 * 1.5


WORDS = [*"aeiou", "the", "lighthouse", "Café", "naïve", "déjà", "ß", "🙂", "日本語", "Ελληνικά"]
SEPARATORS = [" ", " ", " ", "  ", ", ", ". ", " (", " ,", ' "', "\n", "\r\n", " 12 ", "-", "'s "]
SEPARATORS += ["   ", "<|im_end|>", "\t", " <|im_start|>", "\n ", "\u00a0 ", "\u2003 "]


def test_a_paragraph_typed_at_its_end_is_counted_exactly_from_a_remembered_head(
    model_path, llama_tokenize
):
    """``ResumingCount``: each ask counts the cursor's paragraph, one keystroke longer, and only
    what follows the remembered head is tokenized; every count still equals llama.cpp's,
    through typing, edits inside the remembered head, deletions and a second paragraph."""
    count = gguf_token_counter(model_path)
    assert isinstance(count, ResumingCount)
    rng = random.Random("resuming")
    tokenized: list[int] = []
    inner = count._count
    count._count = lambda text: tokenized.append(len(text)) or inner(text)
    text, other = "", "Another paragraph entirely, " * 30
    for step in range(1200):
        if step % 150 == 149:  # an edit inside the head: it no longer matches
            at = rng.randrange(len(text))
            text = text[:at] + rng.choice(WORDS) + text[at + 1 :]
        elif step % 97 == 96:
            text = text[: -rng.randrange(1, 30)]  # deleted back
        else:
            text += rng.choice(WORDS) + rng.choice(SEPARATORS)
        for typed in (text, other if step % 10 == 0 else None):
            if typed is not None:
                assert count(typed) == len(llama_tokenize(typed)), (step, typed[-80:])
    assert len(text) > 3 * ResumingCount.MIN_CHARS
    long_steps = sorted(tokenized[-200:])
    assert long_steps[len(long_steps) // 2] < 200  # most asks tokenize only a short tail


def test_llama_cpp_counts_a_text_as_its_parts_at_every_stable_cut(llama_tokenize) -> None:
    rng = random.Random("cuts")
    checked = 0
    for _ in range(300):
        text = "".join(rng.choice(WORDS) + rng.choice(SEPARATORS) for _ in range(12))
        whole = len(llama_tokenize(text))
        for at in range(1, len(text)):
            if stable_cut(text, at, at + 1) == at:
                parts = len(llama_tokenize(text[:at])) + len(llama_tokenize(text[at:]))
                assert parts == whole, (text, at)
                checked += 1
    assert checked > 1000


def test_the_remembered_heads_are_bounded(model_path) -> None:
    count = gguf_token_counter(model_path)
    assert isinstance(count, ResumingCount)
    for i in range(ResumingCount.HEADS * 3):
        count(f"Paragraph number {i} of many. " * 40)
    assert len(count._heads) == ResumingCount.HEADS  # the least recently used went


def test_a_stable_cut_is_a_space_after_a_character_that_is_not_whitespace() -> None:
    assert stable_cut("ab cd ef", 1, 8) == 5
    assert stable_cut("ab cd ef", 1, 5) == 2
    assert stable_cut("ab, 12 (x", 1, 9) == 6  # after a digit, a comma: cuts too
    assert stable_cut("ab   cd", 1, 7) == 2  # not inside a run of spaces
    assert stable_cut("ab\n cd", 1, 6) == -1
    assert stable_cut("é 日", 1, 3) == 1  # any script


def test_the_server_builds_the_counter_for_the_embedded_model(model_path, llama_tokenize):
    count = model_token_counter(SimpleNamespace(ai_model_path=""))
    assert count is not None and count(SAMPLES[0]) == len(llama_tokenize(SAMPLES[0]))
    assert model_token_counter(SimpleNamespace(ai_model_path=str(model_path))) is not None


def _gguf(*pairs: bytes, version: int = 3, keys: int | None = None) -> bytes:
    head = b"GGUF" + struct.pack("<IQQ", version, 0, len(pairs) if keys is None else keys)
    return head + b"".join(pairs)


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def test_the_metadata_reader_reads_what_it_is_asked_and_refuses_damage(tmp_path: Path) -> None:
    good = tmp_path / "good.gguf"
    pair = _string("tokenizer.ggml.model") + struct.pack("<I", 8) + _string("gpt2")
    numbers = _string("n") + struct.pack("<IIQ", 9, 4, 3) + struct.pack("<3I", 1, 2, 3)
    good.write_bytes(_gguf(pair, numbers))
    assert read_metadata(good) == {"tokenizer.ggml.model": "gpt2", "n": [1, 2, 3]}
    assert read_metadata(good, ("n",)) == {"n": [1, 2, 3]}
    damaged = {
        "magic": b"GGML" + good.read_bytes()[4:],
        "version": _gguf(pair, version=9),
        "truncated": good.read_bytes()[:-5],
        "huge array": _gguf(_string("a") + struct.pack("<IIQ", 9, 4, 2**60)),
        "huge string": _gguf(_string("a") + struct.pack("<IQ", 8, 2**40)),
        "too many keys": _gguf(keys=10**9),
        "unknown type": _gguf(_string("a") + struct.pack("<I", 99)),
    }
    for name, data in damaged.items():
        path = tmp_path / f"{name}.gguf"
        path.write_bytes(data)
        with pytest.raises(GgufError):
            read_metadata(path)
        assert gguf_token_counter(path) is None  # the server keeps its estimate
    # A model whose tokenizer was not checked: an estimate, not a guess at exactness.
    other = tmp_path / "other.gguf"
    other.write_bytes(
        _gguf(_string("tokenizer.ggml.model") + struct.pack("<I", 8) + _string("llama"))
    )
    assert gguf_token_counter(other) is None
