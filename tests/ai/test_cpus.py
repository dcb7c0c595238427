"""CPU lists for --ai-cpus, and the model worker put on them (its own process, its threads)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tether.ai.factory import model_cpus
from tether.ai.model.cpus import auto_model_cpus, parse_cpu_list
from tether.collab.config import Settings


def test_cpu_lists_parse_and_bad_ones_say_why() -> None:
    assert parse_cpu_list("1") == {1}
    assert parse_cpu_list("0,2-3") == {0, 2, 3}
    for bad in ("", "a", "3-1", "1-", "-1", "0,,x"):
        with pytest.raises(ValueError):
            parse_cpu_list(bad)
    with pytest.raises(ValueError, match="CPU list"):
        Settings(auth="none", ai_cpus="two").validate()
    for fine in ("auto", "shared", "", "1"):
        Settings(auth="none", ai_cpus=fine).validate()


def test_auto_gives_the_model_the_last_cpus_only_where_sync_keeps_two_or_more() -> None:
    """``--ai-cpus auto``: a model decoding nonstop on the server's cores doubled
    its loop lag p99; on a core of its own it left it alone. Small hosts share, since a pinned
    model would hold half the machine or more while idle between suggestions."""
    assert auto_model_cpus(set(range(8)), 1) == {7}
    assert auto_model_cpus(set(range(8)), 3) == {5, 6, 7}  # 3 workers, or threads
    assert auto_model_cpus({0, 2, 4, 6}, 1) == {6}  # what this process may use, in a cpuset
    assert auto_model_cpus(set(range(4)), 2) == {2, 3}
    assert auto_model_cpus(set(range(4)), 3) == set()  # sync would keep one
    assert auto_model_cpus({0, 1}, 1) == set()  # this machine: shared
    assert auto_model_cpus({0, 1, 2}, 1) == set()


def test_which_cpus_the_model_gets_by_setting() -> None:
    here = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    assert model_cpus(Settings(auth="none", ai_provider="local")) == set()  # shared by default
    auto = Settings(auth="none", ai_provider="local", ai_cpus="auto")
    expected = auto_model_cpus(set(os.sched_getaffinity(0)), 1) if here > 1 else set()
    assert model_cpus(auto) == expected
    assert model_cpus(Settings(auth="none", ai_provider="local", ai_cpus="shared")) == set()
    assert model_cpus(Settings(auth="none", ai_provider="local", ai_cpus="0")) == {0}
    # An upstream's embedder worker is small work: never pinned by auto.
    assert model_cpus(Settings(auth="none", ai_provider="openai", ai_cpus="auto")) == set()


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="Linux only")
def test_a_process_pins_every_thread_it_has_and_the_ones_it_starts_later() -> None:
    cpu = min(os.sched_getaffinity(0))
    script = (
        "import os, threading\n"
        "from tether.ai.model.cpus import pin_this_process\n"
        "early = threading.Thread(target=threading.Event().wait, args=(5,), daemon=True)\n"
        "early.start()\n"
        f"assert pin_this_process({{{cpu}}})\n"
        "late = []\n"
        "t = threading.Thread(target=lambda: late.append(os.sched_getaffinity(0)))\n"
        "t.start(); t.join()\n"
        "print(sorted(os.sched_getaffinity(early.native_id)), sorted(late[0]))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.split() == [f"[{cpu}]", f"[{cpu}]"]
