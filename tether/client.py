"""The Python client (``tether.protocol.client``): one socket, many documents, for scripts,
bots and tests."""

from __future__ import annotations

from tether.protocol.client import (
    ClientClosedError,
    DocumentHandle,
    PermissionDeniedError,
    TetherClient,
)

__all__ = ["ClientClosedError", "DocumentHandle", "PermissionDeniedError", "TetherClient"]
