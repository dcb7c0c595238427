"""Where an idle ``/ws`` connection's server memory goes: Python heap (tracemalloc) and RSS.

Runs the server in this process (uvicorn in a thread, with the settings ``tether serve`` gives
it) and the idle clients in a subprocess, so only the server's allocations are counted. From
the repository's root: ``python -m tether.bench.idle_heap [connections] [documents]
[top] [--files] [--tracebacks]``. A measuring tool, not a test.
"""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path

import psutil
import uvicorn

from tether import Settings, create_app
from tether.collab.transport.raw_frames import RawFramesProtocol

from .launcher import free_port

_CLIENT = """
import asyncio, sys
from tether.bench.peer import BenchPeer
from websockets.asyncio.client import connect
async def main(url, n, docs):
    gate = asyncio.Semaphore(50)
    async def one(k):
        async with gate:
            ws = await connect(url, compression=None, open_timeout=120)
            peer = BenchPeer(ws, f"d{k % docs}")
            await peer.open("")
            return peer
    peers = await asyncio.gather(*(one(k) for k in range(n)))
    print("open", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
"""


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    docs = int(sys.argv[2]) if len(sys.argv) > 2 else max(1, n // 5)
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 25
    settings = Settings(
        data_dir=Path(tempfile.mkdtemp()),
        auth="none",
        ai_provider="none",
        max_connections_per_address=n + 100,
    )
    port = free_port()
    config = uvicorn.Config(
        create_app(settings),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        ws_ping_interval=settings.ping_interval,
        ws_ping_timeout=settings.idle_timeout,
        ws_per_message_deflate=False,
        ws=RawFramesProtocol,
    )
    server = uvicorn.Server(config)
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    url = f"ws://127.0.0.1:{port}/ws"
    me = psutil.Process()

    def spawn(count: int, documents: int) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-c", _CLIENT, url, str(count), str(documents)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    warm = spawn(50, 50)  # first-use allocations (imports, caches) out of the difference
    warm.stdout.readline()  # type: ignore[union-attr]
    time.sleep(1)
    gc.collect()
    rss1 = me.memory_info().rss
    snap1 = tracemalloc.take_snapshot()
    more = spawn(n, docs)
    more.stdout.readline()  # type: ignore[union-attr]
    time.sleep(2)
    gc.collect()
    rss2 = me.memory_info().rss
    snap2 = tracemalloc.take_snapshot()
    stats = snap2.compare_to(snap1, "lineno")
    total = sum(s.size_diff for s in stats)
    print(f"{n} connections over {docs} documents")
    print(f"python heap per connection {total / 1024 / n:.2f} KB")
    print(f"RSS per connection {(rss2 - rss1) / 1024 / n:.2f} KB (tracemalloc's own included)")
    for s in stats[:top]:
        frame = s.traceback[0]
        print(
            f"{s.size_diff / 1024 / n:7.2f} KB {s.count_diff / n:6.1f} obj"
            f"  {frame.filename.split('site-packages/')[-1]}:{frame.lineno}"
        )
    if "--files" in sys.argv:
        for s in snap2.compare_to(snap1, "filename")[:top]:
            name = s.traceback[0].filename.split("site-packages/")[-1]
            print(f"{s.size_diff / 1024 / n:7.2f} KB {s.count_diff / n:6.1f} obj  {name}")
    if "--tracebacks" in sys.argv:
        for s in snap2.compare_to(snap1, "traceback")[:12]:
            print(f"--- {s.size_diff / 1024 / n:7.2f} KB {s.count_diff / n:6.1f} obj")
            for line in s.traceback.format()[-12:]:
                print("   ", line.split("site-packages/")[-1])
    for p in (warm, more):
        p.stdin.close()  # type: ignore[union-attr]
        p.wait()
    asyncio.run(asyncio.sleep(0))


if __name__ == "__main__":
    tracemalloc.start(12 if "--tracebacks" in sys.argv else 1)
    main()
