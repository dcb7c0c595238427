"""``tether serve``'s flags in titled groups, sizes in human units from every source, and
test-only values accepted but never listed (issue 25, item 6). In-process: the parser
``collab.cli`` builds its serve command with, and the settings readers it calls."""

from __future__ import annotations

import argparse
from dataclasses import fields
from pathlib import Path

import pytest

from tether.collab.config import (
    CHOICES,
    INFO,
    SIZES,
    Settings,
    SettingsError,
    read_env_file,
    settings_from_env,
)
from tether.collab.serve_flags import (
    GROUPS,
    ServeHelpFormatter,
    add_serve_flags,
    grouped,
    shown_default,
)


def serve_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tether serve", formatter_class=ServeHelpFormatter)
    add_serve_flags(parser)
    return parser


def parsed(*argv: str) -> Settings:
    return Settings().with_overrides(**vars(serve_parser().parse_args(argv)))


def test_every_setting_is_a_flag_in_exactly_one_group() -> None:
    listed = [meta.name for _, settings in grouped() for meta in settings]
    assert sorted(listed) == sorted(f.name for f in fields(Settings))
    assert 8 <= len(GROUPS) <= 11
    assert all(group.title and group.description for group in GROUPS)


def test_every_setting_that_counts_bytes_or_mib_is_a_size_and_shows_as_one() -> None:
    by_name = {f.name for f in fields(Settings) if f.name.endswith(("_bytes", "_mb"))}
    assert by_name <= set(SIZES)
    assert {name for name, meta in INFO.items() if meta.metavar == "SIZE"} == set(SIZES)
    for name in SIZES:
        assert shown_default(name)[-1] == "B"  # 16MiB, 512KiB, 128B


def test_human_sizes_and_plain_bytes_are_taken_from_flags() -> None:
    settings = parsed(
        *("--max-frame-bytes", "16 MiB", "--send-queue-bytes", "64kib"),
        *("--bus-queue-bytes", "1GiB", "--max-session-id-bytes", "512B"),
        *("--store-queue-bytes", "1048576"),
    )
    assert settings.max_frame_bytes == 16 * 2**20
    assert settings.send_queue_bytes == 64 * 2**10
    assert settings.bus_queue_bytes == 2**30
    assert settings.max_session_id_bytes == 512
    assert settings.store_queue_bytes == 2**20


def test_human_sizes_and_plain_bytes_are_taken_from_the_environment() -> None:
    settings = settings_from_env(
        {"TETHER_MAX_FRAME_BYTES": "16MiB", "TETHER_HTTP_REPLAY_BYTES": "4194304"}
    )
    assert settings.max_frame_bytes == 16 * 2**20
    assert settings.http_replay_bytes == 4 * 2**20
    assert isinstance(settings.max_frame_bytes, int)


def test_human_sizes_are_taken_from_an_env_file(tmp_path: Path) -> None:
    env_file = tmp_path / "tether.env"
    env_file.write_text(
        "TETHER_AWARENESS_PEER_BYTES='64 KiB'\nexport TETHER_BUS_QUEUE_BYTES=8MiB\n"
    )
    settings = settings_from_env(read_env_file(env_file))
    assert settings.awareness_peer_bytes == 64 * 2**10
    assert settings.bus_queue_bytes == 8 * 2**20


def test_the_mib_settings_read_a_plain_number_as_mib_and_a_unit_as_itself() -> None:
    settings = settings_from_env(
        {"TETHER_AI_CACHE_MB": "0.004", "TETHER_AI_STATE_BUDGET_MB": "512"}
    )
    assert (settings.ai_cache_mb, settings.ai_state_budget_mb) == (0.004, 512)
    settings = parsed("--ai-cache-mb", "512KiB", "--ai-state-budget-mb", "1GiB")
    assert (settings.ai_cache_mb, settings.ai_state_budget_mb) == (0.5, 1024)
    with pytest.raises(SettingsError, match="'100KiB' is not a whole number of MiB"):
        settings_from_env({"TETHER_AI_STATE_BUDGET_MB": "100KiB"})


def test_a_bad_size_in_the_environment_names_the_variable() -> None:
    with pytest.raises(SettingsError) as refused:
        settings_from_env({"TETHER_MAX_FRAME_BYTES": "12XB"})
    assert str(refused.value) == (
        "TETHER_MAX_FRAME_BYTES='12XB' is not a size (use e.g. 16MiB, 64KiB or bytes)"
    )
    with pytest.raises(SettingsError, match="TETHER_AI_CACHE_MB='1MB' is ambiguous"):
        settings_from_env({"TETHER_AI_CACHE_MB": "1MB"})


def test_what_other_settings_accept_is_unchanged() -> None:
    settings = settings_from_env({"TETHER_PORT": "9000", "TETHER_UNLOAD_GRACE": "2"})
    assert (settings.port, settings.unload_grace) == (9000, 2.0)
    with pytest.raises(SettingsError, match="TETHER_PORT='1KiB' is not a valid int"):
        settings_from_env({"TETHER_PORT": "1KiB"})
    assert parsed("--data-dir", "somewhere", "--idle-timeout", "60").data_dir == Path("somewhere")


def test_test_only_choices_are_accepted_but_not_listed() -> None:
    settings = parsed(
        "--auth", "none", "--ai-provider", "scripted", "--ai-script", '{"pieces": []}'
    )
    settings.validate()
    assert settings.ai_provider == "scripted" and settings.ai_script == '{"pieces": []}'
    assert "scripted" in CHOICES["ai_provider"]
    shown = serve_parser().format_help()
    test_only = {name: meta.test_only for name, meta in INFO.items() if meta.test_only}
    assert test_only == {"ai_provider": ("scripted",)}
    for name, hidden in test_only.items():
        assert all(value not in shown for value in hidden), name
    assert "--ai-script" not in shown
    assert "--ai-provider {local,openai,none}" in shown


def test_each_setting_is_declared_once_on_its_field() -> None:
    """Help, unit, bounds and choices are read off the field (issue 40): the AI ones from
    ai.settings, the cluster's from collab.cluster.settings, all in a group --help lists."""
    assert {group.title for group, settings in grouped() if settings} == {g.title for g in GROUPS}
    assert INFO["ai_cache_mb"].unit == "MiB" and INFO["max_frame_bytes"].unit == "B"
    assert INFO["bus"].group.title == "cluster" and INFO["ai_threads"].positive
    assert (INFO["port"].at_least, INFO["port"].at_most) == (0, 65535)
    assert INFO["idle_timeout"].variable == "TETHER_IDLE_TIMEOUT"


def test_a_misspelled_metadata_key_fails_when_read() -> None:
    from dataclasses import dataclass, field

    from tether.collab.setting_fields import info

    @dataclass
    class Mistyped:
        limit: int = field(
            default=1, metadata={"group": GROUPS[0], "metavar": "N", "help": "", "positve": True}
        )

    with pytest.raises(TypeError, match="positve"):
        info(fields(Mistyped)[0])


def test_the_provider_choices_and_their_help_come_from_the_registry() -> None:
    from tether.ai.model.providers import registry

    assert CHOICES["ai_provider"] == registry.NAMES == ("local", "openai", "scripted", "none")
    assert INFO["ai_provider"].help == registry.choices_help()
    assert registry.TEST_ONLY == ("scripted",)
    assert registry.build_provider(Settings(ai_provider="none")) is None
