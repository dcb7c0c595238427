"""Builds the configured provider and the engine; the app wiring's one call into ``ai``."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .cache.embedder import Embedder
from .cache.suggestions import CacheSettings, SuggestionCache
from .engine import AiEngine
from .errors import ProviderUnavailable
from .metrics import AiMetrics, CacheCollector
from .model.cpus import AUTO, SHARED, auto_model_cpus, parse_cpu_list, pin_this_process
from .model.providers.base import Provider
from .model.providers.worker import WorkerEmbedder, WorkerProvider
from .model.supervisor import Supervisor, SupervisorSettings
from .settings import AiSettings
from .status import AiState, StatusBoard
from .suggest.scheduler import Scheduler

log = logging.getLogger("tether")  # the server's own lines: AI on, and from which provider


def build_provider(settings: Any) -> Provider | None:
    kind = settings.ai_provider
    if kind == "none":
        return None
    if kind == "local":
        # The model runs in supervised worker processes: nothing native loads here.
        count = getattr(settings, "ai_workers", 1)
        if count == 1:
            return WorkerProvider(build_supervisor(settings, generate=True))
        from .model.providers.pool import UpstreamPool

        workers = [
            # The first worker also serves the embedder; the others only generate.
            WorkerProvider(
                build_supervisor(settings, generate=True, semantic=i == 0), f"worker-{i}"
            )
            for i in range(count)
        ]
        pool = UpstreamPool(workers, routing=settings.ai_routing)
        for worker in workers:  # ready or dead: the pool knows at once, not at its next check
            worker.supervisor.add_listener(pool.poke)
        return pool
    if kind == "openai":
        from .model.providers.openai import OpenAIProvider
        from .model.providers.pool import UpstreamPool

        urls = [u.strip() for u in settings.openai_base_url.split(",") if u.strip()]
        upstreams = [
            OpenAIProvider(
                url,
                settings.openai_model,
                api_key=settings.openai_api_key,
                api=settings.openai_api,
                timeout=settings.ai_timeout,
                logprobs=settings.ai_stop == "sure",
                first_token_timeout=settings.openai_first_token_timeout,
                idle_timeout=settings.openai_idle_timeout,
            )
            for url in urls
        ]
        # One upstream is a pool of one too: its health is checked, it is down (AI degraded,
        # requests refused at once) while it does not answer, and back when it does.
        return UpstreamPool(
            upstreams,
            routing=settings.ai_routing,
            # One upstream: one generation at a time, as before there were several.
            concurrency=settings.openai_concurrency if len(upstreams) > 1 else 1,
            health_seconds=settings.openai_health_seconds,
        )
    if kind == "scripted":
        from .model.providers.scripted import ScriptedProvider

        script = json.loads(settings.ai_script or "{}")
        return ScriptedProvider(
            script.get("pieces"),
            delay=float(script.get("delay", 0.0)),
            fail_with=script.get("fail"),
            replies=script.get("replies"),
            confidences=script.get("confidences"),
        )
    raise ValueError(f"unknown ai provider {kind!r}")


def build_supervisor(settings: Any, *, generate: bool, semantic: bool = True) -> Supervisor:
    """The model worker for the local model and/or the embedder, as configured (``semantic``
    False: never the embedder, for the second and later of several workers)."""
    config = {
        "model_path": settings.ai_model_path,
        "quant": settings.ai_quant,
        "data_dir": str(Path(settings.data_dir).resolve()),
        "threads": settings.ai_threads,
        "state_budget_mb": settings.ai_state_budget_mb,
        "semantic": semantic and wants_embedder(settings),
        "generate": generate,
        "nice": settings.ai_worker_nice,
        "cpus": sorted(model_cpus(settings)) or None,
    }
    return Supervisor(
        SupervisorSettings(
            config,
            threads=settings.ai_threads,
            log_level=settings.log_level,
            stall_seconds=settings.ai_stall_timeout,
            crash_limit=settings.ai_crash_limit,
            crash_cooldown=settings.ai_crash_cooldown,
        )
    )


def build_embedder(settings: Any, provider: Provider) -> tuple[Embedder | None, Supervisor | None]:
    """The embedder, served by the local model's worker or, for an upstream provider, by a
    worker of its own; also the supervisor that second worker needs (None otherwise)."""
    if not wants_embedder(settings):
        return None, None
    workers = model_workers(provider)
    if workers:
        return WorkerEmbedder(workers[0].supervisor), None
    supervisor = build_supervisor(settings, generate=False)
    return WorkerEmbedder(supervisor), supervisor


def model_cpus(settings: Any) -> set[int]:
    """The CPUs the local model's workers run on (none: they share every CPU with sync).
    ``auto`` is decided once per process, before the server moves off the model's CPUs (which
    would change what it may use)."""
    chosen = settings.ai_cpus
    if chosen in ("", SHARED) or settings.ai_provider != "local":
        return set()
    if chosen != AUTO:
        return parse_cpu_list(chosen)
    return set(_auto_cpus(getattr(settings, "ai_workers", 1) * settings.ai_threads))


@functools.cache
def _auto_cpus(model_threads: int) -> frozenset[int]:
    usable = set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else set()
    return frozenset(auto_model_cpus(usable, model_threads))


def _keep_off(ai_cpus: set[int]) -> None:
    """The server's threads onto the CPUs the model workers do not use (when any are left)."""
    rest = set(os.sched_getaffinity(0)) - ai_cpus if hasattr(os, "sched_getaffinity") else set()
    if rest and pin_this_process(rest):
        log.info("sync on CPUs %s, the model on %s", sorted(rest), sorted(ai_cpus))
    elif not rest:
        log.warning("--ai-cpus %s leaves the server no CPU of its own: sharing", sorted(ai_cpus))


