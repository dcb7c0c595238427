"""uvicorn's Server, saying where tether serves once it is really listening (and freezing
what startup made out of the garbage collector's way)."""

from __future__ import annotations

import gc
import logging
import socket
from pathlib import Path

import uvicorn

from . import gc_policy

log = logging.getLogger("tether")


class AnnouncingServer(uvicorn.Server):
    """Logs "tether serving on ..." after the bind (a failed bind never claims to serve), with
    the port the kernel chose when 0 was asked for."""

    def __init__(self, config: uvicorn.Config, data_dir: Path, *, gc_freeze: bool = True) -> None:
        super().__init__(config)
        self._data_dir = data_dir
        self._gc_freeze = gc_freeze

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if not self.started:
            return
        # What startup made (modules, classes, the app, the AI engine) lives as long as the
        # process: frozen, a full collection no longer walks it (a pause every editor feels,
        # long with thousands of idle sockets: each of their objects is walked too).
        gc.collect()
        gc.freeze()
        if self._gc_freeze:
            gc_policy.install()  # and from now on, what survives a full collection (see there)
        for listener in self.servers:
            for bound in listener.sockets:
                host, port = bound.getsockname()[:2]
                log.info("tether serving on http://%s:%d (data in %s)", host, port, self._data_dir)
