"""A finished multi-process gossip run written as the simulator's run folder.

`thinwire peer --report` reads every peer's node log (`node-<i>.jsonl`) and final
checkpoint and writes what `thinwire run` writes for a simulated gossip run: `config.yaml`,
one record per round in `metrics.jsonl` / `metrics.csv`, `summary.json`, `curves.png`,
`nodes.jsonl` (every node's reports) and the average model (`model.pt`, `model.yaml`).

A round's record sums the nodes' reports of that round (bytes sent are the uplink, bytes
accepted the downlink, as in the simulator) and takes the slowest node's compute and wall
time; the network time comes from the run's channel model. Peers keep no per-round model,
so accuracy, loss and the consensus distance are those of the final checkpoints, in the
last round's record; earlier rounds have NaN there, as unevaluated simulator rounds do.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from thinwire.channel import Channel
from thinwire.config import Experiment
from thinwire.learning import save_model
from thinwire.metrics import RoundRecord, RunRecorder, round_record
from thinwire.topologies.runtime.peer import PeerRunSummary, node_log_path, summarize_peers
from thinwire.topologies.runtime.reports import NodeReport, read_node_log
from thinwire.topologies.runtime.simulation import network_s

__all__ = ["write_peer_run"]


def write_peer_run(
    experiment: Experiment,
    out_dir: str | Path,
    checkpoint_dir: str | Path | None = None,
    *,
    run_dir: Path | None = None,
) -> tuple[Path, PeerRunSummary]:
    """Writes the run folder of a finished peer run; returns it and the peers' summary.

    Raises:
        ValueError: a node's checkpoint is missing or belongs to another experiment, or no
            node logged a round.
    """
    summary = summarize_peers(experiment, out_dir, checkpoint_dir)
    lines = _node_lines(experiment, Path(out_dir))
    if not lines:
        raise ValueError(f"no node log in {out_dir} holds a round")
    records = _records(experiment, lines, summary)
    with RunRecorder(experiment, run_dir=run_dir) as recorder:
        with (recorder.dir / "nodes.jsonl").open("w") as nodes:
            for line in lines:
                nodes.write(json.dumps(line, allow_nan=True) + "\n")
        for record in records:
            recorder.add(record)
        save_model(
            recorder.dir, summary.model, experiment.model, summary.input_shape, summary.num_classes
        )
        recorder.close()
    return recorder.dir, summary


def _node_lines(experiment: Experiment, out_dir: Path) -> list[dict[str, Any]]:
    """Every node's last report of each round, in (round, node) order."""
    latest: dict[tuple[int, int], dict[str, Any]] = {}
    for node in range(experiment.data.clients):
        path = node_log_path(out_dir, node)
        for line in read_node_log(path) if path.exists() else []:
            latest[(int(line["round"]), int(line["node"]))] = line
    return [latest[key] for key in sorted(latest)]


def _records(
    experiment: Experiment, lines: Sequence[dict[str, Any]], summary: PeerRunSummary
) -> list[RoundRecord]:
    channel = Channel(experiment.channel, experiment.data.clients)
    by_round: dict[int, list[tuple[NodeReport, float]]] = {}
    for line in lines:
        report = NodeReport.from_json(line)
        by_round.setdefault(report.round, []).append((report, float(line.get("wall_s", 0.0))))
    records: list[RoundRecord] = []
    cum_up = cum_down = 0
    last = max(by_round)
    for round in sorted(by_round):
        reports = [r for r, _ in by_round[round]]
        up = sum(r.bytes_sent for r in reports)
        down = sum(r.bytes_received for r in reports)
        cum_up, cum_down = cum_up + up, cum_down + down
        final = round == last
        records.append(
            round_record(
                round=round,
                evaluation=summary.evaluation if final else None,
                train_losses=[r.train_loss for r in reports],
                bytes_up=up,
                bytes_down=down,
                cum_bytes_up=cum_up,
                cum_bytes_down=cum_down,
                updates_sent=sum(1 for r in reports for n in r.sent.values() if n),
                sim_time_s=network_s(channel, reports),
                compute_s=max(r.compute_s for r in reports),
                wall_s=max(wall for _, wall in by_round[round]),
                nodes=len(reports),
                consensus_distance=summary.consensus_distance if final else math.nan,
                missing=sum(len(r.missing) for r in reports),
                rejected=sum(len(r.rejected) for r in reports),
            )
        )
    return records
