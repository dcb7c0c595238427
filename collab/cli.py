"""The ``tether`` command: ``serve``, ``token``, ``cluster`` and ``bench``. Flags override
``TETHER_*`` variables, which override the defaults in ``collab.config``.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import socket
import sys
import tempfile
from pathlib import Path
from types import ModuleType

from .config import (
    INFO,
    InvalidSetting,
    SettingsError,
    read_env_file,
    settings_from_env,
    shown_value,
)
from .runtime.log_redaction import has_password
from .serve_flags import (
    SECRET_SETTINGS,
    SERVE_DESCRIPTION,
    SERVE_USAGE,
    ServeHelpFormatter,
    add_serve_flags,
)
from .version import VERSION

# URLs that may carry a password (user:password@): warned about only when they do.
_URL_SETTINGS = ("store", "bus")

_DESCRIPTION = (
    "tether, a collaborative-editing sync server (Yjs, Hocuspocus v4) with AI suggestions."
    " 'tether COMMAND --help' shows a command's options; every 'serve' flag is also a"
    " TETHER_* environment variable."
)
_CLUSTER_HELP = "local trial: N nodes on PostgreSQL and Redis behind a loopback balancer"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tether", description=_DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"tether {VERSION}")
    commands = parser.add_subparsers(
        dest="command", required=True, title="commands", metavar="COMMAND"
    )

    serve = commands.add_parser(
        "serve",
        help="run the sync server",
        description=SERVE_DESCRIPTION,
        usage=SERVE_USAGE,
        formatter_class=ServeHelpFormatter,
    )
    add_serve_flags(serve)

    token = commands.add_parser("token", help="mint a JWT for the configured secret")
    token.add_argument(
        "--jwt-secret",
        dest="jwt_secret",
        help="the server's secret; prefer TETHER_JWT_SECRET (a flag is visible in ps)",
    )
    token.add_argument(
        "--docs",
        default="*",
        help="comma-separated patterns: '*' and '?' stay within one '/' segment, '**' crosses"
        " them, a lone '*' is every document (the default)",
    )
    token.add_argument(
        "--scope",
        default="read-write",
        choices=["read-write", "readonly"],
        help="written into the token (the server reads a token without one as readonly)",
    )
    token.add_argument("--ttl", type=float, default=3600.0, help="seconds until it expires")
    token.add_argument("--sub", default="user")
    token.add_argument("--name", default=None)

    cluster = commands.add_parser("cluster", help=_CLUSTER_HELP)
    bench = commands.add_parser("bench", help="benchmarks (not tests)")
    words = sys.argv[1:] if argv is None else argv
    # The benchmarks live beside the server (tether.bench, with their own table of commands):
    # imported only when the command line names one of their two commands, never by the server.
    bench_commands = _bench_commands() if {"bench", "cluster"} & set(words) else None
    if bench_commands is not None:
        bench_commands.add_commands(cluster, bench, words)

    args = parser.parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    if args.command == "token":
        return _token(args)
    assert bench_commands is not None  # bench or cluster: on the command line
    return int(bench_commands.run(args))


def _bench_commands() -> ModuleType:
    import tether.bench.commands

    return tether.bench.commands


def _serve(args: argparse.Namespace) -> int:
    file_values: dict[str, str] = {}
    try:
        if args.env_file is not None:
            file_values = read_env_file(args.env_file)
        settings = settings_from_env({**file_values, **os.environ}).with_overrides(**vars(args))
        settings.validate()
        _check_data_dir(Path(settings.data_dir))
        _check_listen(settings.host, settings.port)
    except InvalidSetting as exc:
        print(f"tether: {_where(exc, args, file_values)}", file=sys.stderr)
        return 2
    except (SettingsError, ValueError, TypeError) as exc:
        print(f"tether: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # faiss logs a ModuleNotFoundError at INFO every start when the CPU has no AVX2 build to
    # load; it then loads the generic one. Not news for an operator.
    logging.getLogger("faiss.loader").setLevel(logging.WARNING)
    for secret in SECRET_SETTINGS:
        if getattr(args, secret, None):
            flag = "--" + secret.replace("_", "-")
            logging.getLogger("tether").warning(
                "%s was given on the command line, where every user of this machine can read it"
                " (ps, /proc); set %s in the environment instead",
                flag,
                INFO[secret].variable,
            )
    for url_setting in _URL_SETTINGS:
        if has_password(getattr(args, url_setting, None) or ""):
            logging.getLogger("tether").warning(
                "--%s carries a password on the command line, where every user of this machine"
                " can read it (ps, /proc); set %s in the environment instead",
                url_setting,
                INFO[url_setting].variable,
            )
    import uvicorn

    from .server import create_app
    from .transport.http_guard import HeaderLimits, guarded_http_protocol
    from .transport.raw_frames import RawFramesProtocol

    _raise_file_limit()
    header_limits = HeaderLimits(
        settings.header_timeout,
        settings.max_connections_per_address,
        settings.max_pending_connections,
    )
    http_protocol = guarded_http_protocol(header_limits)

    config = uvicorn.Config(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        proxy_headers=True,
        forwarded_allow_ips=settings.forwarded_allow_ips or None,
        log_level=settings.log_level,
        lifespan="on",
        # uvicorn's loggers propagate to ours: one format for every line (its own dictConfig
        # would give its lines another); log_level still sets their levels.
        log_config=None,
        # Frames above our limit get our own clear close; far above it, uvicorn's 1009.
        ws_max_size=settings.max_frame_bytes * 2,
        ws_ping_interval=settings.ping_interval,
        # Past our own app-level idle close, so that one (4000, clear reason) wins.
        ws_ping_timeout=settings.idle_timeout,
        timeout_graceful_shutdown=5,
        # Yjs updates are small and already compact; deflating each copy per recipient costs
        # CPU on the fan-out path for nothing.
        ws_per_message_deflate=False,
        # uvicorn's sans-I/O WebSocket protocol, holding less per idle socket
        # (collab.transport.ws_protocol), plus pre-framed fan-out writes
        # (collab.transport.raw_frames): one write per peer per loop turn, no per-frame ASGI
        # message.
        ws=RawFramesProtocol,
        http=http_protocol or "auto",
    )
    # After uvicorn.Config, which configures uvicorn's loggers and handlers: tokens in request
    # paths (the access log, WebSocket upgrade lines) never reach the log.
    from .runtime.log_redaction import install as redact_tokens_in_logs

    redact_tokens_in_logs()
    from .runtime.uvicorn_server import AnnouncingServer

    server = AnnouncingServer(
        config, Path(settings.data_dir).resolve(), gc_freeze=settings.gc_policy == "freeze"
    )
    server.run()
    return 0 if server.started else 1


def _where(exc: InvalidSetting, args: argparse.Namespace, file_values: dict[str, str]) -> str:
    """The refused setting as the operator gave it: ``--idle-timeout -5: must be > 0``, or
    ``TETHER_IDLE_TIMEOUT=-5`` from the environment (or the --env-file), others as flags."""
    flag = "--" + exc.name.replace("_", "-")
    variable = INFO[exc.name].variable
    hidden = exc.value is None or exc.name in SECRET_SETTINGS
    if getattr(args, exc.name, None) is not None or variable not in {**file_values, **os.environ}:
        subject = flag if hidden else f"{flag} {shown_value(exc.value)}"
    else:
        raw = os.environ.get(variable, file_values.get(variable, ""))
        subject = variable if hidden else f"{variable}={raw}"
        if variable not in os.environ:
            subject += f" (in {args.env_file})"
    return exc.describe(subject, lambda name: "--" + name.replace("_", "-"))


def _raise_file_limit() -> None:
    """Every socket is a file descriptor, and a soft limit of 1024 (many systems' default)
    caps the editors one server can hold far below what it serves: raise it to the hard one."""
    try:
        import resource
    except ImportError:  # not on this platform
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    except (ValueError, OSError):
        logging.getLogger("tether").warning("could not raise the open-file limit from %d", soft)


def _check_data_dir(data_dir: Path) -> None:
    """The data directory exists (or can be made) and takes files: checked before anything
    starts, so a bad --data-dir is one line and exit status 2, not a traceback."""
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=data_dir, prefix=".tether-check-"):
            pass
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise InvalidSetting(
            "data_dir", data_dir, f"is not a writable directory: {reason}"
        ) from exc


def _check_listen(host: str, port: int) -> None:
    """The address can be listened on: a port in use (or a host that is not this machine's)
    is one line and exit status 2 before anything starts, not a line after the whole start-up
    (store, model). uvicorn binds it again a moment later, as it would have."""
    if port == 0:
        return  # the kernel picks a free one
    try:
        addresses = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise InvalidSetting("host", host, f"does not resolve: {exc.strerror}") from None
    for family, kind, proto, _, address in addresses:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                probe.bind(address)
                probe.listen(1)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    where = (
                        f"{address[0]}:{port}"
                        if family == socket.AF_INET
                        else f"[{address[0]}]:{port}"
                    )
                    raise InvalidSetting(
                        "port", port, f"{where} is already in use (another server?)"
                    ) from None
                raise InvalidSetting(
                    "host", host, f"cannot listen there: {exc.strerror or exc}"
                ) from None


def _token(args: argparse.Namespace) -> int:
    from .auth.tokens import make_token

    secret = args.jwt_secret or settings_from_env().jwt_secret
    if not secret:
        print("tether: give --jwt-secret or set TETHER_JWT_SECRET", file=sys.stderr)
        return 2
    docs = [p for p in args.docs.split(",") if p]
    token = make_token(
        secret, docs, scope=args.scope, ttl=args.ttl, subject=args.sub, name=args.name
    )
    print(token)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
