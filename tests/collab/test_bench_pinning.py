"""``--pin`` moves every thread of a server (and of its children) onto the server's CPU, and
the driving thread onto the others, for the run only."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys

import pytest

from tether.bench.pinning import pinned, split_cpus

pytestmark = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")

# A parent with a second thread and a child process: the tree a server with an AI worker is.
_TREE = """
import subprocess, sys, threading, time
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
print(child.pid, flush=True)
time.sleep(60)
"""


def test_the_server_tree_gets_its_cpu_and_the_driver_the_rest_until_the_end() -> None:
    server_cpus, driver_cpus = split_cpus()
    assert server_cpus and driver_cpus and not server_cpus & driver_cpus
    before = os.sched_getaffinity(0)
    parent = subprocess.Popen([sys.executable, "-c", _TREE], stdout=subprocess.PIPE, text=True)
    child_pid = 0
    try:
        assert parent.stdout is not None
        child_pid = int(parent.stdout.readline())
        with pinned(parent.pid, enabled=True):
            assert os.sched_getaffinity(0) == driver_cpus
            for pid in (parent.pid, child_pid):
                threads = os.listdir(f"/proc/{pid}/task")
                assert threads
                for tid in threads:
                    assert os.sched_getaffinity(int(tid)) == server_cpus
        assert os.sched_getaffinity(0) == before
        with pinned(parent.pid, enabled=False):
            assert os.sched_getaffinity(0) == before
    finally:
        parent.kill()
        parent.wait()
        if child_pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child_pid, signal.SIGKILL)
