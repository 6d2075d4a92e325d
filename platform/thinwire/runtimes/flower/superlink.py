"""A SuperLink that lives and dies with the command that started it, with all it started.

`thinwire server --start-superlink` runs a SuperLink for the length of one run. Flower's
SuperLink starts its SuperExec detached (a session of its own), which starts the ServerApp;
both watch their parent's pid and stop when it is gone. That is not enough when the
starter is SIGKILLed: the orphans are reparented to a process that may not reap them, a
dead parent lingers as a zombie, and the ServerApp goes on running (and checkpointing) an
orphaned run. So the SuperLink runs under this small supervisor:

1. it makes itself a child subreaper (`PR_SET_CHILD_SUBREAPER`), so every process the
   SuperLink starts, detached or not, is reparented to it when its parent dies, and it
   reaps them all (no zombies hide a dead parent from Flower's watchers);
2. it runs the SuperLink command and waits;
3. on SIGTERM or SIGINT (its starter stopping it, or the parent-death signal its starter
   armed with `thinwire.runtimes.flower.deploy.die_with_parent`), or when the SuperLink
   exits, it stops every descendant (SIGTERM, then SIGKILL after `grace_s`) and exits.

Run it as `python -m thinwire.runtimes.flower.superlink flower-superlink ARGS...`. Linux only
(subreapers and `/proc`); elsewhere the SuperLink simply runs as its child.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import FrameType

__all__ = ["descendants", "main", "supervise"]

logger = logging.getLogger(__name__)

_PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>


def descendants(pid: int) -> list[int]:
    """Every live descendant of `pid` (children first), read from `/proc`."""
    parents: dict[int, list[int]] = {}
    for process, parent in _parent_pids():
        parents.setdefault(parent, []).append(process)
    found: list[int] = []
    frontier = [pid]
    while frontier:
        children = parents.get(frontier.pop(), [])
        found.extend(children)
        frontier.extend(children)
    return found


def supervise(command: Sequence[str], *, grace_s: float = 10.0) -> int:
    """Runs `command` as described in the module docstring; returns its exit code."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    stopping = threading.Event()

    def stop(signum: int, frame: FrameType | None) -> None:
        del signum, frame
        stopping.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop)
    child = subprocess.Popen(list(command))
    code: int | None = None
    try:
        while code is None and not stopping.is_set():
            code = _reap(child.pid)
            stopping.wait(0.2)
    finally:
        _stop_all(os.getpid(), grace_s)
    if code is None:
        code = _reap(child.pid, block=True)
    return code if code is not None else 0


def _reap(pid: int, *, block: bool = False) -> int | None:
    """Reaps every exited child; returns `pid`'s exit code once it has exited."""
    code = None
    while True:
        try:
            done, status = os.waitpid(-1, 0 if block else os.WNOHANG)
        except ChildProcessError:
            return code
        if done == 0:
            return code
        if done == pid:
            code = os.waitstatus_to_exitcode(status)
            if block:
                return code


def _stop_all(pid: int, grace_s: float) -> None:
    """SIGTERM to every descendant of `pid`, SIGKILL to those left after `grace_s`."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        for member in descendants(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(member, sig)
        deadline = time.monotonic() + wait_s
        while descendants(pid) and time.monotonic() < deadline:
            _reap(-1)
            time.sleep(0.1)
    _reap(-1)


def _parent_pids() -> Iterator[tuple[int, int]]:
    """(pid, parent pid) of every live process that is not a zombie."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if fields and fields[0] != "Z":
            yield int(stat.parent.name), int(fields[1])


def main() -> None:
    """`python -m thinwire.runtimes.flower.superlink COMMAND...`."""
    if len(sys.argv) < 2:
        sys.exit("usage: python -m thinwire.runtimes.flower.superlink COMMAND [ARGS...]")
    sys.exit(supervise(sys.argv[1:]))


if __name__ == "__main__":
    main()
