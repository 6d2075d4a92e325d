"""A trained model kept in a run folder, and loading it back as a module.

    model.pt     the module's `state_dict()` (`torch.load(..., weights_only=True)` reads it)
    model.yaml   how to rebuild the module: the experiment's `model` section, the input shape
                 of one example and the number of classes

Example:
    >>> model = load_saved_model("runs/quickstart-20260101-120000")  # doctest: +SKIP
    >>> model(x_test).argmax(dim=1)  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import yaml
from pydantic import TypeAdapter, ValidationError
from torch import nn

from thinwire.config import ModelConfig
from thinwire.learning.model_state import load_model_state
from thinwire.learning.models import build_model

__all__ = ["MODEL_CONFIG", "MODEL_FILE", "load_saved_model", "save_model"]

MODEL_FILE = "model.pt"
MODEL_CONFIG = "model.yaml"

_MODEL: TypeAdapter[Any] = TypeAdapter(ModelConfig)  # any registered model section


def save_model(
    folder: Path,
    tensors: Mapping[str, torch.Tensor],
    config: ModelConfig,
    input_shape: Sequence[int],
    num_classes: int,
) -> Path:
    """Writes `tensors` (a run's final travelling tensors) as a full module state dict.

    The module is rebuilt from `config` first, so the file holds every entry of its
    `state_dict()` (integer buffers too) and loads into `build_model(...)` directly.
    """
    module = build_model(config, input_shape, num_classes, seed=0)
    load_model_state(module, {k: v.detach().cpu() for k, v in tensors.items()})
    path = folder / MODEL_FILE
    torch.save(module.state_dict(), path)
    described = {
        "model": _MODEL.dump_python(config, mode="json"),
        "input_shape": [int(d) for d in input_shape],
        "num_classes": int(num_classes),
    }
    (folder / MODEL_CONFIG).write_text(yaml.safe_dump(described, sort_keys=False))
    return path


def load_saved_model(folder: str | Path, *, device: torch.device | str = "cpu") -> nn.Module:
    """The model a run folder saved, rebuilt and loaded, in eval mode.

    Raises:
        FileNotFoundError: the folder holds no saved model (the run failed or is running).
        ValueError: `model.yaml` or `model.pt` is malformed or they do not match.
    """
    folder = Path(folder)
    described_path, weights = folder / MODEL_CONFIG, folder / MODEL_FILE
    if not described_path.is_file() or not weights.is_file():
        raise FileNotFoundError(f"{folder} holds no saved model ({MODEL_FILE}, {MODEL_CONFIG})")
    described = yaml.safe_load(described_path.read_text())
    if not isinstance(described, dict):
        raise ValueError(f"{described_path}: expected a mapping")
    try:
        config: ModelConfig = _MODEL.validate_python(described.get("model"))
    except ValidationError as exc:
        raise ValueError(f"{described_path}: model: {exc.errors()[0]['msg']}") from None
    shape, classes = described.get("input_shape"), described.get("num_classes")
    if not isinstance(shape, list) or not all(isinstance(d, int) for d in shape):
        raise ValueError(f"{described_path}: input_shape must be a list of integers")
    if not isinstance(classes, int):
        raise ValueError(f"{described_path}: num_classes must be an integer")
    module = build_model(config, shape, classes, seed=0, device=device)
    state = torch.load(weights, map_location=device, weights_only=True)
    try:
        module.load_state_dict(state)
    except RuntimeError as exc:
        raise ValueError(f"{weights} does not fit {described_path}: {exc}") from None
    return module.eval()
