"""Nested Markdown keeps every word or is refused whole: blocks nest as deep as the update
guard lets a tree nest (markdown-it's preset silently dropped everything from level 20 on),
and one level more is refused naming the limit. Deep quotes continued without their markers,
which markdown-it reads once per level, are refused before they cost more than their size."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.collab.content.markdown_in import (
    DEFAULT_MAX_DEPTH,
    MarkdownLimits,
    MarkdownRefused,
    parse_markdown,
)
from tether.collab.content.plain import to_plain
from tether.collab.content.tree import Node, Run

OPENERS = {"quote": "> ", "bullet": "- ", "ordered": "1. "}
TREE_LEVELS = {"quote": 1, "bullet": 2, "ordered": 2}  # a list and its item


def nested(containers: list[str]) -> str:
    """Each container opened on its own line with a paragraph of one word (w0, w1, ...), each
    inside the ones before it, and a paragraph after them all."""
    lines, prefix = [], ""
    for i, kind in enumerate(containers):
        lines.append(f"{prefix}{OPENERS[kind]}w{i}")
        prefix += "> " if kind == "quote" else " " * len(OPENERS[kind])
    return "\n".join(lines) + "\n\nafter\n"


def depth_of(containers: list[str]) -> int:
    """How deep the deepest text sits as the update guard counts: the fragment is 1, then each
    container, the paragraph and its text."""
    return 1 + sum(TREE_LEVELS[kind] for kind in containers) + 2


def tree_depth(nodes: tuple[Node | Run, ...], depth: int = 1) -> int:
    deepest = depth
    for node in nodes:
        inner = tree_depth(node.children, depth + 1) if isinstance(node, Node) else depth + 1
        deepest = max(deepest, inner)
    return deepest


def words(text: str) -> list[str]:
    return re.findall(r"\w+", text)


def assert_whole(markdown: str, containers: list[str], limits: MarkdownLimits) -> None:
    blocks = parse_markdown(markdown, limits)
    assert words(to_plain(blocks)) == [f"w{i}" for i in range(len(containers))] + ["after"]
    assert tree_depth(blocks) == depth_of(containers)


@pytest.mark.parametrize(
    "containers",
    [
        ["bullet"] * 12,  # the list: levels 10+ and the paragraph after were dropped
        ["quote"] * 22,  # ... and its quote
        ["quote"] * (DEFAULT_MAX_DEPTH - 3),  # the deepest the guard takes
        ["quote"] * (DEFAULT_MAX_DEPTH - 4),
        ["bullet"] * ((DEFAULT_MAX_DEPTH - 3) // 2),
        ["ordered", "quote"] * ((DEFAULT_MAX_DEPTH - 3) // 3),
    ],
    ids=["list-12", "quote-22", "quotes-at-limit", "quotes-under", "lists-at-limit", "mixed"],
)
def test_nesting_up_to_the_guard_s_depth_keeps_every_word(containers: list[str]) -> None:
    assert depth_of(containers) <= DEFAULT_MAX_DEPTH
    assert_whole(nested(containers), containers, MarkdownLimits())


@pytest.mark.parametrize(
    "containers",
    [["quote"] * (DEFAULT_MAX_DEPTH - 2), ["bullet"] * ((DEFAULT_MAX_DEPTH - 2) // 2)],
    ids=["quotes", "lists"],
)
def test_one_level_past_the_guard_s_depth_is_refused_naming_the_limit(
    containers: list[str],
) -> None:
    assert depth_of(containers) == DEFAULT_MAX_DEPTH + 1
    with pytest.raises(MarkdownRefused) as refused:
        parse_markdown(nested(containers), MarkdownLimits())
    assert refused.value.limit == "max_nesting_depth"
    assert f"max_nesting_depth {DEFAULT_MAX_DEPTH}" in str(refused.value)


@settings(max_examples=150, deadline=None)
@given(
    containers=st.lists(st.sampled_from(sorted(OPENERS)), min_size=1, max_size=14),
    max_depth=st.integers(min_value=6, max_value=24),
)
def test_any_nesting_is_read_whole_or_refused_whole(containers: list[str], max_depth: int) -> None:
    limits = MarkdownLimits(max_depth=max_depth)
    if depth_of(containers) <= max_depth:
        assert_whole(nested(containers), containers, limits)
    else:
        with pytest.raises(MarkdownRefused):
            parse_markdown(nested(containers), limits)


def test_deep_quotes_continued_without_markers_are_refused_before_they_are_read() -> None:
    """100 KB of such lines 120 quotes deep took markdown-it 61 s."""
    lazy = ">" * 120 + " x\n" + "y\n" * 50_000
    with pytest.raises(MarkdownRefused) as refused:
        parse_markdown(lazy)
    assert refused.value.limit == "markdown_quote_lines"
    written = (">" * 120 + " y\n") * 1000  # the same quotes with their markers: read
    assert len(to_plain(parse_markdown(written)).split()) == 1000
    shallow = "> x\n" + "y\n" * 50_000  # a quote one deep continued lazily: read
    assert len(to_plain(parse_markdown(shallow)).split()) == 50_001
