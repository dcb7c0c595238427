"""The embedded model and the embedder as the server sees them: adapters over the supervised
model worker process, so nothing native is loaded here.

``WorkerProvider`` is the ``local`` provider (same name, same metrics and cache scope as when
the model ran in-process), ``build`` makes it (one, or a pool of several) and
``build_supervisor`` the worker process it adapts; ``WorkerEmbedder`` keeps the memo of
vectors on the server's side and asks the worker only for texts it has not seen.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np

from ...cache.embedder import Embedder
from ...settings import wants_embedder
from ..cpus import model_cpus
from ..supervisor import Supervisor, SupervisorSettings
from .base import Cancellation, GenerationRequest, Provider
from .pool import UpstreamPool


def build(settings: Any) -> Provider:
    """The ``local`` provider: the model in supervised worker processes (nothing native loads
    here), one, or several as a pool spreading documents over them."""
    count = getattr(settings, "ai_workers", 1)
    if count == 1:
        return WorkerProvider(build_supervisor(settings, generate=True))
    workers = [
        # The first worker also serves the embedder; the others only generate.
        WorkerProvider(build_supervisor(settings, generate=True, semantic=i == 0), f"worker-{i}")
        for i in range(count)
    ]
    pool = UpstreamPool(workers, routing=settings.ai_routing)
    for worker in workers:  # ready or dead: the pool knows at once, not at its next check
        worker.supervisor.add_listener(pool.poke)
    return pool


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


class WorkerProvider(Provider):
    name = "local"

    def __init__(self, supervisor: Supervisor, label: str = "worker") -> None:
        self.supervisor = supervisor
        self.where = label  # for a pool of several workers (ai.model.providers.pool)

    async def __aenter__(self) -> WorkerProvider:
        await self.supervisor.__aenter__()  # returns at once: the worker loads behind
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.supervisor.__aexit__(*exc)

    def stream(self, request: GenerationRequest, cancel: Cancellation) -> AsyncIterator[str]:
        return self.supervisor.generate(request, cancel)

    def warm_hits(self) -> int:
        return self.supervisor.warm_hits

    async def healthy(self) -> bool:
        """Loaded and serving: a pool sends it requests again."""
        return self.supervisor.state == "ready"


class WorkerEmbedder(Embedder):
    def __init__(self, supervisor: Supervisor, *, memo_size: int = 4096) -> None:
        super().__init__(memo_size=memo_size)
        self._supervisor = supervisor

    def start_loading(self) -> asyncio.Future[None]:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)  # the worker loads the model and says so
        return done

    @property
    def ready(self) -> bool:
        return self._supervisor.embedder_ready

    async def _compute(self, texts: list[str]) -> np.ndarray:
        return await self._supervisor.embed(texts)

    async def __aexit__(self, *exc: Any) -> None:
        return None
