"""A stalling attack on a real gossip ring: the peers train on as if nobody attacked.

Four `thinwire peer` processes run CHOCO on a ring (deadline 10 s) while `StallAttack` holds
200 idle push streams and 8 streams that declare 1 GiB and trickle against node 0,
re-opening each one node 0 ends. Node 0 starts first and the others only once node 0 has
refused an attacking stream, so every round runs under attack. Every node must end with
the simulator's models (the unattacked run), bit for bit, without a missing message or a
skipped round.
"""

from __future__ import annotations

import pytest
import torch

from thinwire.checkpoint import load_node_checkpoint, node_checkpoint_path
from thinwire.config import load_config
from thinwire.topologies.runtime.peer import node_log_path
from thinwire.topologies.runtime.simulation import simulate_gossip

from .stall_attack import LogWatch, MemoryWatch, StallAttack
from .test_gossip_peers import RUN, finish, log_of, spawn, write_config

__all__ = ["spawn"]  # the fixture, used by name

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]

ROUNDS = 6


def test_idle_and_trickling_streams_leave_the_rings_models_unchanged(tmp_path, spawn):
    config = write_config(
        tmp_path,
        4,
        gossip={"kind": "choco", "gamma": 0.3},
        train={"rounds": ROUNDS, "local_steps": 3},
        deadline_s=10.0,
    )
    experiment = load_config(config)
    out = config.parent / "runs" / "e2e-peers"
    target = spawn(config, 0)
    with (
        StallAttack(experiment.runtime.peers[0], run_id=RUN, sender=1) as attack,
        MemoryWatch(target.pid) as memory,
    ):
        # Node 0 waits for the others before round 1: the attack is under way before any
        # round starts, however slowly the other peers come up.
        attack.wait_engaged(timeout=120)
        opened_before = attack.opened
        peers = [target, *(spawn(config, i) for i in range(1, 4))]
        with LogWatch(node_log_path(out, 0)) as rounds:
            assert finish(peers, timeout=240) == [0] * 4

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the peers: the same kernels, the same bits
    try:
        sim = simulate_gossip(experiment)
    finally:
        torch.set_num_threads(threads)
    for node in range(4):
        lines = log_of(config, node)
        assert [line["round"] for line in lines] == list(range(1, ROUNDS + 1))
        assert all(line["missing"] == [] and line["push_failures"] == {} for line in lines)
        saved = load_node_checkpoint(node_checkpoint_path(out / "checkpoints", node))
        assert torch.equal(saved.state["x"], sim.models[node]), f"node {node} differs"
    # The attack ran all along: node 0 refused streams at once, and the attack re-opened
    # what node 0 ended while the rounds ran.
    assert attack.outcomes["RESOURCE_EXHAUSTED"] > 0, attack.outcomes
    assert attack.opened > opened_before, (opened_before, attack.opened)
    assert max(rounds.round_s[1:]) < 10.0, rounds.round_s  # no round waited for a deadline
    assert memory.peak["VmRSS"] < 2_000_000  # kB: nothing near a declared GiB was reserved
