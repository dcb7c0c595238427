"""Rust panics inside pycrdt, as Python sees them.

pyo3 turns a panic in yrs into ``pyo3_runtime.PanicException``, which derives from
``BaseException`` so that ``except Exception`` does not swallow it by accident. Code that hands
yrs bytes or IDs a peer chose must catch it on purpose (and nothing else that is a
``BaseException``: cancellation, exit) and treat it as that peer's bad input.
"""

from __future__ import annotations


def is_rust_panic(exc: BaseException) -> bool:
    return type(exc).__name__ == "PanicException"
