"""The settings as ``tether serve`` flags: titled groups, one help line each, defaults shown
as people read them (16MiB, 10s), all read off the settings' fields (``collab.setting_fields``).
Knows argparse and ``collab.config``, nothing of the server.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from tether.ai.settings import MODEL, SUGGESTIONS

from .cluster.settings import CLUSTER
from .config import (
    AUTH,
    HTTP_FALLBACK,
    INFO,
    NETWORK,
    PRESENCE,
    RUNTIME,
    STORAGE,
    SYNC_LIMITS,
    WEBHOOKS,
    Settings,
    parse_setting,
)
from .setting_fields import Group, SettingInfo
from .sizes import UNITS, format_size

_DEFAULTS = Settings()
_SUFFIXES = {"SECONDS": "s", "MS": "ms"}

# The groups in the order --help lists them; within each, its settings in field order.
GROUPS: tuple[Group, ...] = (
    NETWORK,
    AUTH,
    STORAGE,
    SYNC_LIMITS,
    PRESENCE,
    HTTP_FALLBACK,
    Group(*SUGGESTIONS),
    Group(*MODEL),
    CLUSTER,
    WEBHOOKS,
    RUNTIME,
)

# Credentials: their defaults are not shown, and given as flags the server warns (collab.cli).
SECRET_SETTINGS = tuple(sorted(name for name, meta in INFO.items() if meta.secret))

# argparse's own usage would list every flag again: ~75 lines before the first group.
SERVE_USAGE = "%(prog)s [-h] [--env-file FILE] [options]"
SERVE_DESCRIPTION = (
    "Run the sync server. Every flag is also a TETHER_* environment variable and a line of"
    " an --env-file (--idle-timeout is TETHER_IDLE_TIMEOUT); flags win over the environment,"
    " which wins over the file."
    " Sizes take binary units (16MiB, 64KiB, 1GiB, 512B) or a plain number of bytes; SI"
    " units (16MB) are refused as ambiguous."
)


class ServeHelpFormatter(argparse.HelpFormatter):
    """Flags in one column and their help beside them (argparse's 24 characters put most of
    ours on a line of their own): a list to scan rather than a wall of text."""

    def __init__(self, prog: str, **kwargs: Any) -> None:
        super().__init__(prog, **{**kwargs, "max_help_position": 34})


def grouped() -> list[tuple[Group, list[SettingInfo]]]:
    """Each group (title, description) with its settings, in --help's order."""
    stray = {meta.name: meta.group.title for meta in INFO.values() if meta.group not in GROUPS}
    if stray:
        raise LookupError(f"settings in a group --help does not list: {stray}")
    return [(group, [meta for meta in INFO.values() if meta.group == group]) for group in GROUPS]


def add_serve_flags(parser: argparse.ArgumentParser) -> None:
    """--env-file, then every setting as a flag in its group."""
    parser.add_argument(
        "--env-file",
        dest="env_file",
        metavar="FILE",
        default=None,
        help="read TETHER_* settings from this KEY=VALUE file (the environment and flags win)",
    )
    for (title, description), settings in grouped():
        flags = parser.add_argument_group(title, description)
        for meta in settings:
            flags.add_argument(
                meta.flag,
                dest=meta.name,
                type=_parser_of(meta.name),
                metavar=_metavar(meta),
                help=_help(meta),
            )


def shown_default(name: str) -> str:
    """The default as --help shows it (in the metavar's unit), or "" where none is shown."""
    default, meta = getattr(_DEFAULTS, name), INFO[name]
    if meta.secret or default == "":
        return ""
    if meta.unit is not None:
        return format_size(int(default * UNITS[meta.unit]))
    if isinstance(default, float):  # 45s, 200ms, 0.5: never 45.0
        return f"{default:g}{_SUFFIXES.get(meta.metavar, '')}"
    return str(default)


def _help(meta: SettingInfo) -> str:
    if meta.hidden:
        return argparse.SUPPRESS
    default = shown_default(meta.name)
    return f"{meta.help} (default: {default})" if default else meta.help


def _metavar(meta: SettingInfo) -> str:
    if not meta.choices:
        return meta.metavar
    return "{" + ",".join(c for c in meta.choices if c not in meta.test_only) + "}"


def _parser_of(name: str) -> Callable[[str], object]:
    def parse(raw: str) -> object:
        try:
            return parse_setting(name, raw)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{raw!r} {exc}") from None

    return parse
