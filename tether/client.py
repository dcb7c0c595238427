"""The Python client (``tether.protocol.clients.tether_client``): one socket, many documents, for
scripts, bots and tests."""

from __future__ import annotations

from tether.protocol.clients.connect_errors import ConnectionFailedError
from tether.protocol.clients.tether_client import (
    ClientClosedError,
    DocumentHandle,
    PermissionDeniedError,
    SuggestionFailedError,
    TetherClient,
    WriteRefusedError,
)

__all__ = [
    "ClientClosedError",
    "ConnectionFailedError",
    "DocumentHandle",
    "PermissionDeniedError",
    "SuggestionFailedError",
    "TetherClient",
    "WriteRefusedError",
]