def model_workers(provider: Provider | None) -> list[WorkerProvider]:
    """The local model's workers: one, several in a pool, or none (an upstream provider)."""
    if isinstance(provider, WorkerProvider):
        return [provider]
    members = getattr(provider, "upstreams", {})
    found = [u.provider for u in members.values() if isinstance(u.provider, WorkerProvider)]
    return found if len(found) == len(members) else []


def build_status(provider: Provider, embed_worker: Supervisor | None) -> StatusBoard:
    """What /health and ``status`` subscribers see, kept current by the supervisors."""
    supervisors = [worker.supervisor for worker in model_workers(provider)]
    if supervisors:

        def read() -> AiState:
            # Ready while any worker serves (the pool routes around the others); else what
            # the first says.
            ready = [s for s in supervisors if s.state == "ready"]
            supervisor = ready[0] if ready else supervisors[0]
            model = supervisor.model
            health = supervisor.health()
            if len(supervisors) > 1:
                health = {**health, "workers": [s.health() for s in supervisors]}
            return AiState(
                supervisor.state,
                supervisor.reason,
                model.get("model"),
                model.get("quant"),
                health,
            )

    else:
        pool_state = getattr(provider, "state", None)  # model upstreams: up or down
        members = [u.provider for u in getattr(provider, "upstreams", {}).values()]
        model_name = getattr(members[0] if members else provider, "model", None)

        def read() -> AiState:
            semantic = embed_worker.health() if embed_worker is not None else {"state": "off"}
            state, reason = pool_state() if callable(pool_state) else ("ready", "")
            return AiState(
                state,
                reason,
                model_name if isinstance(model_name, str) else provider.name,
                None,
                {"provider": provider.name, "semantic": semantic.get("semantic", "off")},
            )

    board = StatusBoard(read)
    for supervisor_ in (*supervisors, embed_worker):
        if supervisor_ is not None:
            supervisor_.add_listener(board.changed)
    listen = getattr(provider, "add_listener", None)
    if callable(listen):  # several model servers: one going down or coming back
        listen(board.changed)
    return board


def model_token_counter(settings: Any) -> Callable[[str], int] | None:
    """Exact token counts for the embedded model (the worker's GGUF, read here without
    llama.cpp: ``ai.model.token_counter``); None keeps the estimate."""
    from .model.providers.local import default_model_path
    from .model.token_counter import gguf_token_counter

    try:
        path = Path(settings.ai_model_path) if settings.ai_model_path else default_model_path()
    except ProviderUnavailable:
        return None
    return gguf_token_counter(path)


def build_engine(
    settings: Any,
    provider: Provider,
    scheduler: Scheduler,
    registry: Any,
    embedder: Embedder | None = None,
    count_tokens: Callable[[str], int] | None = None,
) -> AiEngine:
    tokenize = getattr(provider, "tokenize", None)
    if count_tokens is None and tokenize is not None:
        count_tokens = lambda text: len(tokenize(text))  # noqa: E731 - the real tokenizer
    cache = _cache(settings)
    engine = AiEngine(
        provider,
        scheduler,
        AiMetrics(registry),
        AiSettings(
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
        ),
        count_tokens=count_tokens,
        cache=cache,
        embedder=embedder if cache is not None else None,
    )
    registry.register(CacheCollector(engine))
    return engine


def wants_embedder(settings: Any) -> bool:
    return settings.ai_semantic == "on" and settings.ai_cache_entries > 0


def _cache(settings: Any) -> SuggestionCache | None:
    if settings.ai_cache_entries <= 0:
        return None
    return SuggestionCache(
        CacheSettings(
            max_entries=settings.ai_cache_entries,
            max_bytes=int(settings.ai_cache_mb * 2**20),
            ttl_seconds=settings.ai_cache_ttl,
            threshold=settings.ai_semantic_threshold,
        )
    )


async def start_engine(
    settings: Any,
    stack: contextlib.AsyncExitStack,
    registry: Any,
    on_refusal: Callable[[str, object], None],
) -> AiEngine | None:
    """The AI engine on the configured provider, entered on ``stack``, or None when AI is off.
    Returns at once: the model worker loads behind, and sync serves meanwhile."""
    provider = build_provider(settings)
    ai_cpus = model_cpus(settings)
    if model_workers(provider) and ai_cpus:
        _keep_off(ai_cpus)
    if provider is None:
        log.info("AI suggestions are off (--ai-provider none)")
        return None
    await stack.enter_async_context(provider)
    scheduler = await stack.enter_async_context(
        Scheduler(
            settings.ai_queue_limit,
            per_owner=settings.ai_queue_per_connection,
            per_subject=settings.ai_queue_per_subject,
            on_refusal=on_refusal,
            # One generation in flight per model (or --openai-concurrency per upstream).
            workers=getattr(provider, "slots", 1),
        )
    )
    embedder, embed_worker = build_embedder(settings, provider)
    if embed_worker is not None:
        await stack.enter_async_context(embed_worker)
    counter = None
    if model_workers(provider):  # the embedded model: its tokenizer, off the event loop
        counter = await asyncio.to_thread(model_token_counter, settings)
    engine = build_engine(settings, provider, scheduler, registry, embedder, counter)
    engine.status = build_status(provider, embed_worker)
    for worker in model_workers(provider):
        worker.supervisor.add_listener(engine.rewarmer.watch(worker.supervisor))
    stack.callback(engine.close)
    log.info("AI suggestions from the %r provider", provider.name)
    return engine
