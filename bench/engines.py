"""Throwaway PostgreSQL and redis-server instances in temp dirs on free loopback ports.

For the scale-out tests and ``tether cluster``: real engines from Debian's packages, no mocks.
PostgreSQL refuses to run as root, so under root its processes run as a dedicated system user
(``tether-pg``, created if missing) and its directory belongs to that user.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

from .launcher import free_port, terminate_process

PG_USER = "tether-pg"


def postgres_bindir() -> Path | None:
    """The newest installed PostgreSQL's bin directory, or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=_version_key)
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def redis_binary() -> str | None:
    return shutil.which("redis-server") or (
        "/usr/bin/redis-server" if os.access("/usr/bin/redis-server", os.X_OK) else None
    )


def _version_key(path: str) -> tuple[int, ...]:
    part = Path(path).parents[1].name
    return tuple(int(p) for p in part.split(".") if p.isdigit())


def _ensure_pg_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(PG_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", PG_USER],
            check=True,
            capture_output=True,
        )
        return pwd.getpwnam(PG_USER)


def _wait_port(port: int, timeout: float, alive: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if alive is not None and alive.poll() is not None:
            raise RuntimeError(f"process exited with {alive.returncode} before listening")
        with socket.socket() as sock:
            sock.settimeout(0.2)
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.02)  # polling a process we just spawned; not test synchronisation
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout}s")


class PostgresServer:
    """``initdb`` once, then ``start``/``stop``/``kill`` as often as a test needs."""

    def __init__(self, bindir: Path | None = None) -> None:
        found = bindir or postgres_bindir()
        if found is None:
            raise RuntimeError("PostgreSQL is not installed (apt-get install postgresql)")
        self.bindir = found
        self.port = free_port()
        # Not under pytest's tmp dirs: those are root-only (0700), and the server's user must
        # be able to reach its directory.
        self.root = Path(tempfile.mkdtemp(prefix="tether-pg-"))
        self.data = self.root / "data"
        self.log_path = self.root / "postgres.log"
        self._uid: int | None = None
        self._gid: int | None = None
        if os.geteuid() == 0:
            user = _ensure_pg_user()
            self._uid, self._gid = user.pw_uid, user.pw_gid
            os.chown(self.root, user.pw_uid, user.pw_gid)
        os.chmod(self.root, 0o755)
        self._initdb()

    @property
    def dsn(self) -> str:
        return f"postgresql://tether@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [str(self.bindir / args[0]), *args[1:]],
            user=self._uid,
            group=self._gid,
            extra_groups=[] if self._uid is not None else None,
            capture_output=True,
            check=check,
            timeout=120,
        )

    def _initdb(self) -> None:
        self._run("initdb", "-D", str(self.data), "-U", "tether", "--auth=trust", "-E", "UTF8")
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write(
                f"\nport = {self.port}\nlisten_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{self.root}'\nmax_connections = 200\n"
                # Durability stays on (acks mean COMMIT is on disk); the rest keeps it small.
                "fsync = on\nsynchronous_commit = on\nshared_buffers = 32MB\n"
            )

    def start(self) -> PostgresServer:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log_path), "-w", "start")
        _wait_port(self.port, 30)
        return self

    def create_database(self, name: str) -> str:
        """A new empty database; its DSN."""
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "tether", name)
        return self.dsn.rsplit("/", 1)[0] + "/" + name

    def require_password(self, user: str, password: str) -> str:
        """A superuser ``user`` that must log in with ``password`` over TCP (SCRAM; everyone
        else stays trusted); the DSN of the ``postgres`` database for it, password included."""
        escaped = password.replace("'", "''")
        self._run(
            "psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "tether", "-d", "postgres",
            "-v", "ON_ERROR_STOP=1", "-c",
            f"CREATE ROLE \"{user}\" LOGIN SUPERUSER PASSWORD '{escaped}'",
        )  # fmt: skip
        hba = self.data / "pg_hba.conf"
        rule = f"host all {user} 127.0.0.1/32 scram-sha-256\n"
        hba.write_text(rule + hba.read_text())  # the first matching line wins
        self._run("pg_ctl", "-D", str(self.data), "reload")
        return f"postgresql://{user}:{quote(password, safe='')}@127.0.0.1:{self.port}/postgres"

    def stop(self) -> None:
        """A clean, fast shutdown (connections are cut); the data stays for ``start``."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop", check=False)

    def kill(self) -> None:
        """SIGKILL the postmaster: what a crashed database host looks like to the nodes."""
        pid_file = self.data / "postmaster.pid"
        try:
            pid = int(pid_file.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-5000:]
        except OSError:
            return ""

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


class RedisServer:
    """A redis-server without persistence (the streams are a relay, never the only copy)."""

    def __init__(self, password: str = "") -> None:
        self.password = password  # requirepass: clients must AUTH with it
        binary = redis_binary()
        if binary is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        self.binary = binary
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="tether-redis-"))
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        auth = f":{quote(self.password, safe='')}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        log = open(self.root / "redis.log", "ab")
        args = ["--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.root)]
        args += ["--save", "", "--appendonly", "no", "--daemonize", "no"]
        if self.password:
            args += ["--requirepass", self.password]
        self.proc = subprocess.Popen(
            [self.binary, *args],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        _wait_port(self.port, 20, self.proc)
        return self

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def pause(self) -> None:
        """SIGSTOP: connections stay open and the kernel still accepts new ones, but nothing is
        answered: what a hung or overloaded Redis looks like to the nodes."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.resume()  # a paused process would not act on SIGTERM
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def pgbouncer_binary() -> str | None:
    return shutil.which("pgbouncer") or (
        "/usr/sbin/pgbouncer" if os.access("/usr/sbin/pgbouncer", os.X_OK) else None
    )


