"""``tether bench sync --driver js`` (issue 29): editors built on the JS ``yjs`` library, each on
its own socket speaking Hocuspocus frames, against this checkout's server and against stock
Hocuspocus: every edit reaches every other editor of its document once, every edit is acked
(tether's SyncStatus, and Hocuspocus's), and the server's CPU is read."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import anyio
import pytest

from tests.jsclient import require_node
from tether.collab.cli import main


def run(tmp_path: Path, *extra: str) -> dict[str, object]:
    require_node()
    out = tmp_path / "sync.json"
    common = ["--editors", "6", "--docs", "2", "--rate", "5", "--duration", "2", "--json"]
    assert main(["bench", "sync", "--driver", "js", *common, str(out), *extra]) == 0
    return dict(json.loads(out.read_text()))


def check(result: dict[str, object]) -> None:
    assert result["error_count"] == 0, result["errors"]
    sent = result["updates_sent"]
    assert isinstance(sent, int) and sent >= 6 * 5 * 2 * 0.8
    assert result["fanout_received"] == result["fanout_expected"] == sent * 2  # 3 per doc
    assert result["fanout_duplicates"] == 0
    assert result["acks_received"] == sent and result["rejected"] == 0
    assert isinstance(result["server_cpu_s_per_1000_edits"], float)


def test_js_editors_drive_this_server(tmp_path: Path) -> None:
    result = run(tmp_path)
    assert result["driver"] == "js"
    check(result)
    # Where the server's CPU went, by thread: the event loop and the SQLite writer by name.
    threads = result["server_threads"]
    assert isinstance(threads, list)
    names = [row["thread"] for row in threads]
    assert names[0] == "event loop" and "tether-sqlite" in names
    assert sum(row["share"] for row in threads) <= 1.0 + 1e-6
    assert all(
        row["cpu_s"] == pytest.approx(row["user_s"] + row["system_s"], abs=0.011) for row in threads
    )
    # The hand-offs between them, counted by the kernel: the writer sleeps between commits and
    # the loop between frames, so both switch, and the total is per edit.
    switches = {row["thread"]: row["switches"] for row in threads}
    assert switches["event loop"] > 0 and switches["tether-sqlite"] > 0
    assert (
        result["server_switches_per_edit"] >= sum(switches.values()) / result["updates_sent"] - 0.01
    )
    # What the server saw itself, from its /metrics around the window: bucket bounds in ms.
    assert isinstance(result["server_ack_p99_ms"], float) and result["server_ack_p99_ms"] > 0
    assert result["server_loop_lag_max_ms"] is not None
    assert result["server_loop_lag_p99_ms"] <= result["server_loop_lag_max_ms"]


def test_js_editors_drive_hocuspocus_side_by_side(tmp_path: Path) -> None:
    result = run(tmp_path, "--compare", "hocuspocus", "--reps", "1")
    assert result["error_count"] == 0, result["errors"]
    settings, reps = result["settings"], result["reps"]
    assert isinstance(settings, dict) and settings["driver"] == "js"
    assert isinstance(reps, dict) and len(reps) == 2 and "hocuspocus" in reps
    for label, runs in reps.items():
        assert len(runs) == 1 and runs[0]["errors"] == 0, label
        assert runs[0]["updates_sent"] >= 6 * 5 * 2 * 0.8, label
    assert isinstance(result["ratios"], dict) and result["ratios"]
    assert reps["this"][0]["server_ack_p99_ms"] is not None
    assert reps["hocuspocus"][0]["server_ack_p99_ms"] is None  # it has no /metrics
    # Context switches are read from the kernel for either server, so they compare.
    assert all(runs[0]["switches_per_edit"] > 0 for runs in reps.values())


EXTENSION = Path(__file__).parent / "node_modules" / "@hocuspocus" / "extension-sqlite"
NO_EXTENSION = "@hocuspocus/extension-sqlite is not installed (better-sqlite3 did not build)"


def test_the_durable_hocuspocus_takes_the_same_load(tmp_path: Path) -> None:
    """``--compare hocuspocus-sqlite``: Hocuspocus with its SQLite extension (an optional npm
    dependency: it compiles better-sqlite3) takes the same load; skipped, saying why, where npm
    could not build it."""
    if not EXTENSION.is_dir():
        pytest.skip(NO_EXTENSION)
    result = run(tmp_path, "--compare", "hocuspocus-sqlite", "--reps", "1")
    assert result["error_count"] == 0, result["errors"]
    reps = result["reps"]
    assert isinstance(reps, dict) and "hocuspocus-sqlite" in reps
    durable = reps["hocuspocus-sqlite"][0]
    assert durable["errors"] == 0 and durable["updates_sent"] >= 6 * 5 * 2 * 0.8


@pytest.mark.anyio
async def test_the_durable_hocuspocus_stores_what_an_editor_typed() -> None:
    """What makes it the durable peer: the typed text reaches its SQLite file (debounced)."""
    if not EXTENSION.is_dir():
        pytest.skip(NO_EXTENSION)
    from tether.bench.hocuspocus import HocuspocusProcess
    from tether.client import TetherClient

    with HocuspocusProcess(durable=True) as hocuspocus:
        assert hocuspocus.database is not None
        async with TetherClient(hocuspocus.ws_url, token="any", reconnect=False) as client:
            doc = await client.open("stored-doc")
            doc.append("kept on disk")
            await doc.wait_synced()
            with anyio.fail_after(20):
                while not _stored(hocuspocus.database, "stored-doc"):
                    await anyio.sleep(0.1)  # the extension stores on its own debounce timer


def _stored(database: Path, name: str) -> bool:
    if not database.exists():
        return False
    with sqlite3.connect(database) as db:
        rows = db.execute("SELECT data FROM documents WHERE name = ?", (name,)).fetchall()
    return bool(rows) and len(rows[0][0]) > 10


@pytest.mark.parametrize("driver", ["js", "python"])
def test_a_warmup_is_typed_but_not_counted(tmp_path: Path, driver: str) -> None:
    """``--warmup``: editors type before the measured window (a server measured warm); those
    edits, their fan-out and their acks are left out, so the counts still agree."""
    if driver == "js":
        require_node()
    out = tmp_path / "sync.json"
    load = ["--editors", "6", "--docs", "2", "--rate", "5", "--duration", "2", "--warmup", "2"]
    assert main(["bench", "sync", "--driver", driver, *load, "--json", str(out)]) == 0
    result = dict(json.loads(out.read_text()))
    check(result)  # fan-out and acks are exactly those of the counted edits
    assert result["updates_sent"] <= 6 * 5 * 2 * 1.2  # not the warm-up's 60 as well
