"""Exact token counts for the embedded model in the server process, without llama.cpp: its
byte-level BPE rebuilt from the GGUF file's vocabulary and merges with the ``tokenizers``
library (Rust, no CPU-specific kernels; already installed with the embedder).

The context builder counts every paragraph it lays into a prompt. Before this it guessed four
characters a token, because the model lives in the worker and an IPC per paragraph does not fit
on the event loop. Checked token for token against llama.cpp's own tokenizer (with special
tokens, as the worker tokenizes prompts) in ``tests/ai/test_token_counter.py``.

Only the pre-tokenizers that were checked are built (SmolLM2's ``smollm``, GPT-2's); any other
model, a missing library or an unreadable file gives None, and the server keeps its estimate.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .gguf_meta import GgufError, read_metadata

log = logging.getLogger(__name__)

KEYS = (
    "tokenizer.ggml.model",
    "tokenizer.ggml.pre",
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.merges",
    "tokenizer.ggml.token_type",
)
VERBATIM = (3, 4)  # llama.cpp's control and user-defined tokens: matched whole in text
PRE_TOKENIZERS = ("smollm", "gpt-2", "default")


def gguf_token_counter(path: Path) -> Callable[[str], int] | None:
    """A function counting ``text``'s tokens exactly as the model at ``path`` tokenizes a
    prompt, or None (logged) when that cannot be built here."""
    try:
        meta = read_metadata(path, KEYS)
    except (OSError, GgufError) as exc:
        log.info("token counts stay estimates: cannot read %s (%s)", path, exc)
        return None
    model, pre = meta.get("tokenizer.ggml.model"), meta.get("tokenizer.ggml.pre", "default")
    if model != "gpt2" or pre not in PRE_TOKENIZERS or "tokenizer.ggml.merges" not in meta:
        log.info("token counts stay estimates: no exact tokenizer for %s/%s", model, pre)
        return None
    try:
        tokenizer = _byte_level_bpe(meta, digits_apart=pre == "smollm")
    except ImportError:
        log.info("token counts stay estimates: the tokenizers library is not installed")
        return None
    except Exception as exc:  # a vocabulary the library refuses: estimates, not a failed start
        log.warning("token counts stay estimates: %s", exc)
        return None

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False).ids)

    if all(_cut_safe(token) for token in _verbatim(meta)):
        return ResumingCount(count)
    return count


class ResumingCount:
    """``count(text)`` for paragraphs typed at their end: each ask counts the cursor's
    paragraph, one keystroke longer than last time, and a 2,000-character one cost the event
    loop 0.6 ms of tokenizing per suggestion. The count of a head of the text ending at a
    stable cut is remembered (by the text's first characters), and only what follows it is
    tokenized. The head ends before a space that follows a non-space character, where a
    GPT-2-style byte-level pre-tokenizer always cuts ("ab, cd" is "ab" "," " cd" whatever comes
    before or after: ``stable_cut``), and no BPE merge crosses a pre-token, so the count is the
    head's plus the rest's, exactly."""

    MIN_CHARS = 512  # shorter text is counted whole: as fast
    TAIL_CHARS = 64  # the remembered head stops this short of the end, so it outlives typing
    HEADS = 64  # paragraphs remembered (~64 x 5,600 characters at most, by bounded_count)
    KEY_CHARS = 32

    def __init__(self, count: Callable[[str], int]) -> None:
        self._count = count
        self._heads: dict[str, tuple[str, int]] = {}  # insertion order: least recent first

    def __call__(self, text: str) -> int:
        if len(text) < self.MIN_CHARS:
            return self._count(text)
        key = text[: self.KEY_CHARS]
        start, tokens = 0, 0
        known = self._heads.get(key)
        if known is not None and text.startswith(known[0]):
            start, tokens = len(known[0]), known[1]
        cut = stable_cut(text, start + 1, len(text) - self.TAIL_CHARS)
        if cut > start:
            tokens += self._count(text[start:cut])
            start = cut
            self._heads.pop(key, None)  # re-inserted last: the most recently used
            self._heads[key] = (text[:cut], tokens)
            if len(self._heads) > self.HEADS:
                del self._heads[next(iter(self._heads))]
        return tokens + self._count(text[start:])


def stable_cut(text: str, low: int, high: int) -> int:
    """The last index in ``[low, high)`` of a space right after a character that is not
    whitespace, or -1. The pre-tokenizer's pieces of non-whitespace (letters, digits,
    punctuation, contractions) never take a space after them, and every piece that can begin
    with a space begins there: the pieces before the index are the same with or without what
    follows, and those after it the same with or without what precedes."""
    at = text.rfind(" ", low, high)
    while at >= low:
        if not text[at - 1].isspace():  # str.isspace holds for all Unicode White_Space
            return at
        at = text.rfind(" ", low, at)
    return -1


def _cut_safe(token: str) -> bool:
    """A verbatim token (matched whole in text before pre-tokenizing) that cannot straddle a
    stable cut: no space in it."""
    return bool(token) and " " not in token


def _verbatim(meta: dict[str, Any]) -> list[str]:
    """The tokens llama.cpp matches whole in text (control and user-defined ones)."""
    types = meta.get("tokenizer.ggml.token_type") or []
    return [
        t for t, kind in zip(meta["tokenizer.ggml.tokens"], types, strict=False) if kind in VERBATIM
    ]


def _byte_level_bpe(meta: dict[str, Any], *, digits_apart: bool) -> Any:
    from tokenizers import Tokenizer, models, pre_tokenizers

    tokens: list[str] = meta["tokenizer.ggml.tokens"]
    merges = [tuple(merge.split(" ", 1)) for merge in meta["tokenizer.ggml.merges"]]
    tokenizer = Tokenizer(models.BPE({token: i for i, token in enumerate(tokens)}, merges))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.pre_tokenizer = (
        pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
        if digits_apart
        else byte_level
    )
    tokenizer.add_special_tokens(_verbatim(meta))
    return tokenizer
