"""CPU lists for --ai-cpus, and the model worker put on them (its own process, its threads)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tether.ai.model.cpus import parse_cpu_list
from tether.collab.config import Settings


def test_cpu_lists_parse_and_bad_ones_say_why() -> None:
    assert parse_cpu_list("1") == {1}
    assert parse_cpu_list("0,2-3") == {0, 2, 3}
    for bad in ("", "a", "3-1", "1-", "-1", "0,,x"):
        with pytest.raises(ValueError):
            parse_cpu_list(bad)
    with pytest.raises(ValueError, match="CPU list"):
        Settings(auth="none", ai_cpus="two").validate()


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
