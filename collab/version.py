"""The installed tether's version, for ``tether --version``, /health and ``tether_build_info``."""

from __future__ import annotations

from importlib import metadata


def _version() -> str:
    try:
        return metadata.version("tether")
    except metadata.PackageNotFoundError:  # a source checkout run without installing
        return "0+unknown"


VERSION = _version()
