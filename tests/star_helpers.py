"""Small star experiments shared by the client, server, simulator and CLI tests."""

from thinwire.config import Experiment, parse_config


def tiny_experiment(**sections) -> Experiment:
    """Digits, 4 clients, a small MLP, 2 rounds of 3 local steps: a star in well under 1 s."""
    raw = {
        "name": "tiny",
        "seed": 7,
        "data": {"dataset": "digits", "clients": 4},
        "model": {"kind": "mlp", "hidden": [16]},
        "train": {"rounds": 2, "local_steps": 3, "batch_size": 16, "lr": 0.1, "device": "cpu"},
    }
    for key, value in sections.items():
        raw[key] = {**raw.get(key, {}), **value} if isinstance(value, dict) else value
    return parse_config(raw)
