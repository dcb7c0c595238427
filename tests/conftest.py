from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.serverproc import ServerProcess


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One real server (JWT auth) shared by tests that use distinct document names."""
    with ServerProcess(tmp_path_factory.mktemp("server")) as proc:
        yield proc


@pytest.fixture
def fresh_server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A server of the test's own, for tests that restart or kill it."""
    proc = ServerProcess(tmp_path / "data")
    try:
        yield proc
    finally:
        proc.stop()
