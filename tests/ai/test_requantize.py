"""Requantising the shipped model: made once, reused, and never fatal."""

from __future__ import annotations

from pathlib import Path

from tether.ai.model.providers.local import default_model_path
from tether.ai.model.providers.requantize import requantized


def test_the_shipped_model_is_requantised_once_and_then_reused(tmp_path: Path) -> None:
    source = default_model_path()
    first = requantized(source, tmp_path / "models")
    assert first != source and first.is_file() and first.stat().st_size > 0
    made = first.stat().st_mtime_ns
    again = requantized(source, tmp_path / "models")
    assert again == first and again.stat().st_mtime_ns == made  # not made twice
    assert not list((tmp_path / "models").glob(".*partial"))


def test_a_model_that_cannot_be_requantised_is_used_as_shipped(tmp_path: Path) -> None:
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"not a gguf file")
    assert requantized(broken, tmp_path / "models") == broken
    assert not [p for p in (tmp_path / "models").iterdir() if "gguf" in p.name]
