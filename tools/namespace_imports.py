"""Rewrites absolute imports of tether's packages to their installed names, in place:
``from protocol.x import y`` -> ``from tether.protocol.x import y`` (and collab, ai), and the
``python -m collab.cli`` / ``-m ai.model.worker`` module arguments of subprocesses. Idempotent:
re-run it after merging a branch that still writes the old imports.

    .venv/bin/python tools/namespace_imports.py            # rewrite, then ruff the files
    .venv/bin/python tools/namespace_imports.py --check    # exit 1 if anything would change

After rewriting it runs ruff on the changed Python files (import order, then format: longer
names can reorder import blocks and lengthen lines), so the result is ruff clean.

A line that says ``namespace_imports: keep`` is left alone (a test's host app importing its
own ``protocol``).

Why: installed, tether is ONE top-level package (``tether.collab``, ``tether.ai``,
``tether.protocol``; see pyproject.toml and tether/__init__.py), so a host app's own
``protocol`` or ``collab`` module cannot shadow ours or be shadowed by it. Relative imports
inside a package (``from .room import Room``) need no change and are left alone.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = "collab|ai|protocol"
# Where code lives; Markdown too, for the import lines of its examples.
ROOTS = ("collab", "ai", "protocol", "tests", "examples", "tether", "README.md")
SKIP = {"node_modules", "__pycache__", ".venv"}

# "from collab.rooms.manager import X" / "from ai import factory", at any indentation.
FROM_IMPORT = re.compile(
    rf"^(?P<indent>[ \t]*)from (?P<module>(?:{PACKAGES})(?:\.[\w.]+)?) import ", re.M
)
# "import protocol.lib0 as lib0" (a bare "import collab.x" would rebind the name: refused).
PLAIN_IMPORT = re.compile(
    rf"^(?P<indent>[ \t]*)import (?P<module>(?:{PACKAGES})(?:\.[\w.]+)?)(?P<rest>.*)$", re.M
)
# A subprocess's module argument: "-m", "collab.cli" (possibly across a line break).
MODULE_ARGUMENT = re.compile(
    rf"""(?P<flag>["']-m["'],\s*)(?P<quote>["'])(?P<module>(?:{PACKAGES})(?:\.[\w.]+)?)(?P=quote)"""
)


KEEP = "namespace_imports: keep"


def rewrite(text: str, where: Path) -> str:
    return "".join(line if KEEP in line else _rewrite(line, where) for line in _statements(text))


def _statements(text: str) -> list[str]:
    """Lines, except that a "-m", followed by its module on the next line stays one piece."""
    pieces: list[str] = []
    for line in text.splitlines(keepends=True):
        if pieces and pieces[-1].rstrip().endswith(('"-m",', "'-m',")):
            pieces[-1] += line
        else:
            pieces.append(line)
    return pieces


def _rewrite(text: str, where: Path) -> str:
    text = FROM_IMPORT.sub(lambda m: f"{m['indent']}from tether.{m['module']} import ", text)

    def plain(match: re.Match[str]) -> str:
        rest = match["rest"]
        if not rest.strip().startswith("as "):
            raise SystemExit(f"{where}: 'import {match['module']}' needs an 'as' to be rewritten")
        return f"{match['indent']}import tether.{match['module']}{rest}"

    text = PLAIN_IMPORT.sub(plain, text)
    return MODULE_ARGUMENT.sub(
        lambda m: f"{m['flag']}{m['quote']}tether.{m['module']}{m['quote']}", text
    )


def tidy(paths: list[str]) -> None:
    ruff = (
        [sys.executable, "-m", "ruff"] if _has_ruff_module() else [shutil.which("ruff") or "ruff"]
    )
    subprocess.run([*ruff, "check", "-q", "--select", "I", "--fix", *paths], cwd=REPO, check=True)
    subprocess.run([*ruff, "format", "-q", *paths], cwd=REPO, check=True)


def _has_ruff_module() -> bool:
    return importlib.util.find_spec("ruff") is not None


def files() -> list[Path]:
    found: list[Path] = []
    for root in ROOTS:
        path = REPO / root
        if path.is_file():
            found.append(path)
        elif path.is_dir():
            for candidate in sorted(path.rglob("*")):
                if SKIP.intersection(candidate.relative_to(REPO).parts):
                    continue
                if candidate.suffix in (".py", ".md") and candidate.is_file():
                    found.append(candidate)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if needed")
    args = parser.parse_args()
    changed: dict[Path, str] = {}
    for path in files():
        if path.is_symlink():
            continue
        before = path.read_text()
        after = rewrite(before, path)  # all or nothing: a refusal exits before any write
        if after != before:
            changed[path] = after
    for path, after in changed.items():
        if not args.check:
            path.write_text(after)
        print(("would rewrite " if args.check else "rewrote ") + str(path.relative_to(REPO)))
    python_files = [str(p) for p in changed if p.suffix == ".py"]
    if python_files and not args.check:
        tidy(python_files)
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
