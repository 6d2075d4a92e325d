"""Who may hold one of a node's push workers, and for how long.

A gossip node serves pushes on a fixed pool of threads, and a push stream holds its thread
while it waits for frames. Without limits, a few hundred idle streams (opened, never
written to) or streams that trickle a byte at a time would hold every worker and stall the
node's rounds. Three mechanisms bound that, all decided before a frame is read:

- **Lanes.** A pusher names its run, itself and its round in the call's metadata
  (`thinwire-push: <run id>/<sender>/<round>`; the header frame must agree). Each claimed
  sender has its own lane of `per_sender` streams; streams that claim nobody share one
  small lane (`unclaimed`), so strangers compete with each other, never with a neighbour.
  A claim of another run, or of a node that is not a neighbour in that round, is refused
  at once.
- **Caps.** At most `per_host` streams from one remote address and `total` in all; the
  server has a worker thread for each, plus spare ones that screen new streams. A stream
  over any cap is refused at once with RESOURCE_EXHAUSTED (honest pushers retry it with
  backoff), never queued behind the streams that hold the workers.
- **Pace.** Every frame, the header as each data chunk, must arrive within
  `frame_timeout_s` of asking for it, and the whole push within `stream_timeout_s`; a
  `FrameWatchdog` cancels a stream that is late, so a trickle cannot hold a lane either.

Without TLS the claim is not authenticated: an attacker who names neighbour j can occupy
j's lane (for at most `stream_timeout_s` per stream), never another neighbour's. With mutual
TLS the claim must match the caller's certificate, so only j can use j's lane.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import NamedTuple

import grpc

from thinwire.topologies.transport.receiver import PushRejected

__all__ = [
    "CLAIM_KEY",
    "Claim",
    "FrameWatchdog",
    "StreamGate",
    "StreamLimits",
    "claim_metadata",
    "read_claim",
    "remote_host",
]

CLAIM_KEY = "thinwire-push"
"""Call metadata key of a push's claim, `<sender>/<round>`."""


class Claim(NamedTuple):
    """What a push says it is before any frame is read: its run, sender and round."""

    run_id: str
    sender: int
    round: int


def claim_metadata(run_id: str, sender: int, round: int) -> tuple[tuple[str, str]]:
    """The call metadata a pusher sends with its push."""
    return ((CLAIM_KEY, f"{run_id}/{sender}/{round}"),)


def read_claim(metadata: Sequence[tuple[str, str | bytes]] | None) -> Claim | None:
    """The claim in a call's metadata; None when there is none.

    Raises:
        ValueError: for a claim that is not `<run id>/<sender>/<round>` with decimal numbers.
    """
    for key, value in metadata or ():
        if key != CLAIM_KEY:
            continue
        text = value.decode("ascii", "replace") if isinstance(value, bytes) else value
        parts = text.rsplit("/", 2)
        if (
            len(parts) != 3
            or not parts[0]
            or not all(p.isdecimal() and len(p) <= 19 for p in parts[1:])
        ):
            raise ValueError(f"{CLAIM_KEY} metadata {text[:80]!r} is not <run id>/<sender>/<round>")
        return Claim(parts[0], int(parts[1]), int(parts[2]))
    return None


def remote_host(peer: str) -> str:
    """The address part of gRPC's `context.peer()` (`ipv4:10.0.0.2:5123` -> `ipv4:10.0.0.2`)."""
    host, sep, port = peer.rpartition(":")
    return host if sep and port.isdecimal() else peer


