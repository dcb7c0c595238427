"""tether: a collaborative-editing sync server (Yjs-compatible) with AI suggestions, as a
Python API for host apps. The public surface is what this module exports; see
docs/embedding.md.

The code lives in three packages, ``tether.collab`` (documents, rooms, the server),
``tether.ai`` and ``tether.protocol`` (sans-IO wire format and the Python client), with the
benchmarks beside them in ``tether.bench`` (which none of them imports). Installed, they are
subpackages of ``tether``, so a host app with its own ``protocol`` or ``collab`` module is
unaffected. In a source checkout they stay at the repository's top level (``collab/``, ``ai/``,
``protocol/``, ``bench/``): this package then reaches them through its ``__path__``.
"""

from __future__ import annotations

from pathlib import Path as _Path

_HERE = _Path(__file__).resolve().parent
if not (_HERE / "collab").is_dir() and (_HERE.parent / "collab" / "__init__.py").is_file():
    __path__.append(str(_HERE.parent))  # a source checkout: tether.collab is ../collab

from tether.collab.auth.tokens import AuthError, Grant  # noqa: E402
from tether.collab.config import Settings  # noqa: E402
from tether.collab.content.reading import Content, read_content  # noqa: E402
from tether.collab.hooks import AuthRequest, ConnectionInfo, Extension, UnknownHook  # noqa: E402
from tether.collab.rooms.direct import DirectConnection, DocumentClosed  # noqa: E402
from tether.collab.rooms.room import Room  # noqa: E402
from tether.collab.server import NotStarted, TetherServer, create_app  # noqa: E402
from tether.collab.storage.store import StorageError, Store  # noqa: E402
from tether.collab.version import VERSION as __version__  # noqa: E402

__all__ = [
    "AuthError",
    "AuthRequest",
    "ConnectionInfo",
    "Content",
    "DirectConnection",
    "DocumentClosed",
    "Extension",
    "Grant",
    "NotStarted",
    "Room",
    "Settings",
    "StorageError",
    "Store",
    "TetherServer",
    "UnknownHook",
    "__version__",
    "create_app",
    "read_content",
]
