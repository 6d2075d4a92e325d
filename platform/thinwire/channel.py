"""The simulated network: link times, and the slots of a random-access uplink.

Each client has an uplink and a downlink speed and a one-way latency (one value for all
clients, or one per client, from the experiment's `channel` section). Clients of a round
transfer in parallel, so a synchronous round's network time is the slowest client's
downlink-plus-uplink time.

With `channel.slots` set, the uplink is a slotted random-access channel (slotted ALOHA): a
round's uplink is one frame of M slots of `slot_ms` each; every sender transmits in the slot
its policy chose, a slot with exactly one sender delivers it, and a slot with two or more
loses all of them (`arbitrate`). The frame lasts M slots however many are used.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from thinwire.config import ChannelConfig

__all__ = [
    "SLOT_METRIC",
    "Channel",
    "SlotOutcome",
    "SlotStats",
    "aloha_success_probability",
    "arbitrate",
]

SLOT_METRIC = "slot"
"""Update metric naming the random-access slot an update was sent in (an integer)."""


def _per_client(value: float | Sequence[float], clients: int) -> list[float]:
    return list(value) if isinstance(value, Sequence) else [float(value)] * clients


class SlotStats(NamedTuple):
    """How the slots of one random-access frame were used."""

    successes: int  # slots with exactly one sender
    collisions: int  # slots with two or more senders (every update in them lost)
    idle: int  # slots nobody used


class SlotOutcome(NamedTuple):
    """The arbitration of one frame."""

    delivered: dict[int, bool]  # per sender: did its update get through
    stats: SlotStats


def arbitrate(choices: Mapping[int, int], slots: int) -> SlotOutcome:
    """Resolves one slotted-ALOHA frame: a lone sender succeeds, a shared slot loses all.

    Args:
        choices: sender -> the slot it transmitted in, each in [0, slots).
        slots: M, the number of slots in the frame.

    Raises:
        ValueError: `slots` < 1 or a slot outside [0, slots).
    """
    if slots < 1:
        raise ValueError(f"a frame needs at least one slot, got {slots}")
    senders: dict[int, list[int]] = {}
    for sender, slot in choices.items():
        if not 0 <= slot < slots:
            raise ValueError(f"sender {sender} chose slot {slot}, outside [0, {slots})")
        senders.setdefault(slot, []).append(sender)
    delivered = {s: len(senders[slot]) == 1 for s, slot in choices.items()}
    successes = sum(1 for group in senders.values() if len(group) == 1)
    collisions = len(senders) - successes
    return SlotOutcome(delivered, SlotStats(successes, collisions, slots - len(senders)))


def aloha_success_probability(contenders: int, p: float, slots: int) -> float:
    """The probability that a given slot carries exactly one update.

    Each of n clients transmits with probability p, in one of M slots chosen uniformly, so
    it occupies a given slot with probability q = p/M and the slot succeeds with
    probability n q (1 - q)^(n - 1): slotted ALOHA with access probability q, whose
    throughput peaks at q = 1/n (about 1/e for large n).

    Raises:
        ValueError: n < 0, p outside [0, 1] or M < 1.
    """
    if contenders < 0 or not 0.0 <= p <= 1.0 or slots < 1:
        raise ValueError(f"need n >= 0, p in [0, 1], M >= 1; got {contenders}, {p}, {slots}")
    if contenders == 0:
        return 0.0
    q = p / slots
    return contenders * q * (1.0 - q) ** (contenders - 1)


class Channel:
    """Per-client link model: transfer time = latency + bytes * 8 / rate."""

    def __init__(self, config: ChannelConfig, clients: int) -> None:
        self.up_bps = [m * 1e6 for m in _per_client(config.uplink_mbps, clients)]
        self.down_bps = [m * 1e6 for m in _per_client(config.downlink_mbps, clients)]
        self.latency_s = [ms / 1e3 for ms in _per_client(config.latency_ms, clients)]
        self.slots = config.slots
        self.slot_s = config.slot_ms / 1e3

    def uplink_s(self, client: int, nbytes: int) -> float:
        """Seconds for `nbytes` to reach the server from `client`."""
        return self.latency_s[client] + nbytes * 8 / self.up_bps[client]

    def downlink_s(self, client: int, nbytes: int) -> float:
        """Seconds for `nbytes` to reach `client` from the server."""
        return self.latency_s[client] + nbytes * 8 / self.down_bps[client]

    def frame_s(self) -> float:
        """Seconds of a random-access round's uplink frame: M slots (0 without slots)."""
        return self.slots * self.slot_s if self.slots is not None else 0.0

    def round_s(self, down: Mapping[int, int], up: Mapping[int, int]) -> float:
        """Network time of a synchronous round: the slowest client's down + up transfer.

        On a random-access uplink the upload part is the frame (`frame_s`), after the
        slowest downlink: the slots are fixed in time whoever uses them.

        Args:
            down: bytes each recipient received.
            up: bytes each sender sent (clients that stayed silent are absent).
        """
        if self.slots is not None:
            return max((self.downlink_s(c, n) for c, n in down.items()), default=0.0) + (
                self.frame_s()
            )
        times = [
            self.downlink_s(c, n) + (self.uplink_s(c, up[c]) if c in up else 0.0)
            for c, n in down.items()
        ]
        return max(times, default=0.0)

    def fits_slot(self, client: int, nbytes: int) -> bool:
        """Whether `nbytes` from `client` fit in one slot at its uplink rate (no latency)."""
        return self.slots is None or nbytes * 8 / self.up_bps[client] <= self.slot_s
