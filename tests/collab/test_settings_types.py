"""Settings checks its field types at construction (issue 12: ``Settings(data_dir="x")``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.collab.config import Settings


def test_a_str_data_dir_becomes_a_path_and_an_int_passes_for_a_float():
    settings = Settings(data_dir="somewhere", unload_grace=2)
    assert settings.data_dir == Path("somewhere")
    assert isinstance(settings.unload_grace, float)


@pytest.mark.parametrize(
    ("field", "value"),
    [("port", "8765"), ("port", True), ("data_dir", 3), ("auth", None), ("unload_grace", "5")],
)
def test_a_wrong_type_fails_at_construction_naming_the_field(field: str, value: object):
    with pytest.raises(TypeError, match=f"Settings.{field}"):
        Settings(**{field: value})
