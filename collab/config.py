"""Server settings: one frozen dataclass, filled from defaults, ``TETHER_*`` variables and flags.

Each setting is declared once, as a field with its help, unit and bounds
(``collab.setting_fields``): the server's own here, AI's in ``ai.settings``, the cluster's in
``collab.cluster.settings``; ``Settings`` inherits them all. Knows nothing of Starlette or
sockets; the CLI turns flags into a ``Settings`` and the app reads it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Any

from tether.ai.settings import AiFields

from .cluster.settings import ClusterFields
from .setting_fields import ENV_PREFIX, ONE_OF, Group, SettingInfo, info
from .sizes import UNITS, parse_size

# The server's own groups of flags in --help (the AI ones are ai.settings', the cluster's
# collab.cluster.settings'); collab.serve_flags orders them.
NETWORK = Group("network", "where the server listens, and how it keeps sockets alive")
AUTH = Group(
    "auth & origins", "who may open which document: tokens, the wait for them, browser origins"
)
STORAGE = Group(
    "storage", "where documents live, when their logs are folded, and their named versions"
)
SYNC_LIMITS = Group("sync limits", "what one connection may send, open and have waiting to be sent")
PRESENCE = Group(
    "presence", "editors' cursors and names (awareness): what each may show, who owns an id"
)
HTTP_FALLBACK = Group(
    "HTTP fallback", "for clients without WebSockets: POSTs up, event stream or long polls down"
)
WEBHOOKS = Group("webhooks", "signed HTTP notices when a document changes or is stored")
RUNTIME = Group(
    "logging & runtime", "what the server logs, who reads /metrics, the GC, threads off the loop"
)


@dataclass(frozen=True)
class _ServerFields:
    """The settings of the server's own parts, in the order --help lists them."""

    __slots__ = ()

    host: str = NETWORK.setting("127.0.0.1", "HOST", "interface to listen on")
    port: int = NETWORK.setting(8765, "PORT", "TCP port", at_least=0, at_most=65535)
    # Open sockets per client address (loopback included; behind a proxy, the proxy's address
    # unless it is trusted below). IPv6 addresses count per /64, what one host is usually given.
    # 0: no limit.
    max_connections_per_address: int = NETWORK.setting(
        64, "N", "open sockets per client address, loopback too; IPv6 per /64 (0: no limit)"
    )
    # A request's headers must arrive within this many seconds of its first byte, and the
    # connections still waiting to send their first request's headers are bounded: per client
    # by max_connections_per_address, in all by this (0: no bound). Slow-header clients
    # otherwise held every file descriptor (tether serve only: a host's server has its own).
    header_timeout: float = NETWORK.setting(
        10.0,
        "SECONDS",
        "a request's headers must be complete this long after its first byte",
        positive=True,
    )
    max_pending_connections: int = NETWORK.setting(
        1024, "N", "connections that have not sent their headers yet, in all (0: no limit)"
    )
    # Requests to the REST API (/api/documents, /api/versions, /api/restore, /api/duplicate)
    # per client address (IPv6 per /64; behind a proxy, the address forwarded_allow_ips
    # trusts it to name): on average rest_rate_limit per rest_rate_window seconds, in bursts
    # of up to rest_rate_burst (0: rest_rate_limit), as Tiptap Cloud allows; past it, 429 with
    # Retry-After. 0: no limit.
    rest_rate_limit: int = NETWORK.setting(
        100,
        "N",
        (
            "REST API requests per client address per --rest-rate-window, on average (0: no "
            "limit); past it, 429 with Retry-After"
        ),
    )
    rest_rate_window: float = NETWORK.setting(
        5.0, "SECONDS", "the window --rest-rate-limit counts in", positive=True
    )
    rest_rate_burst: int = NETWORK.setting(
        200,
        "N",
        (
            "REST API requests one address may make at once before the average holds (0: "
            "--rest-rate-limit)"
        ),
    )
    # Reverse proxies whose X-Forwarded-For / X-Forwarded-Proto tether trusts (uvicorn's
    # forwarded_allow_ips: comma-separated IPs or CIDRs, "*" for any): the client address that
    # limits, logs and hooks see is then the one the proxy names. "": uvicorn's default (its
    # FORWARDED_ALLOW_IPS variable, else 127.0.0.1,::1).
    forwarded_allow_ips: str = NETWORK.setting(
        "",
        "IPS",
        (
            "reverse proxies whose X-Forwarded-For/-Proto are trusted (IPs or CIDRs, "
            "comma-separated, * for any): limits and logs then see the real client (default: "
            "uvicorn's FORWARDED_ALLOW_IPS, else 127.0.0.1,::1)"
        ),
    )
    ping_interval: float = NETWORK.setting(
        15.0, "SECONDS", "time between app-level pings", positive=True
    )
    idle_timeout: float = NETWORK.setting(
        45.0,
        "SECONDS",
        "silence after which a peer is closed (more than --ping-interval)",
        positive=True,
    )

    # "jwt" verifies HS256 tokens with jwt_secret and RS256/ES256/EdDSA ones against the
    # identity provider's keys at jwt_jwks_url (either or both); "none" lets anyone edit
    # anything (local use). See collab.auth.tokens.
    auth: str = AUTH.setting(
        "jwt",
        ONE_OF,
        (
            "'jwt' verifies tokens (HS256 with --jwt-secret, RS256/ES256/EdDSA with "
            "--jwt-jwks-url); 'none' lets anyone edit (local use)"
        ),
        choices=("jwt", "none"),
    )
    jwt_secret: str = AUTH.setting(
        "",
        "SECRET",
        (
            "HS256 secret for --auth jwt (at least 32 characters); prefer TETHER_JWT_SECRET: "
            "a flag is visible to every user in ps"
        ),
        secret=True,
    )
    jwt_jwks_url: str = AUTH.setting(
        "",
        "URL",
        (
            "your identity provider's JWKS (e.g. https://TENANT/.well-known/jwks.json): "
            "RS256, ES256 and EdDSA tokens are checked against its keys"
        ),
    )
    # Accepted audiences and issuers, comma-separated ("": not checked, and a token that names
    # an audience is refused); seconds of clock skew allowed on exp, nbf and iat.
    jwt_audience: str = AUTH.setting(
        "",
        "AUD[,AUD...]",
        "accepted 'aud' values (default: none, and a token naming one is refused)",
    )
    jwt_issuer: str = AUTH.setting(
        "", "ISS[,ISS...]", "accepted 'iss' values (default: not checked)"
    )
    jwt_leeway: float = AUTH.setting(
        0.0, "SECONDS", "clock skew allowed on a token's exp, nbf and iat", at_least=0, at_most=3600
    )
    # The claims holding the document patterns and the scope (a dotted name reaches into an
    # object: app_metadata.docs).
    jwt_docs_claim: str = AUTH.setting(
        "docs", "CLAIM", "the claim holding the document patterns (a dotted name reaches inside)"
    )
    jwt_scope_claim: str = AUTH.setting(
        "scope",
        "CLAIM",
        "the claim holding 'read-write' or 'readonly' (a string of scopes or a list)",
    )
    # A JWKS fetch (which a token check waits for, at most) gives up after this; a token with
    # an unknown key id fetches the set again at most once per jwt_jwks_min_refresh.
    jwt_jwks_timeout: float = AUTH.setting(
        5.0,
        "SECONDS",
        "a JWKS fetch gives up after this (a token check waits at most this)",
        positive=True,
        at_least=0.001,
        at_most=60,
    )
    jwt_jwks_min_refresh: float = AUTH.setting(
        30.0, "SECONDS", "a token with an unknown key id fetches the JWKS at most once per this"
    )
    auth_timeout: float = AUTH.setting(
        10.0, "SECONDS", "wait for a document's token before the socket closes", positive=True
    )
    max_queued_before_auth: int = AUTH.setting(
        256, "N", "messages queued per document before its token", positive=True
    )
    # Bytes a connection may have waiting for its tokens, and all connections together: a
    # provider sends Token first and we verify at once, so only a few small frames ever wait.
    max_queued_bytes_before_auth: int = AUTH.setting(
        512 * 1024, "SIZE", "what one connection may queue before auth", positive=True
    )
    max_queued_bytes_before_auth_total: int = AUTH.setting(
        64 * 1024 * 1024, "SIZE", "what all may queue before auth", positive=True
    )
    # Web origins besides this server's own and loopback that may open sockets and call the
    # API from a browser, comma-separated ("https://docs.example.com"); see
    # collab.connection.origins.
    allowed_origins: str = AUTH.setting(
        "",
        "ORIGINS",
        (
            "comma-separated browser origins that may open sockets and call the API, besides "
            "the server's own and loopback"
        ),
    )
    cors_origins: str = AUTH.setting(
        "",
        "ORIGINS",
        (
            "comma-separated origins whose pages may call the REST API (/api) cross-site "
            "(CORS); their pages get no WebSocket access by this"
        ),
    )
    # The web editor keeps each open document in the browser (IndexedDB) and its page shell in
    # a service worker, so edits survive a reload and an outage; "off" for shared machines.
    web_local_copies: str = AUTH.setting(
        "on",
        ONE_OF,
        (
            "'on': the web editor keeps open documents in the browser, so edits survive a "
            "reload and an outage; 'off' keeps none and clears them (shared machines)"
        ),
        choices=("on", "off"),
    )

    # A field with a default_factory: each Settings gets its own Path.
    data_dir: Path = STORAGE.setting(  # noqa: RUF009
        Path("./data"), "DIR", "directory for the SQLite database"
    )
    # SQLite: the longest a commit waits after its first write for more writes to share its
    # sync. It waits only when writes come while another is in flight, fast enough to bring
    # one more write per wait (collab.storage.commit_window): many editors share syncs, and one
    # writer awaiting each ack is not slowed. 0: never waits. Acks wait up to this much longer.
    commit_window_ms: float = STORAGE.setting(
        4.0,
        "MS",
        (
            "SQLite: the longest a commit waits for more writes to share its sync, only when "
            "writes come while another is in flight (0: never; acks wait up to this longer)"
        ),
        at_least=0,
        at_most=100,
    )
    # The Y.XmlFragment a rich document keeps its tree in (Tiptap's and y-prosemirror's field);
    # REST, webhooks, versions and direct reads read it, else the plain Y.Text "content".
    rich_fragment: str = STORAGE.setting(
        "default",
        "NAME",
        (
            "the Y.XmlFragment a rich (Tiptap, ProseMirror) document keeps its tree in; REST,"
            " webhooks and versions read it as text, Markdown or HTML"
        ),
    )
    # Scale-out (collab.cluster.node): "" keeps the embedded SQLite store in data_dir; a
    # postgresql://user@host/db DSN shares one PostgreSQL between nodes (and a bus, between
    # them: collab.cluster.settings).
    store: str = STORAGE.setting(
        "",
        "DSN",
        (
            "'' (SQLite in --data-dir) or postgresql://user@host:port/db shared by all nodes;"
            " with a password in it, prefer TETHER_STORE (or PGPASSWORD)"
        ),
    )
    # PostgreSQL unreachable: writes wait (unacked) this long, then fail; at most this many
    # bytes of writes wait, beyond it new ones fail at once.
    store_outage_timeout: float = STORAGE.setting(
        30.0, "SECONDS", "writes wait (unacked) this long for PostgreSQL, then fail"
    )
    store_queue_bytes: int = STORAGE.setting(
        64 * 1024 * 1024,
        "SIZE",
        "writes that may wait for PostgreSQL; more fail at once",
        positive=True,
    )
    # asyncpg's cache of server-side prepared statements per connection; 0 turns it off, which a
    # PgBouncer in transaction pooling needs (a DSN with ?pgbouncer=true turns it off too).
    store_statement_cache_size: int = STORAGE.setting(
        100,
        "N",
        (
            "prepared statements cached per PostgreSQL connection; 0 for PgBouncer in "
            "transaction pooling (so does ?pgbouncer=true in --store)"
        ),
    )
    unload_grace: float = STORAGE.setting(
        5.0, "SECONDS", "a document stays loaded this long after its last editor leaves"
    )
    compact_threshold: int = STORAGE.setting(
        500, "N", "log entries after which a log is folded into a snapshot", at_least=1
    )
    # A log is folded once it holds compact_threshold entries and weighs this share of the
    # snapshot (collab.storage.compaction): folding a big document costs the whole document, so
    # it must come after writing that grows with it.
    compact_log_ratio: float = STORAGE.setting(
        1.0, "NUMBER", "...once the log also weighs this share of the snapshot (big documents)"
    )
    # Named versions of one document (REST /api/versions): how many, and their bytes in all.
    max_versions_per_document: int = STORAGE.setting(
        50, "N", "named versions one document may keep (REST /api/versions)"
    )
    max_version_bytes_per_document: int = STORAGE.setting(
        64 * 1024 * 1024, "SIZE", "all named versions of one document"
    )
    # ... and per token subject over every document, and in all: each version stores the
    # whole document, so a token for many documents could fill the disk (and stop every
    # editor's acks) a small request at a time.
    max_version_bytes_per_subject: int = STORAGE.setting(
        256 * 1024 * 1024, "SIZE", "all versions one token subject made"
    )
    max_version_bytes_total: int = STORAGE.setting(
        4 * 1024 * 1024 * 1024, "SIZE", "all named versions of every document"
    )

    max_frame_bytes: int = SYNC_LIMITS.setting(
        16 * 1024 * 1024,
        "SIZE",
        "largest message accepted from a client (WebSocket, REST or HTTP fallback)",
        positive=True,
    )
    # A Markdown body (PUT text/markdown) is parsed and written as a tree in a worker thread, in
    # time linear in its size (~30 µs a byte through the whole import) and memory up to ~1.7 KB
    # a byte at its peak (collab.rooms.import_budget).
    max_markdown_bytes: int = SYNC_LIMITS.setting(
        512 * 1024,
        "SIZE",
        "largest Markdown body a REST PUT imports into a rich document",
        positive=True,
    )
    # An HTML body (PUT text/html) is read in a worker thread at about 1 µs a byte; a
    # ProseMirror JSON body (application/json) is bounded by max_frame_bytes, read at 3-10 MB/s.
    # Both are capped by max_import_nodes and charged to import_memory_budget, as Markdown is.
    max_html_bytes: int = SYNC_LIMITS.setting(
        2 * 1024 * 1024,
        "SIZE",
        "largest HTML body a REST PUT imports into a rich document",
        positive=True,
    )
    # A Markdown import makes at most this many tree nodes (elements and runs of text; a
    # 50,000-paragraph document with a mark in each takes ~200,000): past it, 422 and nothing
    # applied. Its memory is charged to import_memory_budget before it starts, at its worst
    # case; imports that do not fit wait import_budget_wait, then are refused (503 with
    # Retry-After). One import alone always runs.
    max_import_nodes: int = SYNC_LIMITS.setting(
        300_000,
        "N",
        (
            "tree nodes (elements, runs of text) one Markdown, HTML or ProseMirror JSON "
            "import may make; more: 422"
        ),
        positive=True,
    )
    import_memory_budget: int = SYNC_LIMITS.setting(
        1024 * 1024 * 1024,
        "SIZE",
        (
            "memory the imports in flight (Markdown, HTML, JSON) may take together, each "
            "charged its worst case before it starts"
        ),
        positive=True,
    )
    import_budget_wait: float = SYNC_LIMITS.setting(
        2.0, "SECONDS", "an import that does not fit the budget waits this long, then gets 503"
    )
    # The largest message the server sends (1 MiB: the message cap of common proxies). A
    # document or update bigger than it goes out as several valid updates; only one value that
    # cannot be cut (a binary blob, one huge JSON value) goes alone, over it.
    max_outgoing_message_bytes: int = SYNC_LIMITS.setting(
        1024 * 1024,
        "SIZE",
        (
            "largest message the server sends: bigger documents and updates are split to fit "
            "(one indivisible value larger than it goes alone)"
        ),
        positive=True,
    )
    # Initial syncs bigger than this are sent in pieces of this size, each after the socket
    # has taken the one before (keepalives and other documents' traffic go between).
    initial_sync_piece_bytes: int = SYNC_LIMITS.setting(
        256 * 1024,
        "SIZE",
        (
            "a document larger than this reaches a new client in pieces of this size, paced "
            "by its socket"
        ),
    )
    # A sidebar of notes opens one provider per note on one socket: 256 covers the 200 the
    # issue asks for. Past it only the extra documents are refused (PermissionDenied), never
    # the socket. Per document a connection holds at most its presence (awareness_peer_bytes),
    # its channel name (max_session_id_bytes + 2 KiB) and a few hundred bytes of state.
    max_documents_per_connection: int = SYNC_LIMITS.setting(
        256, "N", "documents one /ws connection may open", positive=True
    )
    # Shared types nested deeper than this are refused before they are applied or stored (yrs
    # deletes nested types recursively; ~50,000 levels overflow its stack). Editors nest < 30.
    max_nesting_depth: int = SYNC_LIMITS.setting(
        128, "N", "shared types nested deeper are refused (stack safety)", at_least=1, at_most=10000
    )
    # Keys one map may hold, and root types one document: yrs rehashes each table whole as it
    # doubles, a pause of the loop that grows with it (collab.updates.guard).
    max_map_keys: int = SYNC_LIMITS.setting(
        1 << 18,
        "N",
        "keys one map may hold (yrs rehashes a table whole as it grows)",
        positive=True,
    )
    max_root_types: int = SYNC_LIMITS.setting(
        1 << 16, "N", "root types one document may hold", positive=True
    )
    max_clients_per_document: int = SYNC_LIMITS.setting(
        1 << 18, "N", "Yjs clients (writing sessions) one document may hold", positive=True
    )
    send_queue_frames: int = SYNC_LIMITS.setting(
        2048, "N", "frames queued per connection before it is a slow reader", positive=True
    )
    # The send queue's bound in bytes (one frame larger than it is still sent when alone).
    send_queue_bytes: int = SYNC_LIMITS.setting(
        8 * 1024 * 1024,
        "SIZE",
        "bytes queued per connection before it is a slow reader",
        positive=True,
    )
    # Every connection's queued frames and big answers in flight, together; and how long a
    # connection's queued frames may make no progress before it is closed (a peer that sends
    # but stopped reading is never idle). See collab.transport.send_budget.
    send_bytes_total: int = SYNC_LIMITS.setting(
        128 * 1024 * 1024,
        "SIZE",
        (
            "bytes queued and initial syncs in flight, all connections together; when full, "
            "peers stalled 10 s are closed and big syncs wait"
        ),
        positive=True,
    )
    send_timeout: float = SYNC_LIMITS.setting(
        60.0,
        "SECONDS",
        "a connection whose queued frames make no progress this long is closed",
        positive=True,
    )
    # The part after NUL in a sessionAwareness channel ("doc\0<uuid>"); it prefixes every frame.
    max_session_id_bytes: int = SYNC_LIMITS.setting(
        128, "SIZE", "longest session id in a 'document NUL sessionId' channel name"
    )

    # Presence (awareness): per connection and document, and per document in all.
    awareness_ids_per_peer: int = PRESENCE.setting(
        8, "N", "client ids one connection may show per document", positive=True
    )
    awareness_entry_bytes: int = PRESENCE.setting(
        16 * 1024, "SIZE", "largest presence state of one client id", positive=True
    )
    awareness_peer_bytes: int = PRESENCE.setting(
        64 * 1024, "SIZE", "presence one connection may show per document", positive=True
    )
    awareness_document_bytes: int = PRESENCE.setting(
        4 * 1024 * 1024, "SIZE", "presence of all editors of one document", positive=True
    )
    # An awareness client id stays bound to the token subject that showed it, this long after
    # its connection left: another subject cannot claim it meanwhile (see collab.rooms.room_presence).
    presence_claim_ttl: float = PRESENCE.setting(
        3600.0,
        "SECONDS",
        "a client id stays bound to its token subject after its connection left",
        positive=True,
    )
    presence_claims: int = PRESENCE.setting(
        65536, "N", "client id bindings remembered in all", positive=True
    )
    presence_claims_per_subject: int = PRESENCE.setting(
        256, "N", "client id bindings remembered per subject", positive=True
    )

    # The HTTP fallback (collab.transport.http_stream): sessions in all and per client address, the
    # bytes each may hold for resumption until its client acknowledges them (and all together),
    # how long one lives with no down request, the stream's heartbeat, a long poll's wait.
    http_sessions: int = HTTP_FALLBACK.setting(
        1024, "N", "sessions open at once, all clients together"
    )
    http_sessions_per_address: int = HTTP_FALLBACK.setting(
        64, "N", "sessions per client address (0: no limit)"
    )
    http_replay_bytes: int = HTTP_FALLBACK.setting(
        4 * 1024 * 1024, "SIZE", "what a session keeps for resumption until acked"
    )
    http_replay_bytes_total: int = HTTP_FALLBACK.setting(
        256 * 1024 * 1024, "SIZE", "what all sessions keep for resumption"
    )
    http_session_timeout: float = HTTP_FALLBACK.setting(
        30.0, "SECONDS", "a session lives this long with no down request", positive=True
    )
    http_heartbeat: float = HTTP_FALLBACK.setting(
        10.0, "SECONDS", "time between heartbeats on an idle event stream", positive=True
    )
    http_poll_timeout: float = HTTP_FALLBACK.setting(
        20.0, "SECONDS", "a long poll waits this long for something to send", positive=True
    )

    webhook_url: str = WEBHOOKS.setting("", "URL", "POST a signed JSON notice here")
    webhook_secret: str = WEBHOOKS.setting(
        "",
        "SECRET",
        "HMAC-SHA256 key for the Tether-Signature header; prefer TETHER_WEBHOOK_SECRET",
        secret=True,
    )
    webhook_events: str = WEBHOOKS.setting(
        "change,store,delete", "EVENTS", "which notices: change, store, delete (comma-separated)"
    )
    webhook_debounce: float = WEBHOOKS.setting(
        2.0, "SECONDS", "quiet before a document's notice is sent (at most 5x this)"
    )

    log_level: str = RUNTIME.setting(
        "info",
        ONE_OF,
        "least severe level logged",
        choices=("debug", "info", "warning", "error", "critical"),
    )
    # /metrics: with a token, only "Authorization: Bearer <token>" may read it (from anywhere);
    # without one, only loopback clients may (a scraper on the host, or behind a local proxy).
    metrics_token: str = RUNTIME.setting(
        "",
        "TOKEN",
        (
            "bearer token /metrics requires (default: none, loopback clients only); prefer "
            "TETHER_METRICS_TOKEN"
        ),
        secret=True,
    )
    # "freeze": what survives a full garbage collection is frozen, and complete walks come
    # only after enough churn (collab.runtime.gc_policy); "default": CPython's own.
    gc_policy: str = RUNTIME.setting(
        "freeze",
        ONE_OF,
        (
            "'freeze': full collections walk only what is new (shorter pauses); 'default': "
            "CPython's own"
        ),
        choices=("freeze", "default"),
    )
    # Worker threads per concern, and the REST requests each may have waiting beyond them
    # (collab.runtime.pools): past that a request is refused (503 with Retry-After), so a flood
    # of one kind never delays another's reads, loads or opens. Socket-path work is never
    # refused. More threads than cores only share the GIL with the event loop.
    imports_threads: int = RUNTIME.setting(
        1, "N", "threads for REST imports and restores (Markdown, updates)", at_least=1, at_most=64
    )
    imports_queue: int = RUNTIME.setting(4, "N", "REST imports that may wait beyond those threads")
    renders_threads: int = RUNTIME.setting(
        1, "N", "threads rendering documents (REST, versions, webhooks)", at_least=1, at_most=64
    )
    renders_queue: int = RUNTIME.setting(16, "N", "REST renders that may wait beyond those threads")
    loads_threads: int = RUNTIME.setting(
        2, "N", "threads building stored documents for their rooms", at_least=1, at_most=64
    )
    loads_queue: int = RUNTIME.setting(
        32, "N", "REST reads of unloaded documents that may wait to load"
    )
    updates_threads: int = RUNTIME.setting(
        2, "N", "threads reading peers' big updates and cutting syncs", at_least=1, at_most=64
    )
    # Rendered documents (REST formats, versions, webhook texts) kept per document state, so
    # reading an unchanged document again costs no render (collab.rooms.renders).
    render_cache_bytes: int = RUNTIME.setting(
        64 * 1024 * 1024,
        "SIZE",
        "rendered documents kept per state, so an unchanged one is not rendered again",
    )


