"""One import style everywhere: relative inside a package (``from ..rooms.room import Room``),
``tether.*`` across packages (``from tether.protocol.wire.lib0 import ...``), never the bare names
``collab``/``ai``/``protocol`` (installed, they live under ``tether``: a host app's own
``protocol`` module must not shadow ours)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("collab", "ai", "protocol", "bench")
HOST_OWN = "the host's own"  # a test host importing its own modules of those names


def _python_files(*roots: str) -> list[Path]:
    files: list[Path] = []
    for root in roots:
        files += [p for p in (REPO / root).rglob("*.py") if "node_modules" not in p.parts]
    return files


def _imports(path: Path) -> list[tuple[int, int, str]]:
    """(line, level, module) of every ``from ... import`` and ``import ...``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[tuple[int, int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            found.append((node.lineno, node.level, node.module or ""))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, 0, alias.name) for alias in node.names]
    return found


def _top(module: str) -> str:
    return module.split(".")[0]


@pytest.mark.parametrize("package", PACKAGES)
def test_a_package_imports_itself_relatively_and_never_climbs_out(package: str):
    wrong = []
    for path in _python_files(package):
        depth = len(path.relative_to(REPO).parts) - 1  # collab/rooms/room.py: 2
        for line, level, module in _imports(path):
            where = f"{path.relative_to(REPO)}:{line}"
            if level == 0 and module.startswith(f"tether.{package}"):
                wrong.append(f"{where}: absolute import of its own package ({module})")
            if level > depth:
                wrong.append(f"{where}: a relative import climbs out of {package}/")
    assert wrong == []


def test_no_file_imports_the_bare_package_names():
    wrong = []
    for path in _python_files(*PACKAGES, "tether", "tests", "examples"):
        lines = path.read_text(encoding="utf-8").splitlines()
        for line, level, module in _imports(path):
            if level == 0 and _top(module) in PACKAGES and HOST_OWN not in lines[line - 1]:
                wrong.append(f"{path.relative_to(REPO)}:{line}: import {module}")
    assert wrong == []


def test_the_rule_catches_what_it_is_about(tmp_path: Path):
    sample = tmp_path / "sample.py"
    sample.write_text("from collab.rooms import room\nfrom ..x import y\nimport protocol.sync\n")
    assert [(level, module) for _, level, module in _imports(sample)] == [
        (0, "collab.rooms"),
        (2, "x"),
        (0, "protocol.sync"),
    ]
