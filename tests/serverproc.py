"""The real server as a subprocess for tests (see ``collab.bench.launcher``)."""

from __future__ import annotations

from tether.collab.bench.launcher import DEFAULT_SECRET, ServerProcess, free_port

SECRET = DEFAULT_SECRET

__all__ = ["SECRET", "ServerProcess", "free_port"]
