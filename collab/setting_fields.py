"""One setting declared once: a dataclass field whose metadata says what ``tether serve --help``,
the ``TETHER_*`` variables and validation need to know of it. Knows no argparse, no server.

A concern declares its settings as fields of a frozen dataclass (``Group.setting``), which
``collab.config.Settings`` inherits; ``ai`` writes the same metadata as plain mappings (it
imports no collab module), so ``SettingInfo``'s fields are the keys both use, and a key
misspelled anywhere fails at import.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import Field, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

ENV_PREFIX = "TETHER_"
# The metavar of a setting that takes one of a few words: --help lists its choices instead.
ONE_OF = "{...}"


class Group(NamedTuple):
    """A titled group of flags in --help, with its one-line description."""

    title: str
    description: str

    def setting(self, default: Any, metavar: str, help: str, **more: Any) -> Any:
        """A field of this group: its default, the metavar --help shows (also the unit its
        default shows in: SIZE 16MiB, SECONDS 10s, MS 200ms), its help line, and any of
        ``SettingInfo``'s other keys."""
        return setting_field(default, {"group": self, "metavar": metavar, "help": help, **more})


def setting_field(default: Any, metadata: Mapping[str, Any]) -> Any:
    """A dataclass field carrying ``metadata`` (a path default is made per instance)."""
    if isinstance(default, Path):
        return field(default_factory=lambda: Path(default), metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass(frozen=True, slots=True)
class SettingInfo:
    """What a setting's field says of it besides its default."""

    name: str
    group: Group
    metavar: str
    help: str
    # A setting that takes one of a few words; test_only ones are accepted, never listed.
    choices: tuple[str, ...] = ()
    test_only: tuple[str, ...] = ()
    # An amount of memory: the unit a plain number counts in ("B", or "MiB" for the two *_mb
    # settings, which counted MiB before sizes took units). Each also takes a binary unit
    # (16MiB, 64KiB: collab.sizes); in Settings it stays a number in its unit.
    unit: str | None = None
    # A credential: its default is never shown, and given as a flag the server warns.
    secret: bool = False
    hidden: bool = False  # accepted, never in --help (a test's knob)
    # Every number must be at least 0; a positive one above 0 (times a peer or a part is given,
    # bounds where 0 would refuse everything). Bounds beyond that, inclusive unless ``above``.
    positive: bool = False
    at_least: float | None = None
    at_most: float | None = None
    above: float | None = None
    env: str | None = None  # the variable, when not TETHER_<NAME>

    @property
    def variable(self) -> str:
        return self.env or ENV_PREFIX + self.name.upper()

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def out_of_bounds(self, value: float) -> str | None:
        """Why ``value`` is outside this setting's bounds (None: inside, or none declared)."""
        if self.above is not None:
            if not self.above < value <= _or_inf(self.at_most):
                return f"must be above {self.above:g} and at most {self.at_most:g}"
            return None
        if self.at_least is None:
            return None
        if not self.at_least <= value <= _or_inf(self.at_most):
            if self.at_most is None:
                return f"must be at least {self.at_least:g}"
            return f"must be between {self.at_least:g} and {self.at_most:g}"
        return None


def info(f: Field[Any]) -> SettingInfo:
    """A settings field's metadata as a ``SettingInfo`` (TypeError for an unknown key); a SIZE
    counts bytes unless it names another unit."""
    meta = dict(f.metadata)
    if "group" in meta:
        meta["group"] = Group(*meta["group"])  # ai writes a plain (title, description)
    if meta.get("metavar") == "SIZE":
        meta.setdefault("unit", "B")
    return SettingInfo(name=f.name, **meta)


def _or_inf(bound: float | None) -> float:
    return float("inf") if bound is None else bound
