"""ACP-SGD's alternation against its definition, in-process on a one-rank gloo group.

Odd steps compute P = M Q_hat from the previous step's Q, even steps Q = M^T P_hat from the
previous step's P, each reused factor orthogonalized; one factor travels per step, and the
error feedback keeps what the approximation missed. Several ranks: tests/ddp/test_hook.py.
"""

import tempfile

import pytest
import torch
import torch.distributed as dist

from thinwire.codecs.lowrank import initial_q, orthogonalize
from thinwire.ddp import ACPSGD
from thinwire.ddp.acpsgd import acpsgd_allreduce
from thinwire.ddp.collectives import Traffic
from thinwire.ddp.powersgd import PowerSGD, powersgd_allreduce
from thinwire.seeding import tensor_seed


@pytest.fixture(scope="module")
def group():
    with tempfile.NamedTemporaryFile() as f:
        yield dist.ProcessGroupGloo(dist.FileStore(f.name, 1), 0, 1)


def run(config, grads_per_step, group, exchange=acpsgd_allreduce):
    states, traffic, outs = {}, Traffic(), []
    for step, grads in enumerate(grads_per_step):
        before = traffic.payload
        out, states = exchange(grads, list(range(len(grads))), states, config, step, group, traffic)
        outs.append((out, traffic.payload - before))
    return outs, states


def test_p_and_q_steps_alternate_each_reusing_the_others_last_factor(group):
    config = ACPSGD(rank=2, seed=3)
    g = torch.Generator().manual_seed(0)
    ms = [torch.randn(40, 30, generator=g) for _ in range(4)]
    outs, _ = run(config, [[m] for m in ms], group)
    # Recompute the definition by hand.
    q = initial_q(30, 2, seed=tensor_seed(3, 0), device=torch.device("cpu"))
    p = None
    e = torch.zeros(40, 30)
    for step, m in enumerate(ms):
        a = m + e
        if step % 2 == 0:  # steps 1, 3: P = M Q_hat
            q_hat = orthogonalize(q)
            p = a @ q_hat
            expected = p @ q_hat.T
            q = q_hat
        else:  # steps 2, 4: Q = M^T P_hat
            p_hat = orthogonalize(p)
            q = a.T @ p_hat
            expected = p_hat @ q.T
            p = p_hat
        e = a - expected
        got, sent_bytes = outs[step][0][0], outs[step][1]
        assert torch.allclose(got, expected, atol=1e-5), step
        assert sent_bytes == (40 if step % 2 == 0 else 30) * 2 * 4  # one factor, fp32


def test_it_sends_half_of_powersgds_bytes(group):
    g = torch.Generator().manual_seed(1)
    steps = [[torch.randn(64, 48, generator=g)] for _ in range(4)]
    acp, _ = run(ACPSGD(rank=4), steps, group)
    power, _ = run(PowerSGD(rank=4), steps, group, exchange=powersgd_allreduce)
    assert 2 * sum(b for _, b in acp) == sum(b for _, b in power)


def test_error_feedback_makes_the_sum_applied_track_the_sum_of_gradients(group):
    g = torch.Generator().manual_seed(2)
    drift = torch.randn(32, 24, generator=g)
    steps = [[drift + 0.2 * torch.randn(32, 24, generator=g)] for _ in range(40)]
    outs, states = run(ACPSGD(rank=4), steps, group)
    applied = sum(out[0] for out, _ in outs)
    total = sum(s[0] for s in steps)
    assert torch.allclose(applied + states[0].residual, total, atol=1e-3)
    assert float(states[0].residual.norm()) < 0.2 * float(total.norm())


def test_a_rank_r_gradient_is_recovered_once_both_factors_have_turned(group):
    g = torch.Generator().manual_seed(3)
    m = torch.randn(50, 2, generator=g) @ torch.randn(2, 40, generator=g)
    # Step 1 projects onto the seeded Q's random subspace; from step 2 on the reused factor
    # spans M's own column (then row) space.
    outs, _ = run(ACPSGD(rank=2, error_feedback=False), [[m]] * 4, group)
    for out, _ in outs[1:]:
        assert float((out[0] - m).norm() / m.norm()) < 1e-5


def test_vectors_and_small_matrices_are_allreduced_uncompressed(group):
    bias, small = torch.randn(64), torch.randn(4, 4)
    outs, states = run(ACPSGD(rank=2), [[bias, small]], group)
    ((out, sent),) = outs
    assert torch.equal(out[0], bias) and torch.equal(out[1], small)
    assert sent == (64 + 16) * 4 and states == {}


def test_start_iter_delays_compression(group):
    m = torch.randn(40, 30)
    outs, states = run(ACPSGD(rank=2, start_iter=2), [[m]] * 3, group)
    assert torch.equal(outs[0][0][0], m) and torch.equal(outs[1][0][0], m)
    assert outs[2][1] == 40 * 2 * 4 and states[0].calls == 1


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        ({"rank": 0}, "rank"),
        ({"min_compression_rate": 0.5}, "min_compression_rate"),
        ({"start_iter": -1}, "start_iter"),
    ],
)
def test_bad_settings_are_refused(kwargs, problem):
    with pytest.raises(ValueError, match=problem):
        ACPSGD(**kwargs)
