"""Benchmarks (placeholder until the sync bench lands)."""

from __future__ import annotations

import argparse


def add_sync_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def run_sync_bench(args: argparse.Namespace) -> int:
    return 1