@dataclass(frozen=True, slots=True)
class StreamLimits:
    """How many push streams a node serves at once, and how long each may wait for a frame."""

    total: int = 32  # streams (and worker threads) in all
    per_host: int = 16  # streams from one remote address
    per_sender: int = 2  # streams claiming one sender: a push and a retry overlapping it
    unclaimed: int = 2  # streams that claim no sender, all together
    frame_timeout_s: float = 5.0  # longest wait for the header and for each data frame
    stream_timeout_s: float = 30.0  # longest a whole push may take (an honest push ends
    # within its sender's deadline, the gossip runtime's deadline_s)

    def __post_init__(self) -> None:
        for name in ("total", "per_host", "per_sender", "unclaimed"):
            if getattr(self, name) < 1:
                raise ValueError(f"StreamLimits.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("frame_timeout_s", "stream_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0 seconds, got {getattr(self, name)}")


class StreamGate:
    """Counts the streams being served and refuses one that would exceed a limit."""

    def __init__(self, limits: StreamLimits) -> None:
        self.limits = limits
        self._hosts: Counter[str] = Counter()
        self._lanes: Counter[int | None] = Counter()
        self._total = 0
        self._lock = threading.Lock()

    def _refusal(self, host: str, sender: int | None) -> str | None:
        limits = self.limits
        if self._total >= limits.total:
            return f"{limits.total} push streams are open already"
        if self._hosts[host] >= limits.per_host:
            return f"{limits.per_host} push streams from {host} are open already"
        lane = limits.unclaimed if sender is None else limits.per_sender
        if self._lanes[sender] >= lane:
            who = "streams claiming no sender" if sender is None else f"streams of node {sender}"
            return f"{lane} {who} are open already"
        return None

    @contextmanager
    def admit(self, host: str, sender: int | None) -> Iterator[None]:
        """Holds a place for one stream from `host` claiming `sender` (None: no claim).

        Raises:
            PushRejected: RESOURCE_EXHAUSTED naming the limit the stream would exceed.
        """
        with self._lock:
            refusal = self._refusal(host, sender)
            if refusal is not None:
                raise PushRejected(grpc.StatusCode.RESOURCE_EXHAUSTED, refusal, transient=True)
            self._total += 1
            self._hosts[host] += 1
            self._lanes[sender] += 1
        try:
            yield
        finally:
            with self._lock:
                self._total -= 1
                self._hosts[host] -= 1
                self._lanes[sender] -= 1
                if not self._hosts[host]:
                    del self._hosts[host]
                if not self._lanes[sender]:
                    del self._lanes[sender]

    @property
    def open_streams(self) -> int:
        """Streams holding a place now."""
        with self._lock:
            return self._total


class FrameWatchdog:
    """One thread that cancels any watched stream whose next frame is late.

    `watch` wraps a stream's frame iterator: each wait for a frame is given
    `frame_timeout_s`, and no more than what is left of `stream_timeout_s`; past it the
    watchdog calls the stream's `cancel` (for gRPC, `context.cancel`, which
    wakes the waiting read), and the wrapper raises `PushRejected` (DEADLINE_EXCEEDED).
    The thread runs only while some stream is waiting.
    """

    def __init__(self, frame_timeout_s: float, stream_timeout_s: float) -> None:
        if not (frame_timeout_s > 0 and stream_timeout_s > 0):
            raise ValueError(
                f"timeouts must be > 0 seconds, got {frame_timeout_s} and {stream_timeout_s}"
            )
        self.frame_timeout_s = frame_timeout_s
        self.stream_timeout_s = stream_timeout_s
        self._due: list[tuple[float, int]] = []  # heap of (deadline, wait id)
        self._waits: dict[int, Callable[[], None]] = {}  # wait id -> cancel, while waiting
        self._late: set[int] = set()
        self._ids = itertools.count()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None

    def watch(self, frames: Iterator[bytes], cancel: Callable[[], None]) -> Iterator[bytes]:
        """`frames`, each within `frame_timeout_s`, all within `stream_timeout_s`.

        Raises:
            PushRejected: DEADLINE_EXCEEDED from the iteration, when a frame was late (the
                stream is then cancelled).
        """
        end = time.monotonic() + self.stream_timeout_s
        while True:
            wait = self._start(cancel, min(time.monotonic() + self.frame_timeout_s, end))
            try:
                frame = next(frames)
            except (StopIteration, grpc.RpcError) as end:
                # A cancelled gRPC stream ends either way, depending on timing.
                if self._finish(wait):
                    raise self._stalled() from None
                if isinstance(end, StopIteration):
                    return
                raise
            except BaseException:
                self._finish(wait)
                raise
            if self._finish(wait):
                raise self._stalled()
            yield frame

    def _stalled(self) -> PushRejected:
        return PushRejected(
            grpc.StatusCode.DEADLINE_EXCEEDED,
            f"a frame took over {self.frame_timeout_s:g} s or the push over "
            f"{self.stream_timeout_s:g} s; the stream was cancelled",
        )

    def _start(self, cancel: Callable[[], None], due: float) -> int:
        with self._wake:
            wait = next(self._ids)
            self._waits[wait] = cancel
            heapq.heappush(self._due, (due, wait))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="push-watchdog", daemon=True)
                self._thread.start()
            self._wake.notify()
        return wait

    def _finish(self, wait: int) -> bool:
        # Ends a wait; True if it had run late (and its stream was cancelled).
        with self._wake:
            self._waits.pop(wait, None)
            if wait in self._late:
                self._late.discard(wait)
                return True
            return False

    def _run(self) -> None:
        while True:
            with self._wake:
                while True:
                    while self._due and self._due[0][1] not in self._waits:
                        heapq.heappop(self._due)  # its frame came in time
                    if not self._due:
                        self._thread = None  # idle: the next wait starts a new thread
                        return
                    delay = self._due[0][0] - time.monotonic()
                    if delay <= 0:
                        break
                    self._wake.wait(delay)
                _, wait = heapq.heappop(self._due)
                cancel = self._waits[wait]
                self._late.add(wait)
            cancel()  # outside the lock: gRPC may call back into the stream
