"""The SuperNode supervisor: a stale or vanished SuperNode is replaced, a broken one is not."""

from __future__ import annotations

import io
import os
import signal
import sys
import threading
from pathlib import Path

from thinwire.runtimes.flower.supernode import FAILED_CONNECTION, Supervisor

FAKE = """\
import pathlib, sys, time
counter = pathlib.Path(sys.argv[1])
n = int(counter.read_text()) + 1 if counter.exists() else 1
counter.write_text(str(n))
plans = sys.argv[2].split(",")
plan = plans[n - 1] if n <= len(plans) else "99"
print(f"start {n}", flush=True)
if plan == "stale":  # what a SuperNode does when the new SuperLink does not know it
    while True:
        print("WARNING: FAILED, retrying in 0.05 seconds", flush=True)
        time.sleep(0.05)
elif plan == "serve":
    time.sleep(600)
else:  # exit with this code after a moment
    code, _, after = plan.partition("@")
    time.sleep(float(after or 0))
    sys.exit(int(code))
""".replace("FAILED", FAILED_CONNECTION)


def supervisor(tmp_path: Path, plan: str, **options: float) -> tuple[Supervisor, io.StringIO]:
    script = tmp_path / "fake_supernode.py"
    script.write_text(FAKE)
    out = io.StringIO()
    command = [sys.executable, str(script), str(tmp_path / "count"), plan]
    return Supervisor(command, dict(os.environ), out=out, **options), out


def test_a_supernode_stuck_failing_to_connect_is_replaced(tmp_path: Path) -> None:
    watcher, out = supervisor(tmp_path, "stale,3", stale_s=0.5, startup_s=5.0)
    assert watcher.run() == 3  # the fresh one's exit code (it exits at once: not restarted)
    assert watcher.restarts == 1
    assert "start 1" in out.getvalue() and "start 2" in out.getvalue()
    assert FAILED_CONNECTION in out.getvalue()  # the child's output is passed through


def test_a_supernode_that_shuts_down_after_running_is_started_again(tmp_path: Path) -> None:
    watcher, _ = supervisor(tmp_path, "0@4,4", stale_s=30.0, startup_s=3.0)
    assert watcher.run() == 4
    assert watcher.restarts == 1


def test_a_supernode_that_cannot_start_is_not_restarted(tmp_path: Path) -> None:
    watcher, _ = supervisor(tmp_path, "2", stale_s=30.0, startup_s=5.0)
    assert watcher.run() == 2
    assert watcher.restarts == 0
    assert (tmp_path / "count").read_text() == "1"


def test_sigterm_stops_the_supernode_and_the_supervisor(tmp_path: Path) -> None:
    watcher, out = supervisor(tmp_path, "serve", stale_s=30.0, startup_s=0.0)
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    try:
        code = watcher.run()
    finally:
        timer.cancel()
    assert code == -signal.SIGTERM  # the child was stopped by the same signal
    assert watcher.restarts == 0
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handler is put back


def companion(tmp_path: Path, plan: str) -> list[str]:
    """A fake process beside the SuperNode, with its own start counter."""
    return [sys.executable, str(tmp_path / "fake_supernode.py"), str(tmp_path / "beside"), plan]


def test_the_companion_runs_beside_the_supernode_and_is_restarted_when_it_dies(
    tmp_path: Path,
) -> None:
    watcher, out = supervisor(tmp_path, "0@4,5", stale_s=30.0, startup_s=3.0)
    watcher.companion = companion(tmp_path, "7@3.5,serve")
    assert watcher.run() == 5  # the SuperNode's own story is unchanged
    assert watcher.companion_restarts == 1  # it died after running a while: started again
    assert (tmp_path / "beside").read_text() == "2"
    assert "start 2" in out.getvalue()
    assert watcher._companion is None  # stopped with the supervisor


def test_a_companion_that_cannot_start_stops_the_supernode(tmp_path: Path) -> None:
    watcher, out = supervisor(tmp_path, "serve", stale_s=30.0, startup_s=3.0)
    watcher.companion = companion(tmp_path, "9")
    assert watcher.run() == 9  # its code, not a SuperNode left without anyone serving it
    assert watcher.companion_restarts == 0
