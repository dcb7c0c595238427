"""Builds the configured provider and the engine; the app wiring's one call into ``ai``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .cache import CacheSettings, SuggestionCache
from .embedder import Embedder
from .engine import AiEngine, AiSettings
from .metrics import AiMetrics, CacheCollector
from .providers.base import Provider
from .scheduler import Scheduler


def build_provider(settings: Any) -> Provider | None:
    kind = settings.ai_provider
    if kind == "none":
        return None
    if kind == "local":
        from .providers.local import LocalProvider

        path = Path(settings.ai_model_path) if settings.ai_model_path else None
        return LocalProvider(
            path,
            threads=settings.ai_threads,
            state_budget_bytes=settings.ai_state_budget_mb * 2**20,
            requantize_into=Path(settings.data_dir) / "models"
            if settings.ai_quant == "q4_0"
            else None,
        )
    if kind == "openai":
        from .providers.openai import OpenAIProvider

        return OpenAIProvider(
            settings.openai_base_url,
            settings.openai_model,
            api_key=settings.openai_api_key,
            api=settings.openai_api,
            timeout=settings.ai_timeout,
        )
    if kind == "scripted":
        from .providers.scripted import ScriptedProvider

        script = json.loads(settings.ai_script or "{}")
        return ScriptedProvider(
            script.get("pieces"),
            delay=float(script.get("delay", 0.0)),
            fail_with=script.get("fail"),
        )
    raise ValueError(f"unknown ai provider {kind!r}")


def build_engine(
    settings: Any,
    provider: Provider,
    scheduler: Scheduler,
    registry: Any,
    embedder: Embedder | None = None,
) -> AiEngine:
    count_tokens = None
    tokenize = getattr(provider, "tokenize", None)
    if tokenize is not None:
        count_tokens = lambda text: len(tokenize(text))  # noqa: E731 - the real tokenizer
    cache = _cache(settings)
    engine = AiEngine(
        provider,
        scheduler,
        AiMetrics(registry),
        AiSettings(
            default_max_tokens=settings.ai_max_tokens,
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
