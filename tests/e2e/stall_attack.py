"""A stalling attack on a gossip peer, and what to watch while it runs.

`StallAttack` holds `idle` push streams open without sending a frame and `slow` streams
that declare a huge update and trickle it a byte at a time, against one peer's address,
re-opening every stream the peer ends, until stopped. It speaks the bare push protocol
(no claim in the call metadata, as an outsider would), so it works against any version of
the peer service. `MemoryWatch` samples a process's VmSize and VmRSS; `LogWatch` notes when
each line of a node log appears (the end of each of the node's rounds).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc

from thinwire.topologies.transport import gossip_pb2
from thinwire.topologies.transport.framing import PUSH_METHOD, frame_data, frame_header


class StallAttack:
    """Idle and trickling push streams against `address`, kept open until `stop`."""

    def __init__(
        self,
        address: str,
        *,
        run_id: str,
        sender: int,
        idle: int = 200,
        slow: int = 8,
        declared: int = 2**30,
        trickle_s: float = 0.5,
        reopen_s: float = 0.5,
        channels: int = 8,
    ) -> None:
        self.address = address
        self.header = gossip_pb2.Header(
            run_id=run_id, round=1, sender=sender, total_bytes=declared, chunks=declared // 1024
        )
        self.kinds = ["idle"] * idle + ["slow"] * slow
        self.trickle_s = trickle_s
        self.reopen_s = reopen_s
        self.outcomes: Counter[str] = Counter()  # how the peer ended the streams
        self.opened = 0
        self._stop = threading.Event()
        self._engaged = threading.Event()  # the peer has ended a stream: it is listening
        # Reconnect quickly: the attack starts before the peer listens.
        options = [
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.min_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 300),
        ]
        self._channels = [grpc.insecure_channel(address, options) for _ in range(channels)]
        self._thread = threading.Thread(target=self._run, name="stall-attack", daemon=True)

    def _frames(self, kind: str) -> Iterator[bytes]:
        if kind == "slow":
            yield frame_header(self.header)
            while not self._stop.wait(self.trickle_s):
                yield frame_data(b"x")
        else:
            self._stop.wait()

    def _open(self, index: int) -> Any:
        channel = self._channels[index % len(self._channels)]
        push = channel.stream_unary(
            PUSH_METHOD, response_deserializer=gossip_pb2.PushReply.FromString
        )
        self.opened += 1
        return push.future(self._frames(self.kinds[index]), wait_for_ready=True)

    def _run(self) -> None:
        # Wait for the peer to listen: a channel that failed to connect would fail every
        # call at once (UNAVAILABLE) for its whole reconnect backoff.
        for channel in self._channels:
            ready = grpc.channel_ready_future(channel)
            while not self._stop.is_set():
                try:
                    ready.result(timeout=0.5)
                    break
                except grpc.FutureTimeoutError:
                    continue
        calls: list[Any] = [None] * len(self.kinds)
        while not self._stop.is_set():
            for index, call in enumerate(calls):
                if call is not None and not call.done():
                    continue
                if call is not None:
                    self.outcomes[call.code().name] += 1
                    self._engaged.set()
                calls[index] = self._open(index)
            self._stop.wait(self.reopen_s)
        for call in calls:
            if call is not None:
                call.cancel()

    def wait_engaged(self, timeout: float) -> None:
        """Waits until the peer has ended one of the attack's streams (it listens and screens).

        Raises:
            AssertionError: if it did not within `timeout` seconds.
        """
        if not self._engaged.wait(timeout):
            raise AssertionError(f"the peer ended none of the attack's streams in {timeout:g} s")

    def __enter__(self) -> StallAttack:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        for channel in self._channels:
            channel.close()


class MemoryWatch:
    """The largest VmSize and VmRSS of process `pid` seen while the `with` block runs."""

    def __init__(self, pid: int, every_s: float = 0.2) -> None:
        self.pid = pid
        self.every_s = every_s
        self.peak = {"VmSize": 0, "VmRSS": 0}  # kB
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memory-watch", daemon=True)

    def _sample(self) -> None:
        try:
            lines = Path(f"/proc/{self.pid}/status").read_text().splitlines()
        except OSError:
            return
        for line in lines:
            key, _, value = line.partition(":")
            if key in self.peak:
                self.peak[key] = max(self.peak[key], int(value.split()[0]))

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self._sample()

    def __enter__(self) -> MemoryWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


class LogWatch:
    """When each line of a node log appeared: the end of each of the node's rounds."""

    def __init__(self, path: Path, every_s: float = 0.05) -> None:
        self.path = path
        self.every_s = every_s
        self.start = time.monotonic()
        self.times: list[float] = []  # seconds after `start`
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="log-watch", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                lines = self.path.read_text().count("\n")
            except OSError:
                continue
            while len(self.times) < lines:
                self.times.append(time.monotonic() - self.start)

    @property
    def round_s(self) -> list[float]:
        """Seconds each round took (the first one counted from the start of the watch)."""
        return [b - a for a, b in zip([0.0, *self.times], self.times, strict=False)]

    def __enter__(self) -> LogWatch:
        self.start = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
