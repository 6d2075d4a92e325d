"""thinwire.ddp.register on real gloo ranks: every exchange path against its definition."""

import pytest
import torch
from torch import nn

from thinwire.ddp import ACPSGD, OkTopk, PowerSGD, register

from .ranks import results, run_ranks
from .workers import die_mid_step, hook_against_reference, train_user_model

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(400)]

TOPK = {"select": {"kind": "topk", "density": 0.05}, "error_feedback": True}
CODECS = {
    "dense fp32 (allreduce)": {},
    "fp16 cast (allreduce)": {"quantize": {"kind": "fp16"}},
    "random-k, shared seed (allreduce)": {
        "select": {"kind": "random_k", "density": 0.1},
        "error_feedback": True,
    },
    "top-k with error feedback (all-gather)": TOPK,
    "QSGD, private norms (all-gather)": {"quantize": {"kind": "qsgd", "levels": 4}},
}


@pytest.mark.parametrize("name", CODECS)
def test_codec_bucket_mean_is_the_mean_of_every_ranks_decoded_payload(name, tmp_path):
    # Three steps: the error-feedback residual carries over; bytes match the payloads.
    outcomes = run_ranks(hook_against_reference, 3, CODECS[name], (48, 40), 3, tmp=tmp_path)
    for out in results(outcomes):
        tolerance = 2e-3 if "fp16" in name else 1e-5
        assert max(out["errors"]) < tolerance, out["errors"]
        steps, payload, _, elements = out["stats"]
        assert (steps, elements) == (3, 3 * 48 * 40)
        assert payload == out["expected_bytes"]


def test_powersgd_follows_the_power_iteration_with_warm_start_and_error_feedback(tmp_path):
    config = PowerSGD(rank=2, min_compression_rate=1.0)
    outcomes = run_ranks(hook_against_reference, 2, config, (64, 48), 4, tmp=tmp_path)
    for out in results(outcomes):
        assert max(out["errors"]) < 1e-4, out["errors"]
        steps, payload, _, _ = out["stats"]
        assert payload == 4 * (64 + 48) * 2 * 4  # P and Q, float32, per step


def test_acp_sgd_alternates_p_and_q_with_error_feedback_and_sends_one_factor(tmp_path):
    config = ACPSGD(rank=2, min_compression_rate=1.0)
    outcomes = run_ranks(hook_against_reference, 2, config, (64, 48), 4, tmp=tmp_path)
    for out in results(outcomes):
        assert max(out["errors"]) < 1e-4, out["errors"]
        steps, payload, _, _ = out["stats"]
        assert payload == 2 * (64 + 48) * 2 * 4  # P, Q, P, Q: half of PowerSGD's bytes


def test_oktopk_is_the_global_top_k_of_the_summed_local_top_k(tmp_path):
    config = OkTopk(density=0.05, tau=1, tau_prime=2)
    outcomes = run_ranks(hook_against_reference, 4, config, (64, 50), 3, tmp=tmp_path)
    for out in results(outcomes):
        assert max(out["errors"]) < 1e-5, out["errors"]
        _, payload, overhead, _ = out["stats"]
        assert 0 < payload < 3 * 6 * 160 * 8  # < 6k (index, value) pairs per step


@pytest.mark.slow
def test_top_k_at_a_million_parameters(tmp_path):
    outcomes = run_ranks(
        hook_against_reference, 2, TOPK, (1024, 1024), 2, tmp=tmp_path, timeout_s=150
    )
    for out in results(outcomes):
        assert max(out["errors"]) < 1e-5
        assert out["stats"][1] == out["expected_bytes"]


@pytest.mark.parametrize(
    "method",
    [TOPK, PowerSGD(rank=2), ACPSGD(rank=2), OkTopk(density=0.05, tau=4, tau_prime=8)],
    ids=["topk", "powersgd", "acp_sgd", "oktopk"],
)
def test_a_users_own_model_trains_and_ranks_stay_identical(method, tmp_path):
    # Several buckets, which DDP rebuilds after the first step: state must follow them.
    outcomes = run_ranks(train_user_model, 2, method, 20, tmp=tmp_path)
    for out in results(outcomes):
        assert out["spread"] == 0.0
        assert out["losses"][-1] < 0.85 * out["losses"][0], out["losses"]
        assert out["stats"][0] == 20


def test_a_rank_that_dies_mid_step_ends_the_others_with_an_error(tmp_path):
    # The survivors notice the closed connection, or give up at the 20 s group timeout.
    outcomes = run_ranks(die_mid_step, 3, 1, 2, tmp=tmp_path, pg_timeout_s=20)
    assert outcomes[1].exitcode == 3
    for rank in (0, 2):
        assert outcomes[rank].exitcode == 1, outcomes[rank]
        assert outcomes[rank].error and "Error" in outcomes[rank].error
        assert outcomes[rank].seconds - outcomes[1].seconds < 25


def test_register_refuses_a_model_that_is_not_ddp():
    with pytest.raises(TypeError, match="DistributedDataParallel"):
        register(nn.Linear(2, 2), codec=TOPK)


def test_register_names_what_it_accepts():
    with pytest.raises(TypeError, match="PowerSGD"):
        register(
            torch.nn.parallel.DistributedDataParallel.__new__(
                torch.nn.parallel.DistributedDataParallel
            ),
            codec=3,
        )  # type: ignore[arg-type]


def test_register_refuses_a_low_rank_codec_section_for_flat_buckets():
    with pytest.raises(ValueError, match=r"pass PowerSGD\(rank=...\) or ACPSGD\(rank=...\)"):
        register(
            torch.nn.parallel.DistributedDataParallel.__new__(
                torch.nn.parallel.DistributedDataParallel
            ),
            codec={"lowrank": {"kind": "powersgd"}},
        )
