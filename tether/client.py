"""The Python client (``tether.protocol.client``): one socket, many documents, for scripts,
bots and tests."""

from __future__ import annotations

from tether.protocol.client import (
    ClientClosedError,
    DocumentHandle,
    PermissionDeniedError,
    SuggestionFailedError,
    TetherClient,
    WriteRefusedError,
)
from tether.protocol.connect_errors import ConnectionFailedError

__all__ = [
    "ClientClosedError",
    "ConnectionFailedError",
    "DocumentHandle",
    "PermissionDeniedError",
    "SuggestionFailedError",
    "TetherClient",
    "WriteRefusedError",
]
