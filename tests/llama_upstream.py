"""A real llama.cpp OpenAI-compatible server for the tests (the class lives with the benches,
which start the same servers)."""

from tether.bench.llama_upstream import SERVER_MODULES, LlamaServer, missing_modules

__all__ = ["SERVER_MODULES", "LlamaServer", "missing_modules"]
