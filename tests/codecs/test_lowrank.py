"""The low-rank maths PowerSGD is built from (thinwire.codecs.lowrank)."""

import torch

from thinwire.codecs.lowrank import (
    init_lowrank,
    initial_q,
    matrix_view,
    orthogonalize,
    p_step,
    q_step,
    reconstruct,
    residual,
    worth_compressing,
)


def test_orthogonalize_returns_orthonormal_columns_spanning_the_input():
    p = torch.randn(200, 4, generator=torch.Generator().manual_seed(0))
    p_hat = orthogonalize(p)
    assert torch.allclose(p_hat.T @ p_hat, torch.eye(4), atol=1e-5)
    projected = p_hat @ (p_hat.T @ p)
    assert torch.allclose(projected, p, atol=1e-4)


def test_orthogonalize_leaves_a_zero_column_near_zero_instead_of_dividing_by_zero():
    p = torch.zeros(10, 2)
    p[:, 0] = 1.0
    p_hat = orthogonalize(p)
    assert torch.isfinite(p_hat).all()
    assert p_hat[:, 1].abs().max() < 1e-6


def test_one_power_iteration_recovers_a_rank_r_matrix_exactly():
    g = torch.Generator().manual_seed(1)
    m = torch.randn(60, 3, generator=g) @ torch.randn(3, 40, generator=g)
    q = initial_q(40, 3, seed=9, device=torch.device("cpu"))
    p_hat = orthogonalize(p_step(m, q))
    q_new = q_step(m, p_hat)
    assert torch.allclose(reconstruct(p_hat, q_new), m, atol=1e-4)
    assert residual(m, p_hat, q_new).abs().max() < 1e-4


def test_warm_start_converges_to_the_best_rank_r_approximation():
    g = torch.Generator().manual_seed(2)
    signal = torch.randn(80, 2, generator=g) @ torch.randn(2, 50, generator=g)
    m = signal + 0.05 * torch.randn(80, 50, generator=g)  # a clear gap after 2 values
    q = initial_q(50, 2, seed=0, device=torch.device("cpu"))
    for _ in range(10):
        p_hat = orthogonalize(p_step(m, q))
        q = q_step(m, p_hat)
    u, s, vh = torch.linalg.svd(m)
    best = (u[:, :2] * s[:2]) @ vh[:2]
    assert torch.allclose(reconstruct(p_hat, q), best, atol=1e-3)


def test_initial_q_is_the_same_for_the_same_seed_and_leaves_the_global_rng_alone():
    before = torch.get_rng_state()
    a = initial_q(30, 2, seed=4, device=torch.device("cpu"))
    b = initial_q(30, 2, seed=4, device=torch.device("cpu"))
    assert torch.equal(a, b)
    assert not torch.equal(a, initial_q(30, 2, seed=5, device=torch.device("cpu")))
    assert torch.equal(torch.get_rng_state(), before)


def test_which_tensors_are_worth_compressing():
    assert matrix_view((16, 3, 3, 3)) == (16, 27)
    assert not worth_compressing((128,), rank=1, min_compression_rate=2.0)  # vectors never
    assert worth_compressing((512, 512), rank=4, min_compression_rate=2.0)
    assert not worth_compressing((8, 8), rank=4, min_compression_rate=2.0)  # 64 < 2 * 64


def test_init_state_has_a_zero_residual_of_the_matrix_shape():
    state = init_lowrank((16, 3, 3, 3), 4, seed=0, device=torch.device("cpu"))
    assert state.q.shape == (27, 4)
    assert state.residual.shape == (16, 27) and not state.residual.any()
