"""What each gossip node reports per round, and the JSON-lines file it goes to.

Every runtime turns a node's `Prepared` and `Absorbed` into one `NodeReport` per round:
payload bytes sent and received per neighbour (`len()` of the messages, so the simulator
and the peers count the same bytes), whether the node fired, its local loss, and who was
missing or rejected. The simulator writes them to `nodes.jsonl` in the run folder; each
peer process writes its own `node-<i>.jsonl`, with transport details added.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple

from thinwire.topologies.methods.node import Absorbed, Prepared

__all__ = ["NodeLog", "NodeReport", "read_node_log"]


class NodeReport(NamedTuple):
    """One node's round."""

    round: int
    node: int
    fired: bool  # sent news this round (SPARQ's trigger; False when the round was local only)
    train_loss: float  # mean local training loss
    lr: float  # the round's local learning rate
    sent: dict[int, int]  # neighbour -> payload bytes sent (0: an empty "silent" message)
    received: dict[int, int]  # neighbour -> payload bytes of its accepted message
    missing: tuple[int, ...]  # neighbours whose message did not arrive
    rejected: tuple[int, ...]  # neighbours whose message failed validation
    refreshed: tuple[int, ...]  # neighbours sent a full estimate (CHOCO resynchronization)
    compute_s: float  # training, encoding, decoding and mixing time

    @classmethod
    def of(
        cls, *, round: int, node: int, lr: float, prepared: Prepared, absorbed: Absorbed
    ) -> NodeReport:
        """The report of a round from the node's two halves of it."""
        return cls(
            round=round,
            node=node,
            fired=prepared.fired,
            train_loss=prepared.train_loss,
            lr=lr,
            sent={j: len(m) for j, m in sorted(prepared.messages.items())},
            received=dict(sorted(absorbed.received.items())),
            missing=absorbed.missing,
            rejected=absorbed.rejected,
            refreshed=prepared.refreshed,
            compute_s=prepared.compute_s + absorbed.compute_s,
        )

    @property
    def bytes_sent(self) -> int:
        """Payload bytes this node sent in the round, all neighbours together."""
        return sum(self.sent.values())

    @property
    def bytes_received(self) -> int:
        """Payload bytes this node accepted in the round."""
        return sum(self.received.values())

    def to_json(self) -> dict[str, Any]:
        """The report as JSON-ready data (neighbour ids become string keys)."""
        data = self._asdict()
        data["sent"] = {str(j): n for j, n in self.sent.items()}
        data["received"] = {str(j): n for j, n in self.received.items()}
        for key in ("missing", "rejected", "refreshed"):
            data[key] = list(data[key])
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> NodeReport:
        """Reads `to_json` output back; keys a runtime added beside the report are ignored."""
        return cls(
            round=int(data["round"]),
            node=int(data["node"]),
            fired=bool(data["fired"]),
            train_loss=float(data["train_loss"]),
            lr=float(data["lr"]),
            sent={int(j): int(n) for j, n in data["sent"].items()},
            received={int(j): int(n) for j, n in data["received"].items()},
            missing=tuple(int(j) for j in data["missing"]),
            rejected=tuple(int(j) for j in data["rejected"]),
            refreshed=tuple(int(j) for j in data["refreshed"]),
            compute_s=float(data["compute_s"]),
        )


class NodeLog:
    """Appends node reports to a JSON-lines file, one line per report, flushed at once.

    Appending (not truncating) lets a restarted peer continue its own log.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a")

    def write(self, report: NodeReport, **extra: Any) -> None:
        """Writes `report`, with runtime-specific `extra` keys beside its fields."""
        line = {**report.to_json(), **extra}
        self._file.write(json.dumps(line, allow_nan=True) + "\n")
        self._file.flush()

    def close(self) -> None:
        """Closes the file."""
        self._file.close()

    def __enter__(self) -> NodeLog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def read_node_log(path: str | Path) -> list[dict[str, Any]]:
    """The lines of a node log as dicts (`NodeReport.from_json` reads the report part)."""
    lines = Path(path).read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]
