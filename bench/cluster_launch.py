"""``tether cluster``: N tether nodes on one PostgreSQL and one Redis, behind a loopback balancer.

For local trials and benchmarks, not production (see examples/deploy/compose.yml for that shape).
Without ``--store``/``--bus`` it starts a throwaway PostgreSQL and redis-server of its own
(``bench.engines``). The balancer is a plain TCP relay that hands each new connection to
the next node in turn, skipping nodes that refuse it: a WebSocket stays on the node it reached,
and when that node dies its editors reconnect through the balancer to a live one.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import signal
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tether.collab.runtime.log_redaction import has_password, redact_url

from .engines import PostgresServer, RedisServer
from .launcher import ServerProcess

_RELAY_CHUNK = 64 * 1024


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--port", type=int, default=8765, help="the balancer's loopback port")
    parser.add_argument(
        "--store",
        default=os.environ.get("TETHER_STORE", ""),
        help="postgresql:// DSN (default: $TETHER_STORE, else start one); with a password"
        " in it, prefer TETHER_STORE (a flag is visible in ps)",
    )
    parser.add_argument(
        "--bus",
        default=os.environ.get("TETHER_BUS", ""),
        help="redis:// URL (default: $TETHER_BUS, else start one); with a password in it,"
        " prefer TETHER_BUS",
    )
    parser.add_argument("--auth", default="none", choices=["none", "jwt"])


class Balancer:
    """Round-robin TCP relay on 127.0.0.1."""

    def __init__(self, port: int, backends: list[int]) -> None:
        self.port = port
        self.backends = backends
        self._turn: Iterator[int] = itertools.cycle(range(len(backends)))
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> Balancer:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", self.port)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.close()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in range(len(self.backends)):
            port = self.backends[next(self._turn)]
            try:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
                break
            except OSError:
                continue  # that node is down: the next one
        else:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(_RELAY_CHUNK):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            writer.close()


class LocalCluster:
    """Engines (unless given) plus N nodes; ``with LocalCluster(...) as cluster:``."""

    def __init__(
        self, root: Path, nodes: int, *, store: str = "", bus: str = "", **settings: object
    ) -> None:
        self.root = root
        self._pg = None if store else PostgresServer()
        self._redis = None if bus else RedisServer()
        self.store = store
        self.bus = bus
        self._settings = settings
        self._count = nodes
        self.nodes: list[ServerProcess] = []

    def __enter__(self) -> LocalCluster:
        if self._pg is not None:
            self._pg.start()
            self.store = self._pg.create_database("tether")
        if self._redis is not None:
            self._redis.start()
            self.bus = self._redis.url
        for i in range(self._count):
            node = ServerProcess(
                self.root / f"node{i}",
                store=self.store,
                bus=self.bus,
                node_id=f"node{i}",
                **self._settings,
            )
            self.nodes.append(node.start())
        return self

    def __exit__(self, *exc: object) -> None:
        for node in self.nodes:
            node.stop()
        if self._redis is not None:
            self._redis.close()
        if self._pg is not None:
            self._pg.close()


def run(args: argparse.Namespace) -> int:
    for flag in ("store", "bus"):
        given = getattr(args, flag)
        if has_password(given) and given != os.environ.get(f"TETHER_{flag.upper()}"):
            print(
                f"tether cluster: --{flag} carries a password on the command line (ps, /proc);"
                f" set TETHER_{flag.upper()} in the environment instead",
                file=sys.stderr,
            )
    with tempfile.TemporaryDirectory(prefix="tether-cluster-") as root:
        # Every editor of a local trial comes from 127.0.0.1: no per-address limit.
        with LocalCluster(
            Path(root),
            args.nodes,
            store=args.store,
            bus=args.bus,
            auth=args.auth,
            max_connections_per_address=0,
        ) as cluster:
            ports = [node.port for node in cluster.nodes]
            print(f"tether cluster: {args.nodes} nodes on ports {ports}", flush=True)
            print(f"  balancer: http://127.0.0.1:{args.port}/ (ws://127.0.0.1:{args.port}/ws)")
            # The nodes get the URLs in their environment, never on a command line; what is
            # printed here goes to terminals and CI logs: no password.
            print(f"  store: {redact_url(cluster.store)}", flush=True)
            print(f"  bus: {redact_url(cluster.bus)}\n  Ctrl-C stops everything", flush=True)
            asyncio.run(_balance_until_signalled(args.port, ports))
    return 0


async def _balance_until_signalled(port: int, backends: list[int]) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with Balancer(port, backends):
        await stop.wait()
