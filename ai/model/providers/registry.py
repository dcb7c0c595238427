"""The model providers by name: what --ai-provider accepts and says of each, and the module
that builds each. Imports no provider: a provider's module (and what it needs, numpy or an HTTP
client) is loaded only when it is chosen, so a server without AI never loads one.

Adding a provider: a module here with ``build(settings) -> Provider``, and its line below.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from .base import Provider


@dataclass(frozen=True, slots=True)
class ProviderEntry:
    name: str
    # What --ai-provider's help says of it; "": accepted, never listed (a test's fake).
    help: str
    # The module here whose build(settings) makes the provider; "": no provider (AI off).
    module: str = ""


PROVIDERS: tuple[ProviderEntry, ...] = (
    ProviderEntry("local", "the embedded model", "worker"),
    ProviderEntry("openai", "an OpenAI-compatible upstream (see AI model)", "openai"),
    # A fake for tests of the streaming mechanics only (--ai-script drives it).
    ProviderEntry("scripted", "", "scripted"),
    ProviderEntry("none", "no suggestions"),
)

NAMES = tuple(entry.name for entry in PROVIDERS)
TEST_ONLY = tuple(entry.name for entry in PROVIDERS if not entry.help)


def choices_help() -> str:
    """--ai-provider's help: each listed provider and what it is."""
    return "; ".join(f"'{entry.name}': {entry.help}" for entry in PROVIDERS if entry.help)


def build_provider(settings: Any) -> Provider | None:
    """The provider ``settings.ai_provider`` names, built from the settings (None: AI off)."""
    entry = next((e for e in PROVIDERS if e.name == settings.ai_provider), None)
    if entry is None:
        raise ValueError(f"unknown ai provider {settings.ai_provider!r}")
    if not entry.module:
        return None
    module = importlib.import_module(f"{__package__}.{entry.module}")
    provider: Provider = module.build(settings)
    return provider
