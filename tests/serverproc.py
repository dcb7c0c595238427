"""The real server as a subprocess for tests (see ``collab.launcher``)."""

from __future__ import annotations

from collab.launcher import DEFAULT_SECRET, ServerProcess, free_port

SECRET = DEFAULT_SECRET

__all__ = ["SECRET", "ServerProcess", "free_port"]
