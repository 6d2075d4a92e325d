"""The simulator picks its CPU threads by the work of one training batch."""

import torch
from star_helpers import tiny_experiment

from thinwire.config import parse_config
from thinwire.learning import simulation_threads, torch_threads
from thinwire.learning.threads import PARALLEL_FLOPS, batch_flops
from thinwire.runtimes.simulation import simulate


def image_experiment(**train):
    return parse_config(
        {
            "name": "cnn",
            "data": {"dataset": "cifar10", "root": "/nonexistent", "clients": 2},
            "model": {"kind": "resnet20"},
            "train": {"batch_size": 32, **train},
        }
    )


def test_a_small_model_runs_on_one_thread_a_large_one_on_all():
    small = tiny_experiment()
    assert batch_flops(small) < PARALLEL_FLOPS
    assert simulation_threads(small, available=16) == 1
    large = image_experiment()
    assert batch_flops(large) > 100 * PARALLEL_FLOPS  # ResNet-20: ~2.6 GFLOP per batch of 32
    assert simulation_threads(large, available=16) == 16


def test_train_threads_overrides_the_choice():
    assert simulation_threads(tiny_experiment(train={"threads": 3}), available=16) == 3
    assert simulation_threads(image_experiment(threads=2), available=16) == 2


def test_a_run_restores_the_thread_count_it_found():
    before = torch.get_num_threads()
    seen = []
    simulate(tiny_experiment(), on_round=lambda r: seen.append(torch.get_num_threads()))
    assert seen == [1, 1] and torch.get_num_threads() == before


def test_torch_threads_restores_on_error():
    before = torch.get_num_threads()
    try:
        with torch_threads(1):
            raise RuntimeError
    except RuntimeError:
        pass
    assert torch.get_num_threads() == before