@dataclass(frozen=True, slots=True)
class Settings(ClusterFields, AiFields, _ServerFields):
    """Every setting of ``tether serve``, one field each (the server's own, then AI's, then the
    cluster's); each field's metadata is what --help, the ``TETHER_*`` variables and
    ``validate`` read of it (``collab.setting_fields``)."""

    def __post_init__(self) -> None:
        """Types are checked here, at construction: ``data_dir`` may be any path-like (a str
        too), ints pass for floats, anything else of the wrong type is a TypeError now rather
        than an AttributeError at startup."""
        for f in fields(self):
            value = getattr(self, f.name)
            default = _DEFAULT_TYPES[f.name]
            if default is Path:
                if not isinstance(value, str | os.PathLike):
                    raise TypeError(f"Settings.{f.name} must be a path, not {value!r}")
                object.__setattr__(self, f.name, Path(value))
            elif default is float and isinstance(value, int) and not isinstance(value, bool):
                object.__setattr__(self, f.name, float(value))
            elif default is type(None):
                continue  # an optional field: its annotation, not its default, says more
            elif not isinstance(value, default) or (
                isinstance(value, bool) and default is not bool
            ):
                raise TypeError(
                    f"Settings.{f.name} must be {default.__name__}, not {type(value).__name__}"
                    f" ({value!r})"
                )

    def with_overrides(self, **values: Any) -> Settings:
        known = {f.name for f in fields(self)}
        clean = {k: v for k, v in values.items() if k in known and v is not None}
        return _replace(self, clean)

    def validate(self) -> None:
        """Raises InvalidSetting naming the first setting whose value is refused, and why."""
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            if isinstance(value, float) and not math.isfinite(value):
                raise InvalidSetting(f.name, value, "must be a finite number")
            if INFO[f.name].positive and value <= 0:
                raise InvalidSetting(f.name, value, "must be > 0")
            if value < 0:
                raise InvalidSetting(f.name, value, "must be >= 0")
        for name, allowed in CHOICES.items():
            value = getattr(self, name)
            if value not in allowed:
                raise InvalidSetting(name, value, f"must be one of {', '.join(allowed)}")
        self._validate_ranges()
        self._validate_auth()
        self._validate_ai()
        self._validate_storage()
        self._validate_transport()

    def _validate_ranges(self) -> None:
        for name, meta in INFO.items():
            reason = meta.out_of_bounds(getattr(self, name))
            if reason is not None:
                raise InvalidSetting(name, getattr(self, name), reason)
        if not 4096 <= self.initial_sync_piece_bytes <= self.max_outgoing_message_bytes:
            raise InvalidSetting(
                "initial_sync_piece_bytes",
                self.initial_sync_piece_bytes,
                "must be at least 4096 and at most {max_outgoing_message_bytes}",
                self,
            )
        if self.send_bytes_total < self.send_queue_bytes:
            raise InvalidSetting(
                "send_bytes_total", self.send_bytes_total, "must be >= {send_queue_bytes}", self
            )
        if self.idle_timeout <= self.ping_interval:
            raise InvalidSetting(
                "idle_timeout", self.idle_timeout, "must exceed {ping_interval}", self
            )

    def _validate_auth(self) -> None:
        if self.auth == "jwt" and not self.jwt_jwks_url and not self.jwt_secret:
            raise InvalidSetting(
                "jwt_secret",
                None,
                "auth 'jwt' needs a secret of at least 32 characters (TETHER_JWT_SECRET) or"
                " {jwt_jwks_url}; use --auth none for local use without tokens",
                self,
            )
        if self.auth == "jwt" and self.jwt_secret and len(self.jwt_secret) < 32:
            raise InvalidSetting("jwt_secret", None, "must be at least 32 characters", self)
        if self.jwt_jwks_url and not self.jwt_jwks_url.startswith(("http://", "https://")):
            raise InvalidSetting("jwt_jwks_url", self.jwt_jwks_url, "must be an http(s) URL")
        for name in ("jwt_docs_claim", "jwt_scope_claim"):
            if not getattr(self, name):
                raise InvalidSetting(name, "", "must name a claim")

    def _validate_ai(self) -> None:
        if self.ai_provider == "openai" and not (self.openai_base_url and self.openai_model):
            raise InvalidSetting(
                "ai_provider", "openai", "needs {openai_base_url} and {openai_model}", self
            )
        for url in self.openai_urls:
            if not url.startswith(("http://", "https://")):
                raise InvalidSetting("openai_base_url", url[:64], "each URL must be an http(s) URL")
        if self.ai_cpus not in ("", "auto", "shared"):
            from tether.ai.model.cpus import parse_cpu_list

            try:
                parse_cpu_list(self.ai_cpus)
            except ValueError as exc:
                raise InvalidSetting("ai_cpus", self.ai_cpus, str(exc)) from None

    def _validate_storage(self) -> None:
        if self.store and not self.store.startswith(("postgresql://", "postgres://")):
            raise InvalidSetting(
                "store", _url_shown(self.store), "must be empty (SQLite) or a postgresql:// DSN"
            )
        if self.bus and not self.bus.startswith(("redis://", "rediss://")):
            raise InvalidSetting("bus", _url_shown(self.bus), "must be a redis:// URL")
        if self.bus and not self.store:
            raise InvalidSetting("bus", _url_shown(self.bus), "needs a postgresql:// {store}", self)
        if not self.rich_fragment or len(self.rich_fragment) > 256:
            raise InvalidSetting(
                "rich_fragment", self.rich_fragment, "must be a name of 1 to 256 characters"
            )

    def _validate_transport(self) -> None:
        if self.webhook_url and not self.webhook_url.startswith(("http://", "https://")):
            raise InvalidSetting("webhook_url", self.webhook_url, "must be an http(s) URL")
        unknown = set(self.webhook_events.split(",")) - {"change", "store", "delete"}
        if self.webhook_url and unknown:
            raise InvalidSetting(
                "webhook_events", self.webhook_events, "takes change, store and delete"
            )


