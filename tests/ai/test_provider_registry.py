"""Model providers by name (issue 40): the registry lists what --ai-provider accepts, and each
provider's own module builds it from the settings, loaded only when that provider is chosen."""

from __future__ import annotations

import subprocess
import sys

from tether.ai.model.providers import registry
from tether.ai.model.providers.pool import UpstreamPool
from tether.ai.model.providers.scripted import ScriptedProvider
from tether.ai.model.providers.worker import WorkerProvider
from tether.collab.config import Settings


def test_none_builds_no_provider_and_an_unknown_name_is_refused() -> None:
    assert registry.build_provider(Settings(ai_provider="none")) is None
    odd = type("Odd", (), {"ai_provider": "gpt"})()
    try:
        registry.build_provider(odd)
    except ValueError as exc:
        assert str(exc) == "unknown ai provider 'gpt'"
    else:
        raise AssertionError("an unknown provider was built")


def test_the_scripted_provider_is_built_from_its_script() -> None:
    provider = registry.build_provider(
        Settings(ai_provider="scripted", ai_script='{"pieces": ["a", "b"], "delay": 0.5}')
    )
    assert isinstance(provider, ScriptedProvider)
    assert (provider.pieces, provider.delay) == (["a", "b"], 0.5)


def test_openai_upstreams_are_one_pool_each_with_its_share() -> None:
    urls = "http://127.0.0.1:1/v1, http://127.0.0.1:2/v1"
    settings = Settings(
        ai_provider="openai", openai_base_url=urls, openai_model="m", openai_concurrency=3
    )
    pool = registry.build_provider(settings)
    assert isinstance(pool, UpstreamPool) and len(pool.upstreams) == 2
    one = registry.build_provider(Settings(ai_provider="openai", openai_base_url=urls[:21]))
    assert isinstance(one, UpstreamPool) and len(one.upstreams) == 1


def test_local_is_one_worker_or_a_pool_of_them() -> None:
    assert isinstance(registry.build_provider(Settings(ai_provider="local")), WorkerProvider)
    pool = registry.build_provider(Settings(ai_provider="local", ai_workers=2))
    assert isinstance(pool, UpstreamPool)
    members = [u.provider for u in pool.upstreams.values()]
    assert all(isinstance(m, WorkerProvider) for m in members) and len(members) == 2


def test_reading_the_settings_loads_no_provider() -> None:
    code = (
        'import sys, tether; tether.Settings(auth="none").validate();'
        " print(sorted(m for m in sys.modules if m.startswith('tether.ai.model.providers.')))"
    )
    shown = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert "registry" in shown and "worker" not in shown and "openai" not in shown
