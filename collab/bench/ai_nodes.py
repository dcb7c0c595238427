"""What not routing AI suggestions to "their" node costs: time-to-first-token of a suggestion
on the node where the document is warm (its editor has been asking there) against a node that
has just loaded it (an editor reconnected elsewhere), with the real embedded model on both.

    python -m tether.collab.bench.ai_nodes --requests 20

Two nodes on one throwaway PostgreSQL and Redis (``collab.bench.engines``). For each of N
documents: an editor on node 0 types the seed text and asks once (warming node 0), types a
few characters and asks again (a *warm* sample); then an editor on node 1, where the document
was never loaded, opens it and asks at the same place (a *just loaded* sample), then types
and asks once more there (*next on new node*: the cost is one cold ask per move). Every ask
follows distinct typing, so no answer comes from a suggestion cache (``source`` is printed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

from tether.protocol.clients.tether_client import TetherClient

from .ai_requests import SEED_TEXT, Sample, ask_socket, percentiles
from .cluster_launch import LocalCluster


async def _measure(cluster: LocalCluster, requests: int, max_tokens: int) -> dict[str, Any]:
    warm: list[Sample] = []
    cold: list[Sample] = []
    again: list[Sample] = []  # the editor's next ask on node 1: warm there from then on
    a, b = cluster.nodes
    for i in range(requests):
        name = f"ai-nodes-{i}"
        async with TetherClient(a.ws_url, token=a.token([name])) as client:
            doc = await client.open(name)
            doc.append(SEED_TEXT + f"Entry {i}: the tide was")
            await doc.wait_acked()
            await ask_socket(doc, f"warmup-{i}", max_tokens)  # node 0's context is warm now
            doc.append(" high and")
            await doc.wait_acked()
            warm.append(await ask_socket(doc, f"warm-{i}", max_tokens))
        async with TetherClient(b.ws_url, token=b.token([name])) as client:
            doc = await client.open(name)  # loaded from PostgreSQL just now, on node 1
            doc.append(" the")
            await doc.wait_acked()
            cold.append(await ask_socket(doc, f"cold-{i}", max_tokens))
            doc.append(" wind")
            await doc.wait_acked()
            again.append(await ask_socket(doc, f"again-{i}", max_tokens))
    return {
        "warm": _summary(warm),
        "just_loaded": _summary(cold),
        "next_on_new_node": _summary(again),
    }


def _summary(samples: list[Sample]) -> dict[str, Any]:
    sources: dict[str, int] = {}
    for s in samples:
        sources[str(s.source)] = sources.get(str(s.source), 0) + 1
    return {
        "requests": len(samples),
        "errors": sum(1 for s in samples if s.error),
        "ttft_ms": percentiles([s.ttft for s in samples if s.ttft is not None]),
        "server_ttft_ms": percentiles(
            [s.server_ttft for s in samples if s.server_ttft is not None]
        ),
        "sources": sources,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--max-tokens", type=int, default=16)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tether-ai-nodes-") as root:
        with LocalCluster(Path(root), 2, auth="jwt", ai_provider="local") as cluster:
            result = asyncio.run(_measure(cluster, args.requests, args.max_tokens))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