class InvalidSetting(ValueError):
    """A setting's value is refused: ``name`` (a ``Settings`` field), ``value`` (None: not to
    be shown, a secret) and ``reason``, which may name other settings as ``{field}``.
    ``str()`` names settings as fields (``idle_timeout=-5: must be > 0``); ``describe`` lets
    the CLI name them as flags."""

    def __init__(
        self, name: str, value: object, reason: str, settings: Settings | None = None
    ) -> None:
        self.name, self.value, self.reason = name, value, reason
        self.settings = settings
        subject = name if value is None else f"{name}={shown_value(value)}"
        super().__init__(self.describe(subject, lambda other: other))

    def describe(self, subject: str, label: Callable[[str], str]) -> str:
        """``subject: reason``, each other setting the reason names as ``label(name) (value)``."""
        others = _Named(label, self.settings)
        return f"{subject}: {self.reason.format_map(others)}"


class _Named(dict[str, str]):
    def __init__(self, label: Callable[[str], str], settings: Settings | None) -> None:
        super().__init__()
        self._label, self._settings = label, settings

    def __missing__(self, name: str) -> str:
        value = getattr(self._settings, name, None)
        shown = "" if value is None or value == "" else f" ({shown_value(value)})"
        return self._label(name) + shown


def shown_value(value: object) -> str:
    """A value as a message shows it: numbers as typed (-5, not -5.0), text quoted."""
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, str | Path):
        return repr(str(value))
    return str(value)


