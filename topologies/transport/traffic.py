"""Bytes on each gossip link, payload and metadata counted apart.

*Payload* is the encoded update itself, the bytes a codec is judged by. *Metadata* is what
the transport adds around it: the push's header frame, each data frame's tag and length, and
the reply. (gRPC's own HTTP/2 and TLS framing is below this layer and not counted.) Both
directions are counted per neighbour, as decentralizepy counts `total_data` and
`total_meta`.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

__all__ = ["LinkTraffic", "Traffic"]


@dataclass(frozen=True, slots=True)
class LinkTraffic:
    """Bytes exchanged with one neighbour so far."""

    payload_sent: int = 0
    metadata_sent: int = 0
    payload_received: int = 0
    metadata_received: int = 0

    def __add__(self, other: LinkTraffic) -> LinkTraffic:
        return LinkTraffic(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))


class Traffic:
    """Thread-safe ledger of `LinkTraffic` per neighbour; the sender and receiver share one."""

    def __init__(self) -> None:
        self._links: dict[int, LinkTraffic] = {}
        self._lock = threading.Lock()

    def sent(self, peer: int, *, payload: int, metadata: int) -> None:
        """Records bytes sent to `peer`."""
        self._add(peer, LinkTraffic(payload_sent=payload, metadata_sent=metadata))

    def received(self, peer: int, *, payload: int, metadata: int) -> None:
        """Records bytes received from `peer`."""
        self._add(peer, LinkTraffic(payload_received=payload, metadata_received=metadata))

    def _add(self, peer: int, amount: LinkTraffic) -> None:
        with self._lock:
            self._links[peer] = self._links.get(peer, LinkTraffic()) + amount

    def links(self) -> dict[int, LinkTraffic]:
        """A snapshot: neighbour -> bytes exchanged, in neighbour order."""
        with self._lock:
            return dict(sorted(self._links.items()))

    def total(self) -> LinkTraffic:
        """All links together."""
        total = LinkTraffic()
        for link in self.links().values():
            total = total + link
        return total

    def state_dict(self) -> dict[str, Any]:
        """The counters as plain data."""
        return {"links": {peer: asdict(link) for peer, link in self.links().items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Replaces the counters with those `state_dict` saved."""
        links = {int(peer): LinkTraffic(**link) for peer, link in state["links"].items()}
        with self._lock:
            self._links = links
