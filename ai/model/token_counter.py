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

    return count


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
    types = meta.get("tokenizer.ggml.token_type") or []
    verbatim = [t for t, kind in zip(tokens, types, strict=False) if kind in VERBATIM]
    tokenizer.add_special_tokens(verbatim)
    return tokenizer
