"""The SuperLink supervisor: stopping it stops every descendant, detached ones included."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from thinwire.runtimes.flower.superlink import descendants

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc")

SPAWNER = """\
import subprocess, sys, time
# A daemon that detaches its own child (as flower-superlink starts its SuperExec).
grandchild = subprocess.Popen(
    [sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True
)
open(sys.argv[1], "w").write(str(grandchild.pid))
time.sleep(600)
"""


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


def started(tmp_path: Path, *, starter: list[str] | None = None) -> tuple[subprocess.Popen, int]:
    script = tmp_path / "daemon.py"
    script.write_text(SPAWNER)
    pid_file = tmp_path / "grandchild"
    command = [sys.executable, "-m", "thinwire.runtimes.flower.superlink"]
    command += [sys.executable, str(script), str(pid_file)]
    process = subprocess.Popen([*(starter or []), *command], start_new_session=True)
    deadline = time.monotonic() + 60
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline and process.poll() is None, "nothing started"
        time.sleep(0.1)
    return process, int(pid_file.read_text())


@pytest.mark.slow
def test_stopping_the_supervisor_stops_the_detached_grandchild_too(tmp_path: Path) -> None:
    supervisor, grandchild = started(tmp_path)
    try:
        assert grandchild in descendants(supervisor.pid)
        supervisor.terminate()
        supervisor.wait(timeout=30)
        deadline = time.monotonic() + 10
        while alive(grandchild) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(grandchild)
    finally:
        supervisor.kill()
        if alive(grandchild):
            os.kill(grandchild, signal.SIGKILL)


@pytest.mark.slow
def test_descendants_lists_children_and_grandchildren(tmp_path: Path) -> None:
    supervisor, grandchild = started(tmp_path)
    try:
        found = descendants(supervisor.pid)
        assert len(found) == 2 and found[-1] == grandchild
    finally:
        supervisor.terminate()
        supervisor.wait(timeout=30)


@pytest.mark.slow
def test_an_orphan_of_a_dead_daemon_is_adopted_and_stopped(tmp_path: Path) -> None:
    supervisor, grandchild = started(tmp_path)
    try:
        (daemon,) = [p for p in descendants(supervisor.pid) if p != grandchild]
        os.kill(daemon, signal.SIGKILL)  # the SuperLink dies; its detached child lives on
        deadline = time.monotonic() + 10
        while alive(daemon) and time.monotonic() < deadline:
            time.sleep(0.1)
        supervisor.wait(timeout=30)  # the daemon exited: the supervisor stops the rest
        deadline = time.monotonic() + 10
        while alive(grandchild) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(grandchild)  # reparented to the supervisor, and stopped by it
    finally:
        supervisor.kill()
        if alive(grandchild):
            os.kill(grandchild, signal.SIGKILL)
