from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.serverproc import ServerProcess
from tether.bench.engines import PostgresServer, RedisServer, postgres_bindir, redis_binary


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


# -- real engines for the scale-out tests (see bench.engines) ---------------------------


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """One PostgreSQL for the session, as its own user in a temp dir; each test makes a DB."""
    if postgres_bindir() is None:
        pytest.skip("PostgreSQL is not installed (.ci/setup --dev installs it)")
    server = PostgresServer()
    try:
        yield server.start()
    finally:
        server.close()


@pytest.fixture
def pg_dsn(postgres: PostgresServer) -> str:
    """A fresh, empty database of the test's own on the session's PostgreSQL."""
    return postgres.create_database("t_" + uuid.uuid4().hex[:16])


@pytest.fixture
def own_postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL of the test's own, for tests that stop or kill it."""
    if postgres_bindir() is None:
        pytest.skip("PostgreSQL is not installed (.ci/setup --dev installs it)")
    server = PostgresServer()
    try:
        yield server.start()
    finally:
        server.close()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    if redis_binary() is None:
        pytest.skip("redis-server is not installed (.ci/setup --dev installs it)")
    server = RedisServer()
    try:
        yield server.start()
    finally:
        server.close()
