"""/metrics as Prometheus users expect it: counters typed as counters, no ``_created`` series,
label values without spaces (issue 12, operator conveniences)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from tests.ai.asking import UNSHAPED
from tests.metrics_scrape import metric_value, metrics_text
from tests.rawpeer import MuxPeer
from tests.serverproc import ServerProcess

pytestmark = pytest.mark.anyio

SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][\w:]*)(?:\{(?P<labels>.*)\})? \S+$")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ServerProcess(
        tmp_path_factory.mktemp("metrics"),
        ai_provider="scripted",
        **UNSHAPED,
    ) as server:
        yield server


async def test_counters_are_counters_and_no_created_series(server: ServerProcess) -> None:
    async with await MuxPeer.connect(server.ws_url) as peer:
        await peer.open("metrics-doc", server.token())
    text = await metrics_text(server)
    assert "_created" not in text
    assert "# TYPE tether_ai_warm_state_hits_total counter" in text
    for line in text.splitlines():
        if line.startswith("# TYPE ") and line.endswith(" gauge"):
            name = line.split()[2]
            assert not name.endswith("_total"), f"{name} is a count, typed as a gauge"


async def test_label_values_have_no_spaces(server: ServerProcess) -> None:
    async with await MuxPeer.connect(server.ws_url) as peer:
        await peer.attach("metrics-denied", "not-a-token")  # an auth failure, with a reason
        assert await peer.alive()
    text = await metrics_text(server)
    assert metric_value(text, "tether_auth_failures_total", reason="invalid_token") >= 1
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if match is None or not match.group("labels"):
            continue
        for key, value in re.findall(r'(\w+)="([^"]*)"', match.group("labels")):
            if key in ("version", "python", "pycrdt", "le", "quantile"):
                continue
            assert re.fullmatch(r"[a-z0-9_.\-]*", value), (
                f"{match.group('name')}{{{key}={value!r}}}"
            )


def test_label_value_turns_reasons_into_words_joined_by_underscores() -> None:
    from tether.collab.runtime.sync_metrics import label_value

    assert label_value("document not allowed by token") == "document_not_allowed_by_token"
    assert (
        label_value("Invalid token: 'exp' must be a number") == "invalid_token_exp_must_be_a_number"
    )
    assert label_value("!!!") == "other"
    assert len(label_value("x" * 500)) == 64


async def test_the_stores_commits_and_its_commit_window_are_on_metrics(
    server: ServerProcess,
) -> None:
    """An acked edit is a committed transaction: it shows in ``tether_store_commits_total``.
    The commit window's waits and the company they gather are there beside it."""
    before = metric_value(await metrics_text(server), "tether_store_commits_total")
    async with await MuxPeer.connect(server.ws_url) as peer:
        doc = await peer.open("metrics-commits", server.token())
        for word in ("one ", "two "):
            await doc.append(word)
            await doc.wait_acked()
    text = await metrics_text(server)
    assert metric_value(text, "tether_store_commits_total") >= before + 2
    assert "# TYPE tether_store_commits_total counter" in text
    assert "# TYPE tether_store_commit_waits_total counter" in text
    assert "\ntether_store_commit_company " in text
