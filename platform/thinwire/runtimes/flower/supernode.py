"""Keeping a client host in the federation: `flower-supernode` restarted when its link is stale.

A Flower 1.42 SuperNode registers once with its SuperLink and then only retries. When the
SuperLink restarts (a server host rebooted, `thinwire server --resume` with
`--start-superlink`), the new SuperLink does not know the node: the SuperNode either shuts
down (an unauthorized reply) or keeps logging "Connection attempt failed" forever. A
`Supervisor` runs `flower-supernode` as its child, passes its output through, and starts a
fresh one (which registers anew) when the child has done nothing but fail to connect for
`stale_s` seconds, or when it exits after having run for a while. The client's state is on
the node's disk (`thinwire.runtimes.flower.state`), so the fresh SuperNode continues where the
old one stopped. A child that exits within `startup_s` (bad arguments, a port in use) is not
restarted: its exit code is returned.

Beside the SuperNode the supervisor can keep a companion process: `thinwire client` runs the
ClientApp executor there (`thinwire.runtimes.flower.clientapp_executor`), which serves the
SuperNode's messages. It outlives SuperNode restarts (it waits for the Runtime API to come
back), is started afresh if it dies, and is stopped with the supervisor.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from types import FrameType
from typing import TextIO

from thinwire.runtimes.flower.deploy import die_with_parent

__all__ = ["FAILED_CONNECTION", "Supervisor"]

logger = logging.getLogger(__name__)

FAILED_CONNECTION = "Connection attempt failed"
"""What Flower's retry logic logs before each new attempt to reach the SuperLink."""


class Supervisor:
    """Runs a SuperNode command and restarts it when its link to the SuperLink is stale.

    Args:
        command: the `flower-supernode` command line.
        env: its environment.
        stale_s: restart after this long with nothing but failed connection attempts.
        startup_s: a child that exits sooner is not restarted (it cannot start at all).
        out: where the child's output goes.
        companion: a command to keep running beside the SuperNode (None: none).
    """

    def __init__(
        self,
        command: Sequence[str],
        env: Mapping[str, str],
        *,
        stale_s: float = 30.0,
        startup_s: float = 10.0,
        out: TextIO = sys.stdout,
        companion: Sequence[str] | None = None,
    ) -> None:
        if not stale_s > 0 or not startup_s >= 0:
            raise ValueError(f"stale_s must be > 0 and startup_s >= 0, got {stale_s}, {startup_s}")
        self.command = list(command)
        self.env = dict(env)
        self.stale_s = stale_s
        self.startup_s = startup_s
        self.out = out
        self.companion = list(companion) if companion is not None else None
        self.restarts = 0
        self.companion_restarts = 0
        self._stopping = threading.Event()
        self._failing_since: float | None = None
        self._lock = threading.Lock()

    def run(self) -> int:
        """Runs the SuperNode until it cannot start or this process is told to stop.

        SIGTERM and SIGINT stop the child and end the loop; returns the child's exit code.
        """
        previous = {s: signal.signal(s, self._stop) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            self._start_companion()
            while True:
                started = time.monotonic()
                code = self._run_once()
                if self._companion_failed is not None:
                    return self._companion_failed
                if self._stopping.is_set():
                    return code
                if time.monotonic() - started < self.startup_s and code != _RESTARTED:
                    return code
                self.restarts += 1
                logger.warning("starting a fresh SuperNode (restart %d)", self.restarts)
                self._stopping.wait(1.0)
                if self._stopping.is_set():
                    return 0
        finally:
            self._stop_companion()
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    _companion: subprocess.Popen[str] | None = None

    def _start_companion(self) -> None:
        if self.companion is None:
            return
        self._companion, self._companion_reader = self._spawn(self.companion, watch_link=False)
        self._companion_since = time.monotonic()

    _companion_since = 0.0
    _companion_failed: int | None = None

    def _keep_companion(self, supernode: subprocess.Popen[str]) -> None:
        companion = self._companion
        if companion is None or companion.poll() is None or self._stopping.is_set():
            return
        if time.monotonic() - self._companion_since < self.startup_s:  # it cannot start
            logger.error(
                "the process beside the SuperNode exited with code %s right after it started; "
                "stopping the SuperNode too",
                companion.returncode,
            )
            self._companion_failed = companion.returncode or 1
            self._stopping.set()
            supernode.terminate()
            return
        self.companion_restarts += 1
        logger.warning(
            "the process beside the SuperNode exited with code %s; starting it again",
            companion.returncode,
        )
        self._start_companion()

    def _stop_companion(self) -> None:
        companion, self._companion = self._companion, None
        if companion is None:
            return
        if companion.poll() is None:
            companion.terminate()
            try:
                companion.wait(timeout=15)
            except subprocess.TimeoutExpired:
                companion.kill()
                companion.wait()
        if self._companion_reader is not None:
            self._companion_reader.join(timeout=5)

    _companion_reader: threading.Thread | None = None

    def _stop(self, signum: int, frame: FrameType | None) -> None:
        del frame
        self._stopping.set()
        with self._lock:
            child = self._child
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    _child: subprocess.Popen[str] | None = None

    def _spawn(
        self, command: Sequence[str], *, watch_link: bool
    ) -> tuple[subprocess.Popen[str], threading.Thread]:
        """Starts `command` with its output relayed to `out` by the returned thread.

        `watch_link` makes the relay track failed connection attempts (the SuperNode's).
        """
        child = subprocess.Popen(
            list(command),
            env=self.env,
            preexec_fn=die_with_parent,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
        )
        reader = threading.Thread(target=self._relay, args=(child, watch_link), daemon=True)
        reader.start()
        return child, reader

    def _run_once(self) -> int:
        self._failing_since = None
        child, reader = self._spawn(self.command, watch_link=True)
        with self._lock:
            self._child = child
        stale = False
        while child.poll() is None:
            since = self._failing_since
            if since is not None and time.monotonic() - since > self.stale_s:
                logger.warning(
                    "the SuperNode has failed to reach its SuperLink for %.0f s (a restarted "
                    "SuperLink no longer knows it); replacing it",
                    time.monotonic() - since,
                )
                stale = True
                child.terminate()
                try:
                    child.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    child.kill()
                break
            self._keep_companion(child)
            self._stopping.wait(0.5)
            if self._stopping.is_set():
                try:
                    child.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    child.kill()
        code = child.wait()
        reader.join(timeout=5)
        with self._lock:
            self._child = None
        return _RESTARTED if stale else code

    def _relay(self, child: subprocess.Popen[str], watch_link: bool) -> None:
        if child.stdout is None:  # a programming error: the child is opened with stdout=PIPE
            raise RuntimeError("the child's output is not piped, so it cannot be relayed")
        for line in child.stdout:
            self.out.write(line)
            self.out.flush()
            if not watch_link:
                continue
            if FAILED_CONNECTION in line:
                if self._failing_since is None:
                    self._failing_since = time.monotonic()
            elif line.strip():
                self._failing_since = None


_RESTARTED = -1000
"""`_run_once`'s code for a child the supervisor replaced (never a process's exit code)."""