def _url_shown(url: str) -> str:
    """A URL without its password, for a message."""
    scheme, sep, rest = url.partition("://")
    credentials, at, host = rest.rpartition("@")
    if not at or ":" not in credentials:
        return url[:200]
    return f"{scheme}{sep}{credentials.split(':', 1)[0]}:***@{host}"[:200]


# Each setting's declaration, read off its field; and, from it, the settings that take one of a
# few words (--help lists them, validate() enforces them) and those that are amounts of memory,
# with the unit a plain number counts in.
INFO: dict[str, SettingInfo] = {f.name: info(f) for f in fields(Settings)}
CHOICES: dict[str, tuple[str, ...]] = {n: i.choices for n, i in INFO.items() if i.choices}
SIZES: dict[str, str] = {n: i.unit for n, i in INFO.items() if i.unit is not None}


class SettingsError(ValueError):
    """A setting's value cannot be read; ``str(exc)`` is one line naming where it came from."""


# Each field's type, read off its default (Path for data_dir).
_DEFAULT_TYPES: dict[str, type] = {
    f.name: type(f.default_factory() if f.default_factory is not MISSING else f.default)
    for f in fields(Settings)
}
_DEFAULT_TYPES["data_dir"] = Path
_DEFAULTS = Settings()


def settings_from_env(environ: dict[str, str] | None = None) -> Settings:
    """Defaults overridden by every setting's variable (``TETHER_<FIELD>``) that is set."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for name, meta in INFO.items():
        variable = meta.variable
        raw = env.get(variable)
        if raw is not None and raw != "":
            try:
                values[name] = parse_setting(name, raw)
            except ValueError as exc:
                raise SettingsError(f"{variable}={raw!r} {exc}") from None
    return _replace(_DEFAULTS, values)


def parse_setting(name: str, raw: str) -> object:
    """One setting's value from text, read the same from a flag, a ``TETHER_*`` variable and
    an env file. Raises ValueError whose message follows the quoted text ("is not a valid
    int"), so that ``f"{raw!r} {exc}"`` reads as one sentence."""
    default = getattr(_DEFAULTS, name)
    try:
        return _coerce(default, raw)  # a plain number keeps the meaning it always had
    except ValueError:
        if name not in SIZES:
            raise ValueError(f"is not a valid {_DEFAULT_TYPES[name].__name__}") from None
    unit = SIZES[name]
    size = parse_size(raw, plain="bytes" if unit == "B" else f"a number of {unit}")
    return _in_unit(size, unit, default)


def read_env_file(path: str | os.PathLike[str]) -> dict[str, str]:
    """``KEY=VALUE`` lines (``#`` comments, blank lines, optional ``export`` and quotes), as
    docker's and systemd's env files write them. Only ``TETHER_*`` keys are taken."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise SettingsError(f"--env-file {path}: {exc.strerror or exc}") from None
    values: dict[str, str] = {}
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export ") :].lstrip()
        key, sep, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise SettingsError(f"--env-file {path}, line {number}: expected KEY=VALUE")
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        if key.startswith(ENV_PREFIX):
            values[key] = value
    return values


def _coerce(default: object, raw: str) -> object:
    if isinstance(default, bool):
        return raw.lower() in ("1", "true", "yes", "on")
    if isinstance(default, int):
        return int(raw)
    if isinstance(default, float):
        return float(raw)
    if isinstance(default, Path):
        return Path(raw)
    return raw


def _in_unit(size: int, unit: str, default: object) -> int | float:
    if isinstance(default, float):
        return size / UNITS[unit]
    if size % UNITS[unit]:
        raise ValueError(f"is not a whole number of {unit}")
    return size // UNITS[unit]


def _replace(settings: Settings, values: dict[str, Any]) -> Settings:
    current = {f.name: getattr(settings, f.name) for f in fields(settings)}
    current.update(values)
    if not isinstance(current["data_dir"], Path):
        current["data_dir"] = Path(current["data_dir"])
    return Settings(**current)
