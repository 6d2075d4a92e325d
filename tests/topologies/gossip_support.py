"""Helpers shared by the gossip node tests: tiny experiments, nodes, and hand-run rounds."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from thinwire.config import Experiment, parse_config
from thinwire.learning import flatten, load_federation
from thinwire.topologies.graph import GraphSchedule
from thinwire.topologies.methods.node import Absorbed, GossipNode, Prepared
from thinwire.topologies.methods.registry import build_node


def experiment(
    gossip: dict[str, Any] | None = None,
    codec: dict[str, Any] | None = None,
    *,
    nodes: int = 4,
    rounds: int = 4,
    topology: dict[str, Any] | None = None,
    **sections: Any,
) -> Experiment:
    """A tiny decentralized digits run: 4 nodes on a ring, an 8-unit MLP, CPU."""
    raw: dict[str, Any] = {
        "name": "gossip-test",
        "seed": 3,
        "data": {"dataset": "digits", "clients": nodes, "partition": {"kind": "iid"}},
        "model": {"kind": "mlp", "hidden": [8]},
        "train": {
            "rounds": rounds,
            "local_steps": 2,
            "batch_size": 16,
            "lr": 0.1,
            "device": "cpu",
            "eval_every": rounds,
        },
        "topology": topology or {"kind": "ring"},
        "gossip": gossip or {"kind": "dpsgd"},
        **sections,
    }
    if codec is not None:
        raw["codec"] = codec
    return parse_config(raw)


def make_nodes(config: Experiment) -> list[GossipNode]:
    """One node per client, sharing a workspace, as the simulator builds them."""
    federation = load_federation(config)
    workspace = federation.workspace
    schedule = GraphSchedule(config.topology, config.data.clients, seed=config.seed)
    initial = flatten(workspace.tensors())
    return [
        build_node(config, i, x=x, y=y, workspace=workspace, schedule=schedule, initial=initial)
        for i, (x, y) in enumerate(federation.all_client_data())
    ]


Deliver = Callable[[int, int, bytes], bytes | None]
"""(sender, receiver, message) -> the bytes that arrive, or None for a lost message."""


def play(
    nodes: Sequence[GossipNode], round: int, deliver: Deliver | None = None
) -> tuple[list[Prepared], list[Absorbed]]:
    """One round for every node, messages passed by hand (optionally lost or altered)."""
    prepared = [node.prepare(round) for node in nodes]
    absorbed = []
    for i, node in enumerate(nodes):
        inbox = {}
        for j in node.core.neighbours(round):
            if i not in prepared[j].messages:
                continue
            message = prepared[j].messages[i]
            arriving = deliver(j, i, message) if deliver is not None else message
            if arriving is not None:
                inbox[j] = arriving
        absorbed.append(node.absorb(round, inbox))
    return prepared, absorbed


def vectors(nodes: Sequence[GossipNode]) -> list[torch.Tensor]:
    """Copies of every node's flat model."""
    return [node.vector().clone() for node in nodes]


def free_ports(count: int) -> list[int]:
    """Ports that were free on 127.0.0.1 a moment ago (held together, so all distinct)."""
    import socket

    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def peer_runtime(ports: Sequence[int], **fields: Any) -> dict[str, Any]:
    """A gossip runtime section for peers on 127.0.0.1 at `ports`, insecure by default."""
    runtime: dict[str, Any] = {
        "kind": "gossip",
        "run_id": "gossip-test",
        "peers": [f"127.0.0.1:{p}" for p in ports],
        "listen": "127.0.0.1:{port}",
        "deadline_s": 20.0,
        "retries": 1,
        "backoff_s": 0.05,
        **fields,
    }
    if "tls" not in runtime:
        runtime["insecure"] = True
    return runtime
