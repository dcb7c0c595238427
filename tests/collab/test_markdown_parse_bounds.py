"""Reading Markdown costs memory bounded by its size with a small constant (markdown-it's tokens
are turned into the tree as they come, not kept), refuses a tree past its node cap as soon as
it grows past it, and still reads what CommonMark reads (a link before its reference)."""

from __future__ import annotations

import tracemalloc

import pytest

from tether.collab.content.markdown_in import MarkdownLimits, MarkdownRefused, parse_markdown
from tether.collab.content.tree import Node, Run

DEFAULT = MarkdownLimits()


def traced_peak(markdown: str, limits: MarkdownLimits = DEFAULT) -> int:
    tracemalloc.start()
    try:
        try:
            parse_markdown(markdown, limits)
        except MarkdownRefused:
            pass
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("line", ["-\n", "a\n\n", "> a\n", "#\n"])
def test_reading_many_blocks_keeps_no_token_list(line: str) -> None:
    """markdown-it's whole token list took 330-550 bytes per byte of these (190 MB for 512 KiB
    of empty list items); what is left is the tree and markdown-it's line tables."""
    markdown = line * (32 * 1024 // len(line))
    assert traced_peak(markdown) < 200 * len(markdown)


def test_a_tree_past_the_cap_is_refused_before_the_rest_is_read() -> None:
    markdown = "-\n" * 256 * 1024
    with pytest.raises(MarkdownRefused) as refused:
        parse_markdown(markdown, MarkdownLimits(max_nodes=1000))
    assert refused.value.limit == "max_import_nodes" and "1000" in str(refused.value)
    # markdown-it's line tables (five numbers a line) are all that is left: no tree, no tokens
    assert traced_peak(markdown, MarkdownLimits(max_nodes=1000)) < 64 * len(markdown)


def test_the_cap_counts_elements_and_runs_of_text() -> None:
    markdown = "- a *b*\n- c\n"  # list, 2 items, 2 paragraphs, 3 runs
    assert len(parse_markdown(markdown, MarkdownLimits(max_nodes=8))) == 1
    with pytest.raises(MarkdownRefused):
        parse_markdown(markdown, MarkdownLimits(max_nodes=7))


def test_a_link_before_its_reference_definition_is_a_link() -> None:
    blocks = parse_markdown("see [the docs][d] and [x]\n\n> [d]: https://d.example/\n")
    assert blocks[0] == Node(
        "paragraph",
        {},
        (
            Run("see "),
            Run("the docs", {"link": {"href": "https://d.example/"}}),
            Run(" and [x]"),
        ),
    )


def test_a_paragraph_of_a_hundred_thousand_escapes_is_one_run() -> None:
    (paragraph,) = parse_markdown("\\*" * 100_000)
    assert isinstance(paragraph, Node) and paragraph.children == (Run("*" * 100_000),)
