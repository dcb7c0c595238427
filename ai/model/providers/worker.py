"""The embedded model and the embedder as the server sees them: adapters over the supervised
model worker process, so nothing native is loaded here.

``WorkerProvider`` is the ``local`` provider (same name, same metrics and cache scope as when
the model ran in-process); ``WorkerEmbedder`` keeps the memo of vectors on the server's side
and asks the worker only for texts it has not seen.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import numpy as np

from ...cache.embedder import Embedder
from ..supervisor import Supervisor
from .base import Cancellation, GenerationRequest, Provider


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
