"""The same exchanges on NCCL, where CUDA is present (skipped otherwise).

One GPU holds one NCCL rank (NCCL refuses two ranks on a device), so on a one-GPU machine
these run a single rank: codecs, serialization and every collective then run on CUDA
tensors through NCCL, though nothing is summed across ranks. With two or more GPUs they run
two ranks.
"""

import pytest
import torch
import torch.distributed as dist

from thinwire.ddp import OkTopk, PowerSGD

from .ranks import results, run_ranks
from .test_runtime import experiment_raw
from .workers import hook_against_reference, runtime_rank

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(400),
    pytest.mark.skipif(
        not (torch.cuda.is_available() and dist.is_nccl_available()), reason="needs CUDA and NCCL"
    ),
]

METHODS = {
    "fp16 (allreduce)": {"quantize": {"kind": "fp16"}},
    "random-k (allreduce)": {
        "select": {"kind": "random_k", "density": 0.1},
        "error_feedback": True,
    },
    "top-k (all-gather)": {"select": {"kind": "topk", "density": 0.05}, "error_feedback": True},
    "QSGD (all-gather)": {"quantize": {"kind": "qsgd", "levels": 4}},
    "PowerSGD": PowerSGD(rank=2, min_compression_rate=1.0),
    "Ok-Topk": OkTopk(density=0.05, tau=1, tau_prime=2),
}


def _world() -> int:
    return min(2, torch.cuda.device_count())


@pytest.mark.parametrize("name", METHODS)
def test_every_exchange_runs_on_cuda_through_nccl(name, tmp_path):
    outcomes = run_ranks(
        hook_against_reference,
        _world(),
        METHODS[name],
        (96, 80),
        3,
        "cuda",
        tmp=tmp_path,
        backend="nccl",
    )
    for out in results(outcomes):
        tolerance = 2e-3 if "fp16" in name else 1e-4
        assert max(out["errors"]) < tolerance, out["errors"]


def test_the_ddp_runtime_trains_on_cuda(tmp_path):
    world = _world()
    raw = experiment_raw(tmp_path) | {"data": {"dataset": "digits", "clients": world}}
    raw["train"] = raw["train"] | {"device": "cuda"}
    outcomes = run_ranks(
        runtime_rank, world, raw, str(tmp_path / "run"), tmp=tmp_path, backend="nccl"
    )
    ranks = results(outcomes)
    assert len(ranks[0]["records"]) == 3
    assert all(t.is_cuda for t in ranks[0]["model"].values())
