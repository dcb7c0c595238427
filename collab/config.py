"""Server settings: one frozen dataclass, filled from defaults, ``TETHER_*`` variables and flags.

Knows nothing of Starlette or sockets; the CLI turns flags into a ``Settings`` and the app
reads it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

from .sizes import UNITS, parse_size

ENV_PREFIX = "TETHER_"


@dataclass(frozen=True, slots=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = 8765
    data_dir: Path = field(default_factory=lambda: Path("./data"))
    # "jwt" verifies HS256 tokens with jwt_secret and RS256/ES256/EdDSA ones against the
    # identity provider's keys at jwt_jwks_url (either or both); "none" lets anyone edit
    # anything (local use). See collab.auth.tokens.
    auth: str = "jwt"
    jwt_secret: str = ""
    jwt_jwks_url: str = ""
    # Accepted audiences and issuers, comma-separated ("": not checked, and a token that names
    # an audience is refused); seconds of clock skew allowed on exp, nbf and iat.
    jwt_audience: str = ""
    jwt_issuer: str = ""
    jwt_leeway: float = 0.0
    # The claims holding the document patterns and the scope (a dotted name reaches into an
    # object: app_metadata.docs).
    jwt_docs_claim: str = "docs"
    jwt_scope_claim: str = "scope"
    # A JWKS fetch (which a token check waits for, at most) gives up after this; a token with
    # an unknown key id fetches the set again at most once per jwt_jwks_min_refresh.
    jwt_jwks_timeout: float = 5.0
    jwt_jwks_min_refresh: float = 30.0
    # Web origins besides this server's own and loopback that may open sockets and call the
    # API from a browser, comma-separated ("https://docs.example.com"); see
    # collab.connection.origins.
    allowed_origins: str = ""
    cors_origins: str = ""
    webhook_url: str = ""
    webhook_secret: str = ""
    webhook_events: str = "change,store,delete"
    webhook_debounce: float = 2.0
    # /metrics: with a token, only "Authorization: Bearer <token>" may read it (from anywhere);
    # without one, only loopback clients may (a scraper on the host, or behind a local proxy).
    metrics_token: str = ""
    log_level: str = "info"
    max_frame_bytes: int = 16 * 1024 * 1024
    # The largest message the server sends (1 MiB: the message cap of common proxies). A
    # document or update bigger than it goes out as several valid updates; only one value that
    # cannot be cut (a binary blob, one huge JSON value) goes alone, over it.
    max_outgoing_message_bytes: int = 1024 * 1024
    # Initial syncs bigger than this are sent in pieces of this size, each after the socket
    # has taken the one before (keepalives and other documents' traffic go between).
    initial_sync_piece_bytes: int = 256 * 1024
    # A sidebar of notes opens one provider per note on one socket: 256 covers the 200 the
    # issue asks for. Past it only the extra documents are refused (PermissionDenied), never
    # the socket. Per document a connection holds at most its presence (awareness_peer_bytes),
    # its channel name (max_session_id_bytes + 2 KiB) and a few hundred bytes of state.
    max_documents_per_connection: int = 256
    max_queued_before_auth: int = 256
    # Bytes a connection may have waiting for its tokens, and all connections together: a
    # provider sends Token first and we verify at once, so only a few small frames ever wait.
    max_queued_bytes_before_auth: int = 512 * 1024
    max_queued_bytes_before_auth_total: int = 64 * 1024 * 1024
    # Open sockets per client address (loopback included; behind a proxy, the proxy's address
    # unless it is trusted below). IPv6 addresses count per /64, what one host is usually given.
    # 0: no limit.
    max_connections_per_address: int = 64
    # Reverse proxies whose X-Forwarded-For / X-Forwarded-Proto tether trusts (uvicorn's
    # forwarded_allow_ips: comma-separated IPs or CIDRs, "*" for any): the client address that
    # limits, logs and hooks see is then the one the proxy names. "": uvicorn's default (its
    # FORWARDED_ALLOW_IPS variable, else 127.0.0.1,::1).
    forwarded_allow_ips: str = ""
    # A request's headers must arrive within this many seconds of its first byte, and the
    # connections still waiting to send their first request's headers are bounded: per client
    # by max_connections_per_address, in all by this (0: no bound). Slow-header clients
    # otherwise held every file descriptor (tether serve only: a host's server has its own).
    header_timeout: float = 10.0
    max_pending_connections: int = 1024
    # The part after NUL in a sessionAwareness channel ("doc\0<uuid>"); it prefixes every frame.
    max_session_id_bytes: int = 128
    auth_timeout: float = 10.0
    idle_timeout: float = 45.0
    ping_interval: float = 15.0
    send_queue_frames: int = 2048
    # The send queue's bound in bytes (one frame larger than it is still sent when alone).
    send_queue_bytes: int = 8 * 1024 * 1024
    # Every connection's queued frames and big answers in flight, together; and how long a
    # connection's queued frames may make no progress before it is closed (a peer that sends
    # but stopped reading is never idle). See collab.transport.send_budget.
    send_bytes_total: int = 128 * 1024 * 1024
    send_timeout: float = 60.0
    # The HTTP fallback (collab.transport.http_stream): sessions in all and per client address, the
    # bytes each may hold for resumption until its client acknowledges them (and all together),
    # how long one lives with no down request, the stream's heartbeat, a long poll's wait.
    http_sessions: int = 1024
    http_sessions_per_address: int = 64
    http_replay_bytes: int = 4 * 1024 * 1024
    http_replay_bytes_total: int = 256 * 1024 * 1024
    http_session_timeout: float = 30.0
    http_heartbeat: float = 10.0
    http_poll_timeout: float = 20.0
    # Presence (awareness): per connection and document, and per document in all.
    awareness_ids_per_peer: int = 8
    awareness_entry_bytes: int = 16 * 1024
    awareness_peer_bytes: int = 64 * 1024
    awareness_document_bytes: int = 4 * 1024 * 1024
    # An awareness client id stays bound to the token subject that showed it, this long after
    # its connection left: another subject cannot claim it meanwhile (see collab.rooms.presence).
    presence_claim_ttl: float = 3600.0
    presence_claims: int = 65536
    presence_claims_per_subject: int = 256
    unload_grace: float = 5.0
    # "freeze": what survives a full garbage collection is frozen, and complete walks come
    # only after enough churn (collab.runtime.gc_policy); "default": CPython's own.
    gc_policy: str = "freeze"
    compact_threshold: int = 500
    # ... and once the log weighs this share of the snapshot (collab.storage.compaction): folding a
    # big document costs the whole document, so it must come after writing that grows with it.
    compact_log_ratio: float = 1.0
    # Shared types nested deeper than this are refused before they are applied or stored (yrs
    # deletes nested types recursively; ~50,000 levels overflow its stack). Editors nest < 30.
    max_nesting_depth: int = 128
    # The Y.XmlFragment a rich document keeps its tree in (Tiptap's and y-prosemirror's field);
    # REST, webhooks, versions and direct reads read it, else the plain Y.Text "content".
    rich_fragment: str = "default"
    # The web editor keeps each open document in the browser (IndexedDB) and its page shell in
    # a service worker, so edits survive a reload and an outage; "off" for shared machines.
    web_local_copies: str = "on"
    # A Markdown body (PUT text/markdown) is parsed and written as a tree in a worker thread, in
    # time linear in its size (~30 µs a byte through the whole import) and memory up to ~1.7 KB
    # a byte at its peak (collab.rooms.import_budget).
    max_markdown_bytes: int = 512 * 1024
    # A Markdown import makes at most this many tree nodes (elements and runs of text; a
    # 50,000-paragraph document with a mark in each takes ~200,000): past it, 422 and nothing
    # applied. Its memory is charged to import_memory_budget before it starts, at its worst
    # case; imports that do not fit wait import_budget_wait, then are refused (503 with
    # Retry-After). One import alone always runs.
    max_import_nodes: int = 300_000
    import_memory_budget: int = 1024 * 1024 * 1024
    import_budget_wait: float = 2.0
    # An HTML body (PUT text/html) is read in a worker thread at about 1 µs a byte; a
    # ProseMirror JSON body (application/json) is bounded by max_frame_bytes, read at 3-10 MB/s.
    # Both are capped by max_import_nodes and charged to import_memory_budget, as Markdown is.
    max_html_bytes: int = 2 * 1024 * 1024
    # Requests to the REST API (/api/documents, /api/versions, /api/restore, /api/duplicate)
    # per client address (IPv6 per /64; behind a proxy, the address forwarded_allow_ips
    # trusts it to name): on average rest_rate_limit per rest_rate_window seconds, in bursts
    # of up to rest_rate_burst (0: rest_rate_limit), as Tiptap Cloud allows; past it, 429 with
    # Retry-After. 0: no limit.
    rest_rate_limit: int = 100
    rest_rate_window: float = 5.0
    rest_rate_burst: int = 200
    # Worker threads per concern, and the REST requests each may have waiting beyond them
    # (collab.runtime.pools): past that a request is refused (503 with Retry-After), so a flood
    # of one kind never delays another's reads, loads or opens. Socket-path work is never
    # refused. More threads than cores only share the GIL with the event loop.
    imports_threads: int = 1
    imports_queue: int = 4
    renders_threads: int = 1
    renders_queue: int = 16
    loads_threads: int = 2
    loads_queue: int = 32
    updates_threads: int = 2
    # Rendered documents (REST formats, versions, webhook texts) kept per document state, so
    # reading an unchanged document again costs no render (collab.rooms.renders).
    render_cache_bytes: int = 64 * 1024 * 1024
    # Keys one map may hold, and root types one document: yrs rehashes each table whole as it
    # doubles, a pause of the loop that grows with it (collab.updates.guard).
    max_map_keys: int = 1 << 18
    max_root_types: int = 1 << 16
    max_clients_per_document: int = 1 << 18
    # Named versions of one document (REST /api/versions): how many, and their bytes in all.
    max_versions_per_document: int = 50
    max_version_bytes_per_document: int = 64 * 1024 * 1024
    # ... and per token subject over every document, and in all: each version stores the
    # whole document, so a token for many documents could fill the disk (and stop every
    # editor's acks) a small request at a time.
    max_version_bytes_per_subject: int = 256 * 1024 * 1024
    max_version_bytes_total: int = 4 * 1024 * 1024 * 1024
    # AI suggestions: "local" (embedded SmolLM2 via llama.cpp), "openai" (any OpenAI-compatible
    # upstream), "none"; "scripted" is a fake for tests of the streaming mechanics only.
    ai_provider: str = "local"
    ai_model_path: str = ""
    # "q4_0": the shipped Q4_1 model requantised once (cached under the data dir): prompts
    # evaluate ~2.3x faster; "shipped": as it comes.
    ai_quant: str = "q4_0"
    # One thread: on 2 cores a model using both starves the sync path (fan-out p50 8.5 ms
    # against 5.1 ms with one thread, measured with tether bench sync --with-ai).
    ai_threads: int = 1
    # The local provider: this many model workers (each a process with its own copy of the
    # model, --ai-threads each), documents spread over them as over several upstreams.
    ai_workers: int = 1
    ai_state_budget_mb: int = 256
    ai_max_tokens: int = 24
    # Completions are one word, then more only while the model is sure of each (--ai-sure),
    # from a prompt that ends before the typed space: tether bench quality found one word
    # acceptable 4x as often as 24 tokens, and the sure rule at 0.9 never less than one word
    # (docs/ai.md).
    ai_stop: str = "sure"
    ai_heal: str = "on"
    # At a sentence or paragraph end the model may not stop before it has written a word
    # (issue 28: SmolLM2 answered nothing there 96% of the time).
    ai_start: str = "on"
    # --ai-stop sure: words after the first are kept while each token's probability is at
    # least this.
    ai_sure: float = 0.9
    # Completions are held back until known not to be junk (empty, an echo, a loop, another
    # script, chat talk: ai/text/junk.py); junk ends them with reason junk:<kind>, unshown.
    ai_junk_filter: str = "on"
    ai_cache_entries: int = 4096
    ai_cache_mb: float = 16.0
    ai_cache_ttl: float = 600.0
    # The semantic layer embeds contexts with MiniLM (loaded in the background at start).
    ai_semantic: str = "on"
    ai_semantic_threshold: float = 0.90
    ai_prefetch_ms: float = 200.0
    ai_prefetch_budget: float = 0.5
    ai_queue_limit: int = 8
    # Fair shares of the model: suggestions one connection, and one token subject across its
    # connections, may have queued or running at once (0: no quota). One editor needs one.
    ai_queue_per_connection: int = 2
    ai_queue_per_subject: int = 4
    ai_coalesce_ms: float = 50.0
    ai_timeout: float = 60.0
    # The model worker (a separate process holding llama.cpp and torch): a generation with no
    # token or prompt progress for this long counts as hung (the worker is killed and
    # restarted); this many deaths within a minute turn AI off (degraded), and it is tried
    # again after ai_crash_cooldown seconds (doubling while it keeps failing, up to 15 min).
    ai_stall_timeout: float = 10.0
    ai_crash_limit: int = 5
    ai_crash_cooldown: float = 60.0
    # Niceness added to the model worker: the scheduler gives contended CPU time to sync first
    # (0: equal). Measured on 2 vCPUs it does not change fan-out p99 under AI load: that
    # interference is shared caches and memory bandwidth, which no priority removes.
    ai_worker_nice: int = 10
    # CPUs for the model worker(s), e.g. "2-3": the server then keeps off them, so a model
    # decoding nonstop cannot take the cores sync runs on. "auto": the last ones, on a host of
    # 4+ CPUs that leaves sync 2+ (ai.model.cpus), for one tether process per host: several
    # (compose --scale) would all put their models on the same last CPUs. "" shares them all.
    ai_cpus: str = ""
    ai_script: str = ""
    # One upstream, or several separated by commas: requests then stick to an upstream per
    # document (ai.model.providers.pool), moving on when one is down.
    openai_base_url: str = ""
    ai_routing: str = "affinity"  # several model servers: how requests spread over them
    # Several upstreams: generations in flight per upstream (a llama.cpp server queues the
    # second behind the first; vLLM batches them).
    openai_concurrency: int = 2
    openai_model: str = ""
    openai_api_key: str = ""
    openai_api: str = "chat"
    # An upstream that has sent no token this long after a request is down: the request goes
    # on to the next upstream before anything was generated. After the first token, a gap
    # this long between tokens ends the suggestion (provider_timeout).
    openai_first_token_timeout: float = 5.0
    openai_idle_timeout: float = 5.0
    # Every upstream's model list is checked this often, busy or not: down or back.
    openai_health_seconds: float = 5.0
    # Scale-out (collab.cluster.node): "" keeps the embedded SQLite store in data_dir; a
    # postgresql://user@host/db DSN shares one PostgreSQL between nodes. bus: redis://host:port
    # relays committed updates and presence between nodes (needs a PostgreSQL store).
    store: str = ""
    bus: str = ""
    node_id: str = ""  # names this node on the bus and in /health; default host-pid
    # PostgreSQL unreachable: writes wait (unacked) this long, then fail; at most this many
    # bytes of writes wait, beyond it new ones fail at once.
    store_outage_timeout: float = 30.0
    # SQLite: the longest a commit waits after its first write for more writes to share its
    # sync. It waits only when writes come while another is in flight, fast enough to bring
    # one more write per wait (collab.storage.commit_window): many editors share syncs, and one
    # writer awaiting each ack is not slowed. 0: never waits. Acks wait up to this much longer.
    commit_window_ms: float = 4.0
    store_queue_bytes: int = 64 * 1024 * 1024
    # asyncpg's cache of server-side prepared statements per connection; 0 turns it off, which a
    # PgBouncer in transaction pooling needs (a DSN with ?pgbouncer=true turns it off too).
    store_statement_cache_size: int = 100
    # Updates and presence waiting to be published while Redis is slow; beyond it they are
    # dropped (counted) and reconciliation from PostgreSQL delivers the updates.
    bus_queue_bytes: int = 16 * 1024 * 1024
    bus_stream_length: int = 10_000  # entries kept per document stream (approximate trim)
    # Every loaded document's head is compared with PostgreSQL this often: what the bus lost
    # (Redis down, a node killed between COMMIT and XADD) is backfilled within it.
    bus_reconcile_interval: float = 1.0
    bus_presence_ttl: float = 30.0  # another node's editor's presence without news expires

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

    @property
    def openai_urls(self) -> list[str]:
        """The upstreams ``openai_base_url`` names (commas between several)."""
        return [url.strip() for url in self.openai_base_url.split(",") if url.strip()]

    def validate(self) -> None:
        """Raises InvalidSetting naming the first setting whose value is refused, and why."""
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            if isinstance(value, float) and not math.isfinite(value):
                raise InvalidSetting(f.name, value, "must be a finite number")
            if f.name in POSITIVE and value <= 0:
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
        ranges: tuple[tuple[str, float, float], ...] = (
            ("port", 0, 65535),
            ("ai_workers", 1, 64),
            ("openai_concurrency", 1, 64),
            ("ai_worker_nice", 0, 19),
            ("ai_crash_limit", 1, math.inf),
            ("compact_threshold", 1, math.inf),
            ("max_nesting_depth", 1, 10_000),
            ("imports_threads", 1, 64),
            ("renders_threads", 1, 64),
            ("loads_threads", 1, 64),
            ("updates_threads", 1, 64),
            ("commit_window_ms", 0, 100),
            ("jwt_leeway", 0, 3600),
            ("jwt_jwks_timeout", 0.001, 60),
            ("ai_prefetch_budget", 0, 1),
        )
        for name, low, high in ranges:
            value = getattr(self, name)
            if not low <= value <= high:
                upper = "" if math.isinf(high) else f" and {high:g}"
                words = f"must be at least {low:g}" if not upper else f"must be between {low:g}"
                raise InvalidSetting(name, value, words + upper)
        for name in ("ai_semantic_threshold", "ai_sure"):
            if not 0.0 < getattr(self, name) <= 1.0:
                raise InvalidSetting(name, getattr(self, name), "must be above 0 and at most 1")
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


# Numbers that must be above 0 (every other number must be at least 0): times a peer or a
# part is given, and bounds where 0 would refuse everything.
POSITIVE = frozenset(
    {
        "header_timeout",
        "auth_timeout",
        "idle_timeout",
        "ping_interval",
        "send_timeout",
        "http_session_timeout",
        "http_heartbeat",
        "http_poll_timeout",
        "presence_claim_ttl",
        "ai_timeout",
        "ai_stall_timeout",
        "ai_crash_cooldown",
        "ai_cache_ttl",
        "openai_first_token_timeout",
        "openai_idle_timeout",
        "openai_health_seconds",
        "bus_reconcile_interval",
        "bus_presence_ttl",
        "jwt_jwks_timeout",
        "max_frame_bytes",
        "max_outgoing_message_bytes",
        "max_documents_per_connection",
        "max_queued_before_auth",
        "max_queued_bytes_before_auth",
        "max_queued_bytes_before_auth_total",
        "send_queue_frames",
        "send_queue_bytes",
        "send_bytes_total",
        "awareness_ids_per_peer",
        "awareness_entry_bytes",
        "awareness_peer_bytes",
        "awareness_document_bytes",
        "presence_claims",
        "presence_claims_per_subject",
        "max_markdown_bytes",
        "max_html_bytes",
        "max_import_nodes",
        "import_memory_budget",
        "rest_rate_window",
        "max_map_keys",
        "max_root_types",
        "max_clients_per_document",
        "ai_max_tokens",
        "ai_threads",
        "store_queue_bytes",
        "bus_queue_bytes",
        "bus_stream_length",
    }
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


# The settings that take one of a few words; --help lists them and validate() enforces them.
CHOICES: dict[str, tuple[str, ...]] = {
    "auth": ("jwt", "none"),
    "log_level": ("debug", "info", "warning", "error", "critical"),
    "ai_provider": ("local", "openai", "scripted", "none"),
    "ai_quant": ("q4_0", "shipped"),
    "ai_semantic": ("on", "off"),
    "ai_stop": ("word", "phrase", "sentence", "sure", "tokens"),
    "ai_heal": ("on", "off"),
    "ai_start": ("on", "off"),
    "ai_junk_filter": ("on", "off"),
    "openai_api": ("chat", "completions"),
    "ai_routing": ("affinity", "round-robin"),
    "gc_policy": ("freeze", "default"),
    "web_local_copies": ("on", "off"),
}


# The settings that are amounts of memory, and the unit a plain number counts in: bytes, except
# the two named *_mb, which counted MiB before sizes took units and still do. Each also takes
# a binary unit (16MiB, 64KiB: collab.sizes); in Settings it stays a number in its unit.
SIZES: dict[str, str] = {
    "max_frame_bytes": "B",
    "max_markdown_bytes": "B",
    "max_html_bytes": "B",
    "import_memory_budget": "B",
    "render_cache_bytes": "B",
    "max_outgoing_message_bytes": "B",
    "initial_sync_piece_bytes": "B",
    "max_queued_bytes_before_auth": "B",
    "max_queued_bytes_before_auth_total": "B",
    "max_session_id_bytes": "B",
    "send_queue_bytes": "B",
    "send_bytes_total": "B",
    "http_replay_bytes": "B",
    "http_replay_bytes_total": "B",
    "awareness_entry_bytes": "B",
    "awareness_peer_bytes": "B",
    "awareness_document_bytes": "B",
    "max_version_bytes_per_document": "B",
    "max_version_bytes_per_subject": "B",
    "max_version_bytes_total": "B",
    "store_queue_bytes": "B",
    "bus_queue_bytes": "B",
    "ai_state_budget_mb": "MiB",
    "ai_cache_mb": "MiB",
}


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
    """Defaults overridden by every ``TETHER_<FIELD>`` variable that is set."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for f in fields(Settings):
        variable = ENV_PREFIX + f.name.upper()
        raw = env.get(variable)
        if raw is not None and raw != "":
            try:
                values[f.name] = parse_setting(f.name, raw)
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
