"""``tether bench`` is driven by one table (``bench/commands.py``), the benchmarks live beside
the server and not in it, and a benchmark that draws without the bench extra says what to
install (issue 40, item 1)."""

from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys

import pytest

from tether.bench import commands
from tether.bench.commands import BENCHMARKS
from tether.bench.launcher import REPO
from tether.collab.cli import main

SERVER_PACKAGES = ("collab", "ai", "protocol")


def test_every_benchmark_in_the_table_has_its_flags_and_its_run():
    assert len({b.name for b in BENCHMARKS}) == len(BENCHMARKS)
    for benchmark in BENCHMARKS:
        module = importlib.import_module(f"tether.bench.{benchmark.module}")
        assert callable(module.add_arguments) and callable(module.run), benchmark.name


def test_bench_help_lists_every_benchmark_of_the_table(capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    listed = capsys.readouterr().out
    for benchmark in BENCHMARKS:
        assert f"    {benchmark.name} " in listed


def test_only_the_benchmark_named_is_imported_for_its_flags():
    code = (
        "import sys\n"
        "from tether.collab.cli import main\n"
        "try:\n"
        "    main(['bench', 'startup', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('tether.bench.')))\n"
    )
    imported = set(ast.literal_eval(_python(code).stdout.splitlines()[-1]))
    table = {f"tether.bench.{benchmark.module}" for benchmark in BENCHMARKS}
    assert imported & table == {"tether.bench.startup"}


def test_the_server_runs_without_importing_the_benchmarks():
    code = (
        "import sys\n"
        "from tether.collab.cli import main\n"
        "main(['token', '--jwt-secret', 's' * 32])\n"
        "import tether, tether.collab.server, tether.ai.engine, tether.client\n"
        "print(sorted(m for m in sys.modules if m.startswith('tether.bench')))\n"
    )
    assert _python(code).stdout.splitlines()[-1] == "[]"


def test_no_server_module_imports_the_benchmarks_but_the_cli_for_its_bench_commands():
    found = []
    for package in (*SERVER_PACKAGES, "tether"):
        for path in (REPO / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = []
                if isinstance(node, ast.ImportFrom) and node.level == 0:
                    names = [node.module or ""]
                elif isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                if any(name.split(".")[:2] == ["tether", "bench"] for name in names):
                    found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert [where.split(":")[0] for where in found] == ["collab/cli.py"]


def test_a_benchmark_that_draws_without_matplotlib_says_which_extra_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        commands.importlib.util,
        "find_spec",
        lambda name, *rest: None if name == "matplotlib" else real(name, *rest),
    )
    assert main(["bench", "storm", "--rounds", "1"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "tether bench storm draws its figure with matplotlib, which is not installed:"
        " pip install 'tether[bench]'"
    ]


def _python(code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done
