"""An update the disk refused, on the embedded SQLite store, through the real server: the
editors' updates that build on it are not stored without it, the room rebuilds the document and
asks for a resend, and once the disk takes writes again everything is stored and survives a
restart. (A trigger in the real database file refuses the inserts: SQLite's own failure path.)"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.rawpeer import MuxPeer
from tests.serverproc import ServerProcess

pytestmark = pytest.mark.anyio

NAME = "doomed"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    with ServerProcess(tmp_path, ai_provider="none") as server:
        yield server


def refuse_writes(db: Path, refuse: bool) -> None:
    """While on, the disk refuses any update holding the text "LOST" (and only those)."""
    with sqlite3.connect(db) as conn:
        if refuse:
            conn.execute(
                # Slow to fail (a count to two million first), so the writes that follow
                # queue behind it in the next transaction rather than sharing its fate.
                """CREATE TRIGGER refuse BEFORE INSERT ON updates
                    WHEN instr(NEW.data, CAST('LOST' AS BLOB)) > 0 BEGIN
                        SELECT count(*) FROM (WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL
                            SELECT i + 1 FROM n WHERE i < 2000000) SELECT i FROM n);
                        SELECT RAISE(ABORT, 'disk refused (test trigger)');
                    END"""
            )
        else:
            conn.execute("DROP TRIGGER refuse")


async def stored_text(server: ServerProcess) -> str:
    async with httpx.AsyncClient(timeout=10) as http:
        reply = await http.get(
            f"{server.http_url}/api/documents/{NAME}",
            headers={"Authorization": f"Bearer {server.token([NAME])}"},
        )
    return str(reply.json()["text"])


async def test_updates_built_on_a_refused_one_wait_for_it_and_nothing_acked_is_lost(
    server: ServerProcess,
) -> None:
    db = server.data_dir / "tether.db"
    token = server.token([NAME])
    async with (
        await MuxPeer.connect(server.ws_url) as author,
        await MuxPeer.connect(server.ws_url) as reader,
    ):
        doc = await author.open(NAME, token)
        other = await reader.open(NAME, token)
        await doc.append("a")
        await doc.wait_acked()
        refuse_writes(db, True)
        await doc.append("LOST")  # refused by the disk (slowly): not acked
        await other.wait_text("aLOST")  # fanned out before the disk has it, as always
        await other.append("c")  # built on it: stored without it, nobody could load it
        await doc.wait_acked()
        await other.wait_acked()
        assert doc.statuses[-1] is False
        assert other.statuses[-1] is False  # so it is not acked either
        refuse_writes(db, False)
        # The room rebuilt the document and asked both for a resend; each answered its step1
        # with what the store lacked: once those are acked, all of it is stored.
        await doc.wait(lambda: doc.statuses[-1] is True, what="the author's acked resend")
        await other.wait(lambda: other.statuses[-1] is True, what="the reader's acked resend")
    assert await stored_text(server) == "aLOSTc"
    server.restart()
    assert await stored_text(server) == "aLOSTc"
