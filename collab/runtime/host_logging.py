"""tether's log lines inside a host app. A host run by ``uvicorn.run(app)`` has only uvicorn's
loggers configured: a line of tether's reaches no handler, and Python then drops it below
WARNING (INFO lines vanished) and prints the rest bare. Where nothing above a tether logger
would write its lines, they go to the host server's own handlers, in its format.

A host that configured logging itself (a root handler, or one on ``tether``) decides alone,
and ``tether serve`` configures the root: nothing is added there, so nothing is written twice.
Knows the logging module and the servers' logger names, nothing of the server.
"""

from __future__ import annotations

import logging

# tether's own lines (every module logs under "tether"), and the model worker's, relayed.
_OURS = ("tether", "ai.worker")
# Where an ASGI server keeps its handlers, in the order they are looked for.
_HOST_SERVERS = ("uvicorn", "uvicorn.error", "hypercorn.error", "gunicorn.error")


class ToHostServer(logging.Handler):
    """Hands each record to the host server's logger, whose handlers write it."""

    def __init__(self, target: logging.Logger) -> None:
        super().__init__()
        self.target = target

    def emit(self, record: logging.LogRecord) -> None:
        self.target.handle(record)


def install() -> list[str]:
    """Bridge each of our loggers that would write nowhere; the names bridged."""
    target = next(
        (logging.getLogger(n) for n in _HOST_SERVERS if logging.getLogger(n).handlers), None
    )
    if target is None:
        return []
    bridged = []
    for name in _OURS:
        logger = logging.getLogger(name)
        if logger.hasHandlers():  # the host's configuration, or bridged already
            continue
        logger.addHandler(ToHostServer(target))
        if logger.level == logging.NOTSET:
            # The root's WARNING would still drop INFO: tether's start-up and refusal lines
            # are INFO, as uvicorn's own are.
            logger.setLevel(logging.INFO)
        bridged.append(name)
    return bridged
