"""Builds the configured provider and the engine; the app wiring's one call into ``ai``."""

from __future__ import annotations

import asyncio
import contextlib
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
from .model.cpus import model_cpus, pin_this_process
from .model.providers.base import Provider
from .model.providers.registry import build_provider
from .model.providers.worker import WorkerEmbedder, WorkerProvider, build_supervisor
from .model.supervisor import Supervisor
from .settings import AiSettings, wants_embedder
from .status import AiState, StatusBoard
from .suggest.scheduler import Scheduler

log = logging.getLogger("tether")  # the server's own lines: AI on, and from which provider


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
        AiSettings.from_fields(settings),
        count_tokens=count_tokens,
        cache=cache,
        embedder=embedder if cache is not None else None,
    )
    registry.register(CacheCollector(engine))
    return engine


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
