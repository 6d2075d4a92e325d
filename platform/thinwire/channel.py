"""The simulated network: how long the bytes a round moved would take on real links.

Each client has an uplink and a downlink speed and a one-way latency (one value for all
clients, or one per client, from the experiment's `channel` section). Clients of a round
transfer in parallel, so a synchronous round's network time is the slowest client's
downlink-plus-uplink time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from thinwire.config import ChannelConfig

__all__ = ["Channel"]


def _per_client(value: float | Sequence[float], clients: int) -> list[float]:
    return list(value) if isinstance(value, Sequence) else [float(value)] * clients


class Channel:
    """Per-client link model: transfer time = latency + bytes * 8 / rate."""

    def __init__(self, config: ChannelConfig, clients: int) -> None:
        self.up_bps = [m * 1e6 for m in _per_client(config.uplink_mbps, clients)]
        self.down_bps = [m * 1e6 for m in _per_client(config.downlink_mbps, clients)]
        self.latency_s = [ms / 1e3 for ms in _per_client(config.latency_ms, clients)]

    def uplink_s(self, client: int, nbytes: int) -> float:
        """Seconds for `nbytes` to reach the server from `client`."""
        return self.latency_s[client] + nbytes * 8 / self.up_bps[client]

    def downlink_s(self, client: int, nbytes: int) -> float:
        """Seconds for `nbytes` to reach `client` from the server."""
        return self.latency_s[client] + nbytes * 8 / self.down_bps[client]

    def round_s(self, down: Mapping[int, int], up: Mapping[int, int]) -> float:
        """Network time of a synchronous round: the slowest client's down + up transfer.

        Args:
            down: bytes each recipient received.
            up: bytes each sender sent (clients that stayed silent are absent).
        """
        times = [
            self.downlink_s(c, n) + (self.uplink_s(c, up[c]) if c in up else 0.0)
            for c, n in down.items()
        ]
        return max(times, default=0.0)
