"""The real server as a subprocess for tests (see ``bench.launcher``)."""

from __future__ import annotations

from tether.bench.launcher import DEFAULT_SECRET, ServerProcess, free_port

SECRET = DEFAULT_SECRET

__all__ = ["SECRET", "ServerProcess", "free_port"]
