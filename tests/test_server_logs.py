"""What an operator reads in the log: one format for every line, "serving on" only once the
port is bound (with the real port), and connections, documents and auth refusals at info or
debug with peer and document, never a token or document text (issue 12, operator conveniences)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.rawpeer import MuxPeer
from tests.serverproc import ServerProcess

pytestmark = pytest.mark.anyio

LINE = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) \S+: "
)


async def test_one_format_lifecycle_lines_and_no_secrets(tmp_path: Path) -> None:
    secret_text = "the quarterly numbers are confidential"
    with ServerProcess(tmp_path, log_level="debug", unload_grace=0.2) as server:
        token = server.token(["logged"])
        async with await MuxPeer.connect(server.ws_url) as peer:
            doc = await peer.open("logged", token)
            await doc.append(secret_text)
            await doc.wait_acked()
            refused = await peer.attach("elsewhere", token)  # not in the token's docs
            await refused.wait(lambda: refused.denied is not None, what="the refusal")
        log = server.log_path.read_text(errors="replace")
    lines = [line for line in log.splitlines() if line.strip()]
    strays = [line for line in lines if not LINE.match(line) and not line.startswith((" ", "\t"))]
    assert not strays, strays[:5]
    serving = [i for i, line in enumerate(lines) if "tether serving on http://127.0.0.1:" in line]
    running = [i for i, line in enumerate(lines) if "Uvicorn running on" in line]
    assert serving and running and serving[0] > running[0]
    assert f"127.0.0.1:{server.port}" in lines[serving[0]]
    assert re.search(r"socket opened from 127\.0\.0\.1 on /ws", log)
    assert "loaded document 'logged'" in log
    assert "refused document 'elsewhere' on a ws connection: document not allowed" in log
    assert token not in log and secret_text not in log
