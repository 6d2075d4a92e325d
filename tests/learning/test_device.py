import pytest
import torch

from thinwire.learning import resolve_device


def test_cpu_is_always_the_cpu():
    assert resolve_device("cpu") == torch.device("cpu")


def test_auto_picks_cuda_when_available(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == torch.device("cuda", 0)


def test_auto_falls_back_to_the_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")


@pytest.mark.parametrize("spec", ["cuda", "cuda:0", "cuda:1"])
def test_cuda_without_cuda_is_an_error_not_a_fallback(monkeypatch, spec):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        resolve_device(spec)


def test_cuda_index_is_checked_against_the_device_count(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("cuda") == torch.device("cuda", 0)
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    with pytest.raises(RuntimeError, match=r"2 CUDA device\(s\)"):
        resolve_device("cuda:2")


@pytest.mark.parametrize("spec", ["gpu", "CUDA", "cuda:", "cuda:x", "", "mps"])
def test_unknown_device_strings_are_rejected(spec):
    with pytest.raises(ValueError, match="must be 'auto', 'cpu', 'cuda'"):
        resolve_device(spec)
