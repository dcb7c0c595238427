"""A real OpenAI-compatible server on 127.0.0.1: llama-cpp-python's own (``python -m
llama_cpp.server``, which needs fastapi, sse-starlette, starlette-context and pydantic-settings:
the dev extra has them) serving a GGUF file, one thread like the embedded model.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

from .launcher import free_port, log_tail, terminate_process, wait_http_ok

SERVER_MODULES = ("llama_cpp", "fastapi", "sse_starlette", "starlette_context", "pydantic_settings")


def missing_modules() -> list[str]:
    return [name for name in SERVER_MODULES if importlib.util.find_spec(name) is None]


class LlamaServer:
    """``with LlamaServer(model_path, log_dir) as server:`` then ``server.url`` (``.../v1``)."""

    def __init__(
        self,
        model: Path,
        log_dir: Path,
        *,
        alias: str = "local-gguf",
        prompt_cache_bytes: int = 0,
        chat_format: str | None = None,
    ) -> None:
        self.model = model
        self.alias = alias
        # > 0: keep evaluated prompts in RAM (llama-cpp-python's LlamaRAMCache), several at
        # once, as llama.cpp's own server (cache_prompt, slots) and vLLM (prefix caching) do;
        # 0: only the last prompt's state, which the next request reuses up to where it differs.
        self.prompt_cache_bytes = prompt_cache_bytes
        # The chat API's template when the GGUF file carries none (llama-cpp-python then falls
        # back to llama-2's): "gemma", "chatml"...
        self.chat_format = chat_format
        self.port = free_port()
        self.log_path = Path(log_dir) / f"llama-server-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> LlamaServer:
        command = [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(self.model),
            "--model_alias",
            self.alias,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--n_threads",
            "1",
            "--n_threads_batch",
            "1",  # its default is every core, which spins against the bench on 2 cores
            "--n_ctx",
            "2048",
        ]
        if self.chat_format:
            command += ["--chat_format", self.chat_format]
        if self.prompt_cache_bytes:
            command += ["--cache", "true", "--cache_size", str(self.prompt_cache_bytes)]
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        try:
            self._wait_ready(60.0)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """End the server (a test's way to take an upstream down)."""
        terminate_process(self.proc)

    def _wait_ready(self, timeout: float) -> None:
        assert self.proc is not None
        wait_http_ok(self.proc, f"{self.url}/models", timeout, "llama_cpp.server", self.log)

    def log(self) -> str:
        return log_tail(self.log_path, 4000)
