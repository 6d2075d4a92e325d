"""The `runtime: {kind: ddp}` section."""

import pytest

from thinwire.config import ConfigError, DDPRuntime, parse_config


def _raw(**sections):
    return {"name": "x", "data": {"clients": 4}, "runtime": {"kind": "ddp"}} | sections


def test_defaults_pick_the_backend_from_the_device_and_bound_every_collective():
    runtime = parse_config(_raw()).runtime
    assert runtime == DDPRuntime(backend="auto", address="127.0.0.1", timeout_s=120.0)


def test_ddp_runs_the_star_only():
    with pytest.raises(ConfigError, match="runtime 'ddp' runs the star, not gossip peers"):
        parse_config(_raw(topology={"kind": "ring"}))


def test_unknown_backend_is_named():
    with pytest.raises(ConfigError, match="backend"):
        parse_config(_raw(runtime={"kind": "ddp", "backend": "mpi"}))
