"""A gossip node's inbox: neighbours' messages buffered by round until the node collects them.

Peers drift: a fast neighbour may push round r + 1 while this node still waits for round r,
and a slow one may push round r after this node gave up on it. The mailbox keeps messages
for rounds in [current, current + window), drops (and counts) late ones, refuses ones too far
ahead, and treats a second message from the same (sender, round) as a duplicate. The node
calls `collect(r, expected, timeout=...)` once per round: it returns whatever arrived by the
deadline and which expected neighbours were missing, then moves the window past r.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

__all__ = ["Admission", "Inbox", "Mailbox", "MailboxCounters"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


class Admission(enum.Enum):
    """Whether a message for (sender, round) would be kept."""

    OPEN = "open"  # kept (or, from `put`, was stored)
    DUPLICATE = "duplicate"  # that sender's message for that round is already held or handed out
    STALE = "stale"  # the round was collected already; dropped
    TOO_EARLY = "too_early"  # the round is at or beyond current + window; refused


@dataclass(frozen=True, slots=True)
class Inbox(Generic[T]):
    """What `Mailbox.collect` hands out for one round."""

    round: int
    messages: Mapping[int, T]  # sender -> message, in arrival order
    missing: frozenset[int]  # expected senders whose message did not arrive by the deadline


@dataclass(frozen=True, slots=True)
class MailboxCounters:
    """Running totals of what happened to arriving messages."""

    delivered: int = 0  # messages handed out by `collect`
    duplicates: int = 0  # second messages for an already held (sender, round)
    stale: int = 0  # messages for a collected round, and held messages of skipped rounds
    too_early: int = 0  # messages refused for a round beyond the window
    missing: Mapping[int, int] = field(default_factory=dict)  # sender -> rounds it missed


class Mailbox(Generic[T]):
    """Thread-safe per-round buffer of neighbours' messages (see the module docstring).

    Args:
        window: rounds buffered, >= 1; pushes for [current, current + window) are kept.
        start_round: the first round the node will collect.
    """

    def __init__(self, *, window: int, start_round: int = 0) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        if start_round < 0:
            raise ValueError(f"start_round must be >= 0, got {start_round}")
        self.window = window
        self._current = start_round
        self._held: dict[int, dict[int, T]] = {}  # round -> sender -> message
        self._collected: dict[int, set[int]] = {}  # the last collected round -> its senders
        self._counts: Counter[str] = Counter()
        self._missing: Counter[int] = Counter()
        self._changed = threading.Condition()

    @property
    def current_round(self) -> int:
        """The oldest round still open: the next one `collect` will hand out."""
        with self._changed:
            return self._current

    def _admission(self, sender: int, round: int) -> Admission:
        if round < self._current:
            if sender in self._collected.get(round, ()):
                return Admission.DUPLICATE
            return Admission.STALE
        if round >= self._current + self.window:
            return Admission.TOO_EARLY
        if sender in self._held.get(round, {}):
            return Admission.DUPLICATE
        return Admission.OPEN

    def screen(self, sender: int, round: int) -> Admission:
        """What `put(sender, round, ...)` would do now, counted like `put` when it refuses.

        A receiver screens a push on its header, before reading the message, and answers
        a refused one without storing anything.
        """
        with self._changed:
            verdict = self._admission(sender, round)
            if verdict is not Admission.OPEN:
                self._counts[verdict.value] += 1
            return verdict

    def put(self, sender: int, round: int, message: T) -> Admission:
        """Stores `message` if its round is open and the sender has none there yet.

        Returns:
            `OPEN` if stored; otherwise why not (and the matching counter goes up).
        """
        with self._changed:
            verdict = self._admission(sender, round)
            if verdict is Admission.OPEN:
                self._held.setdefault(round, {})[sender] = message
                self._changed.notify_all()
            else:
                self._counts[verdict.value] += 1
            return verdict

    def collect(self, round: int, expected: Collection[int], *, timeout: float) -> Inbox[T]:
        """Waits until every expected sender's message for `round` is in, or `timeout` passes.

        Rounds between the current one and `round` are skipped (their held messages are
        dropped as stale). Afterwards the window starts at `round + 1`.

        Args:
            round: the round to collect, >= `current_round`.
            expected: the senders this node waits for (its neighbours in that round).
            timeout: seconds to wait at most; 0 takes what is there.

        Raises:
            ValueError: if `round` was collected already or `timeout` is negative.
        """
        if timeout < 0:
            raise ValueError(f"timeout must be >= 0 seconds, got {timeout}")
        wanted = frozenset(expected)
        deadline = time.monotonic() + timeout
        with self._changed:
            if round < self._current:
                raise ValueError(f"round {round} was collected already (current {self._current})")
            self._advance(round)
            self._changed.wait_for(
                lambda: wanted <= self._held.get(round, {}).keys(),
                timeout=max(0.0, deadline - time.monotonic()),
            )
            messages = self._held.pop(round, {})
            self._advance(round + 1)
            self._collected = {round: set(messages)}
            missing = wanted - messages.keys()
            self._counts["delivered"] += len(messages)
            self._missing.update(missing)
        if missing:
            logger.warning("round %d: no message from %s by the deadline", round, sorted(missing))
        return Inbox(round, messages, missing)

    def _advance(self, round: int) -> None:
        for old in [r for r in self._held if r < round]:
            dropped = len(self._held.pop(old))
            self._counts[Admission.STALE.value] += dropped
            logger.info("round %d skipped: dropped %d buffered messages", old, dropped)
        self._current = max(self._current, round)

    @property
    def counters(self) -> MailboxCounters:
        """A snapshot of the running totals."""
        with self._changed:
            return MailboxCounters(
                delivered=self._counts["delivered"],
                duplicates=self._counts[Admission.DUPLICATE.value],
                stale=self._counts[Admission.STALE.value],
                too_early=self._counts[Admission.TOO_EARLY.value],
                missing=dict(self._missing),
            )

    def state_dict(self) -> dict[str, Any]:
        """The current round and the counters; buffered messages are transient and left out."""
        with self._changed:
            return {
                "window": self.window,
                "current_round": self._current,
                "counts": dict(self._counts),
                "missing": dict(self._missing),
            }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores what `state_dict` saved; messages buffered so far are dropped as stale.

        Raises:
            ValueError: if `state` was saved by a mailbox with another window.
        """
        if state["window"] != self.window:
            raise ValueError(f"state has window {state['window']}, this mailbox {self.window}")
        with self._changed:
            self._counts = Counter(state["counts"])
            self._missing = Counter({int(k): v for k, v in state["missing"].items()})
            self._current = int(state["current_round"])
            self._advance(self._current)
            self._collected = {}
            self._changed.notify_all()
