"""``python -m tether.ai.model.worker --fd N --config JSON``: the model worker process, started by
the server.

Its stderr is the server's to read: lines starting with ``contract.LOG_MARK`` are this
process's own log records (the server logs them at their level), everything else is native
output (llama.cpp, torch, a fault handler's traceback), which the server keeps at debug level
and quotes when the worker dies.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import faulthandler
import json
import logging
import os
import signal
import socket
import sys
from typing import TYPE_CHECKING

from .contract import LOG_MARK

if TYPE_CHECKING:
    from .faults import Faults
    from .serve import WorkerConfig

PR_SET_PDEATHSIG = 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tether.ai.model.worker")
    parser.add_argument("--fd", type=int, required=True, help="the inherited channel socket")
    parser.add_argument("--config", default="{}", help="WorkerConfig as JSON")
    parser.add_argument("--log-level", default="info")
    args = parser.parse_args(argv)
    _configure_logging(args.log_level)
    faulthandler.enable()  # a native fault prints the Python stack the server then quotes
    _die_with_parent()
    _volunteer_for_oom_killer()
    # Imported only now: loading them is this process's job, never the server's.
    from .faults import ENV, Faults
    from .serve import WorkerConfig

    config = WorkerConfig.from_json(json.loads(args.config))
    if config.nice > 0:
        # Sync before suggestions when the cores are contended: the model yields to the
        # process that holds the sockets, and takes all the CPU it likes otherwise.
        os.nice(config.nice)
    if config.cpus:
        from ..cpus import pin_this_process

        pin_this_process(set(config.cpus))  # cores of its own; fails soft (logged)
    faults = Faults.parse(os.environ.get(ENV, ""))
    channel = socket.socket(fileno=args.fd)
    return asyncio.run(_serve(config, faults, channel))


async def _serve(config: WorkerConfig, faults: Faults, channel: socket.socket) -> int:
    from .serve import WorkerServer

    reader, writer = await asyncio.open_unix_connection(sock=channel)
    server = WorkerServer(config, reader, writer, faults)
    try:
        return await server.run()
    finally:
        writer.close()


def _configure_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_MARK + "%(levelno)d %(name)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("httpx", "urllib3", "filelock", "sentence_transformers", "transformers"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def _die_with_parent() -> None:
    """If the server dies without closing the channel (SIGKILL), the kernel ends us too."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass  # not Linux: the closed channel still ends the worker


def _volunteer_for_oom_killer() -> None:
    """Under memory pressure the kernel should kill this process, not the server's."""
    try:
        with open("/proc/self/oom_score_adj", "w") as adj:
            adj.write("1000")
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main())
