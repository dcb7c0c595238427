"""Markdown imports over REST (issue 37) through the real server: a 50,000-paragraph document
goes in, a tree past the node cap or nested deeper than the update guard allows is refused whole
(422 naming the limit) and what nests up to it keeps every word, and imports that the memory
budget has no room for are refused with a retry time (503), nothing of them applied."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from tests.collab.test_markdown_nesting import nested
from tests.metrics_scrape import metric_value, metrics_text
from tests.serverproc import ServerProcess

pytestmark = pytest.mark.anyio

MARKDOWN = {"Content-Type": "text/markdown; charset=utf-8"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ServerProcess(tmp_path_factory.mktemp("md-imports"), unload_grace=0.2) as running:
        yield running


@pytest.fixture
async def http(server: ServerProcess) -> AsyncIterator[httpx.AsyncClient]:
    headers = {"Authorization": f"Bearer {server.token()}"}
    async with httpx.AsyncClient(base_url=server.http_url, headers=headers, timeout=120) as client:
        yield client


async def test_a_fifty_thousand_paragraph_document_imports_whole(http: httpx.AsyncClient) -> None:
    paragraphs = [f"p{i}" for i in range(50_000)]
    body = "\n\n".join(paragraphs).encode()
    put = await http.put("/api/documents/fifty-k", content=body, headers=MARKDOWN)
    assert put.status_code == 200, put.text
    text = (await http.get("/api/documents/fifty-k?format=text")).text
    assert text.split("\n\n") == paragraphs


async def test_a_tree_past_the_node_cap_is_refused_naming_it_and_nothing_changes(
    http: httpx.AsyncClient, server: ServerProcess
) -> None:
    before = await http.put("/api/documents/capped", content=b"# Before\n", headers=MARKDOWN)
    assert before.status_code == 200
    too_many = b"a\n\n" * 160_000  # 320,000 nodes: a paragraph and its text each
    put = await http.put("/api/documents/capped", content=too_many, headers=MARKDOWN)
    assert put.status_code == 422
    assert "max_import_nodes" in put.json()["error"] and "300000" in put.json()["error"]
    assert (await http.get("/api/documents/capped?format=markdown")).text == "# Before\n"
    refusals = metric_value(
        await metrics_text(server), "tether_update_refusals_total", limit="max_import_nodes"
    )
    assert refusals >= 1


async def test_imports_the_memory_budget_has_no_room_for_are_refused_with_a_retry_time(
    tmp_path: Path,
) -> None:
    """A budget of one byte: one import runs at a time (alone, always), the others that come
    while it runs are refused at once (no wait), with Retry-After, and change nothing."""
    with ServerProcess(tmp_path, import_memory_budget=1, import_budget_wait=0) as server:
        headers = {"Authorization": f"Bearer {server.token()}", **MARKDOWN}
        body = b"-\n" * 100_000  # seconds of work: the others arrive while it runs
        async with httpx.AsyncClient(base_url=server.http_url, timeout=120) as client:
            replies = await asyncio.gather(
                *(
                    client.put(f"/api/documents/budget-{i}", content=body, headers=headers)
                    for i in range(3)
                )
            )
            statuses = sorted(reply.status_code for reply in replies)
            assert statuses[0] == 200 and statuses[-1] == 503, statuses
            for i, reply in enumerate(replies):
                if reply.status_code != 503:
                    continue
                assert int(reply.headers["Retry-After"]) >= 1
                assert "import_memory_budget" in reply.json()["error"]
                unchanged = await client.get(f"/api/documents/budget-{i}", headers=headers)
                assert unchanged.status_code == 404
            after = await client.put("/api/documents/budget-0", content=b"# ok\n", headers=headers)
            assert after.status_code == 200  # the budget is whole again


@pytest.mark.parametrize(
    ("containers", "status"),
    [
        (["bullet"] * 12, 200),  # the issue's: levels 10+ and the paragraph after were lost
        (["quote"] * 22, 200),
        (["quote"] * 125, 200),  # a text at depth 128, the guard's max_nesting_depth
        (["ordered", "quote"] * 41, 200),
        (["quote"] * 126, 422),
        (["bullet"] * 63, 422),
    ],
)
async def test_nested_markdown_is_imported_with_every_word_or_refused_whole(
    http: httpx.AsyncClient, containers: list[str], status: int
) -> None:
    name = f"nested-{containers[0]}-{len(containers)}"
    await http.put(f"/api/documents/{name}", content=b"before\n", headers=MARKDOWN)
    markdown = nested(containers)
    put = await http.put(f"/api/documents/{name}", content=markdown.encode(), headers=MARKDOWN)
    assert put.status_code == status, put.text
    text = (await http.get(f"/api/documents/{name}?format=text")).text
    if status == 200:
        assert text.split() == [f"w{i}" for i in range(len(containers))] + ["after"]
    else:
        assert "max_nesting_depth 128" in put.json()["error"] and text == "before"


async def test_deep_quotes_continued_without_markers_are_refused(http: httpx.AsyncClient) -> None:
    lazy = (">" * 120 + " x\n" + "y\n" * 50_000).encode()
    put = await http.put("/api/documents/lazy-quotes", content=lazy, headers=MARKDOWN)
    assert put.status_code == 422 and "'>' markers" in put.json()["error"]