class PgBouncer:
    """A pgbouncer in front of a ``PostgresServer``, in transaction pooling by default (a server
    connection is lent per transaction, so session state such as named prepared statements does
    not follow a client); few server connections, so clients really share them. Runs as the
    PostgreSQL user under root (pgbouncer refuses root too)."""

    def __init__(self, upstream: PostgresServer, *, pool_mode: str = "transaction") -> None:
        binary = pgbouncer_binary()
        if binary is None:
            raise RuntimeError("pgbouncer is not installed (apt-get install pgbouncer)")
        self.binary = binary
        self.upstream = upstream
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="tether-pgbouncer-"))
        self.proc: subprocess.Popen[bytes] | None = None
        (self.root / "users.txt").write_text('"tether" ""\n')
        (self.root / "pgbouncer.ini").write_text(
            f"[databases]\n* = host=127.0.0.1 port={upstream.port}\n"
            f"[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {self.port}\n"
            "unix_socket_dir =\nauth_type = trust\n"
            f"auth_file = {self.root / 'users.txt'}\npool_mode = {pool_mode}\n"
            "default_pool_size = 2\nmax_client_conn = 500\n"
            f"logfile = {self.root / 'pgbouncer.log'}\n"
            "ignore_startup_parameters = extra_float_digits\n"
        )
        self._uid, self._gid = upstream._uid, upstream._gid
        if self._uid is not None and self._gid is not None:
            for path in (self.root, *self.root.iterdir()):
                os.chown(path, self._uid, self._gid)
        os.chmod(self.root, 0o755)

    def dsn(self, database: str) -> str:
        return f"postgresql://tether@127.0.0.1:{self.port}/{database}"

    def start(self) -> PgBouncer:
        self.proc = subprocess.Popen(
            [self.binary, str(self.root / "pgbouncer.ini")],
            user=self._uid,
            group=self._gid,
            extra_groups=[] if self._uid is not None else None,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _wait_port(self.port, 20, self.proc)
        return self

    def log(self) -> str:
        try:
            return (self.root / "pgbouncer.log").read_text(errors="replace")[-5000:]
        except OSError:
            return ""

    def close(self) -> None:
        terminate_process(self.proc)
        shutil.rmtree(self.root, ignore_errors=True)
