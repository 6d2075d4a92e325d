"""The model zoo: logistic regression, MLP, a small CNN and ResNet-20.

`build_model` is the only entry point. Initialization is deterministic by `seed` and touches
no global random state: the layers are built on the `meta` device (which allocates and draws
nothing), then materialized and initialized from a private `torch.Generator`. The same seed
therefore gives the same model on every host and in every runtime, whatever else has used
torch's global RNG before. Initialization happens on the CPU and the model is then moved to
`device`, so CPU and CUDA runs start from bit-identical weights.

`build_model` looks `model.kind` up in `thinwire.registry.MODELS`: this module registers
the factories of the model sections `thinwire.config` declares, and a plugin adds a model
with `MODELS.register(kind, section=..., factory=...)`. `factory(section, input_shape,
num_classes)` returns the module; it runs on the meta device, so it draws no weights
itself: Linear, Conv2d and BatchNorm2d layers are initialized here (a layer with other
parameters is refused).

ResNet-20 uses BatchNorm. Under federated averaging its weights, biases and running
statistics are all averaged as plain means over clients (see `thinwire.learning.model_state`):
the mean of the clients' running variances is not the variance of the pooled data, so with
strongly non-IID clients the global model's statistics are an approximation.

Tensor names are readable (`fc1.weight`, `conv2.bias`, `layer2.0.bn1.running_mean`) because
they travel on the wire, one payload per named tensor.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from thinwire.config import CNN, MLP, LogisticRegression, ModelConfig, ResNet20
from thinwire.registry import MODELS

__all__ = ["build_model"]


def build_model(
    config: ModelConfig,
    input_shape: Sequence[int],
    num_classes: int,
    *,
    seed: int | None,
    device: torch.device | str = "cpu",
) -> nn.Module:
    """Builds the model `config` describes, initialized from `seed`.

    Args:
        config: the experiment's `model` section.
        input_shape: one example's shape without the batch axis, e.g. (1, 8, 8) or (60,).
        num_classes: the number of output logits.
        seed: the initialization seed; equal seeds give bit-identical initial weights.
            None builds a blank model without drawing any weights (parameters zero,
            BatchNorm at its defaults), for a caller that loads every travelling tensor
            before use: a ClientApp's model always comes from the downlink, and drawing
            10M initial weights it would overwrite cost about 0.3 s of every message.
        device: where the built model lives.

    Returns:
        A module mapping a float batch shaped (B, *input_shape) to logits (B, num_classes).

    Raises:
        ValueError: the input shape does not suit the model (a CNN or ResNet needs an image
            shaped (channels, height, width) large enough for its pooling), `num_classes`
            < 2, or a model kind without a registered factory.

    Examples:
        >>> from thinwire.config import MLP
        >>> model = build_model(MLP(hidden=[32]), (1, 8, 8), 10, seed=0)
        >>> model(torch.zeros(4, 1, 8, 8)).shape
        torch.Size([4, 10])
    """
    shape = tuple(int(d) for d in input_shape)
    if not shape or any(d < 1 for d in shape):
        raise ValueError(f"input_shape must be non-empty and positive, got {shape}")
    if num_classes < 2:
        raise ValueError(f"num_classes must be >= 2, got {num_classes}")
    factory = MODELS.factory(config.kind)
    with torch.device("meta"):
        model: nn.Module = factory(config, shape, num_classes)
    _materialize(model)
    if seed is None:
        _blank(model)
    else:
        _initialize(model, torch.Generator().manual_seed(seed))
    return model.to(device)


def _mlp(shape: tuple[int, ...], hidden: Sequence[int], num_classes: int) -> nn.Module:
    # With no hidden layer this is multinomial logistic regression.
    layers: OrderedDict[str, nn.Module] = OrderedDict(flatten=nn.Flatten())
    width = math.prod(shape)
    for i, units in enumerate(hidden, start=1):
        layers[f"fc{i}"] = nn.Linear(width, units)
        layers[f"relu{i}"] = nn.ReLU()
        width = units
    layers["head" if hidden else "linear"] = nn.Linear(width, num_classes)
    return nn.Sequential(layers)


def _image_shape(shape: tuple[int, ...], kind: str) -> tuple[int, int, int]:
    if len(shape) != 3:
        raise ValueError(
            f"model {kind!r} needs image inputs shaped (channels, height, width), got {shape}; "
            "use 'logreg' or 'mlp' for vector data"
        )
    return shape[0], shape[1], shape[2]


def _cnn(shape: tuple[int, ...], channels: Sequence[int], num_classes: int) -> nn.Module:
    # Each stage is conv3x3 (padding 1) + ReLU + 2x2 max-pool, halving height and width.
    in_channels, height, width = _image_shape(shape, "cnn")
    if min(height, width) < 2 ** len(channels):
        raise ValueError(
            f"a cnn with {len(channels)} pooling stages needs images of at least "
            f"{2 ** len(channels)}x{2 ** len(channels)}, got {height}x{width}; "
            "use fewer model.channels"
        )
    layers: OrderedDict[str, nn.Module] = OrderedDict()
    for i, out_channels in enumerate(channels, start=1):
        layers[f"conv{i}"] = nn.Conv2d(in_channels, out_channels, 3, padding=1)
        layers[f"relu{i}"] = nn.ReLU()
        layers[f"pool{i}"] = nn.MaxPool2d(2)
        in_channels, height, width = out_channels, height // 2, width // 2
    layers["flatten"] = nn.Flatten()
    layers["head"] = nn.Linear(in_channels * height * width, num_classes)
    return nn.Sequential(layers)


class _PadShortcut(nn.Module):
    """Option-A shortcut: subsample by 2 and zero-pad the new channels (no parameters)."""

    def __init__(self, extra_channels: int) -> None:
        super().__init__()
        self.extra = extra_channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        half = self.extra // 2
        return F.pad(x[:, :, ::2, ::2], (0, 0, 0, 0, half, self.extra - half))


class _BasicBlock(nn.Module):
    """Two conv3x3-BN layers with a ReLU between, plus the shortcut, then ReLU."""

    def __init__(self, in_channels: int, out_channels: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, 1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.shortcut: nn.Module = (
            _PadShortcut(out_channels - in_channels)
            if stride != 1 or in_channels != out_channels
            else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class _ResNet20(nn.Module):
    """ResNet-20, the CIFAR variant of He et al. (CVPR 2016, Sec. 4.2), 0.27M parameters.

    conv3x3(16) + BN + ReLU, then three stages of three basic blocks with 16, 32 and 64
    channels (the first block of stages 2 and 3 halves height and width with stride 2), then
    global average pooling and a linear head: 1 + 3*3*2 + 1 = 20 weighted layers.

    Shortcuts are the paper's option A (identity; where the shape changes, subsample by 2
    and zero-pad the extra channels), so they add no parameters; this is the variant the
    paper used on CIFAR-10 and its 0.27M count. Global average pooling makes it accept any
    image size (8x8 digits, 28x28 MNIST, 32x32 CIFAR).
    """

    def __init__(self, input_shape: tuple[int, int, int], num_classes: int) -> None:
        super().__init__()
        in_channels = input_shape[0]
        self.conv1 = nn.Conv2d(in_channels, 16, 3, 1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.layer1 = self._stage(16, 16, stride=1)
        self.layer2 = self._stage(16, 32, stride=2)
        self.layer3 = self._stage(32, 64, stride=2)
        self.fc = nn.Linear(64, num_classes)

    @staticmethod
    def _stage(in_channels: int, out_channels: int, *, stride: int) -> nn.Sequential:
        return nn.Sequential(
            _BasicBlock(in_channels, out_channels, stride),
            _BasicBlock(out_channels, out_channels, 1),
            _BasicBlock(out_channels, out_channels, 1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Maps images (B, C, H, W) to logits (B, num_classes)."""
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer3(self.layer2(self.layer1(out)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(out, 1), 1))


def _logreg(config: Any, shape: tuple[int, ...], num_classes: int) -> nn.Module:
    del config
    return _mlp(shape, (), num_classes)


MODELS.register("logreg", section=LogisticRegression, factory=_logreg)
MODELS.register(
    "mlp",
    section=MLP,
    factory=lambda config, shape, num_classes: _mlp(shape, config.hidden, num_classes),
)
MODELS.register(
    "cnn",
    section=CNN,
    factory=lambda config, shape, num_classes: _cnn(shape, config.channels, num_classes),
)
MODELS.register(
    "resnet20",
    section=ResNet20,
    factory=lambda config, shape, num_classes: _ResNet20(
        _image_shape(shape, "resnet20"), num_classes
    ),
)


def _materialize(model: nn.Module) -> None:
    """Gives every meta parameter and buffer real, uninitialized CPU storage.

    `Module.to_empty` does the same, but for meta tensors it goes through
    `torch._refs.empty_like`, whose first call imports sympy: over a second of every fresh
    process (a ClientApp's cold start) for nothing. Plain `torch.empty` does not.
    """
    for module in model.modules():
        for name, param in list(module.named_parameters(recurse=False)):
            storage = torch.empty(param.shape, dtype=param.dtype)
            setattr(module, name, nn.Parameter(storage, requires_grad=param.requires_grad))
        for name, buffer in list(module.named_buffers(recurse=False)):
            setattr(module, name, torch.empty(buffer.shape, dtype=buffer.dtype))


def _blank(model: nn.Module) -> None:
    """Zeroes every parameter and buffer of a freshly materialized model; BatchNorm as new."""
    with torch.no_grad():
        for tensor in (*model.parameters(), *model.buffers()):
            tensor.zero_()
        for module in model.modules():
            if isinstance(module, nn.BatchNorm2d):
                module.reset_parameters()


def _initialize(model: nn.Module, generator: torch.Generator) -> None:
    """Initializes every parameter and buffer of a freshly materialized model from `generator`.

    Linear and conv layers of the plain models get PyTorch's default scheme
    (Kaiming-uniform weights with a=sqrt(5), biases uniform in +-1/sqrt(fan_in)); ResNet-20's
    convolutions get He-normal weights (fan_out, ReLU gain) as in the paper. BatchNorm
    starts at weight 1, bias 0, running mean 0 and running variance 1.
    """
    he_normal = isinstance(model, _ResNet20)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.BatchNorm2d):
                module.reset_parameters()
            elif isinstance(module, nn.Conv2d) and he_normal:
                nn.init.kaiming_normal_(
                    module.weight, mode="fan_out", nonlinearity="relu", generator=generator
                )
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Linear | nn.Conv2d):
                nn.init.kaiming_uniform_(module.weight, a=math.sqrt(5), generator=generator)
                if module.bias is not None:
                    fan_in = module.weight[0].numel()
                    bound = 1.0 / math.sqrt(fan_in)
                    nn.init.uniform_(module.bias, -bound, bound, generator=generator)
            elif (
                next(module.parameters(recurse=False), None) is not None
                or next(module.buffers(recurse=False), None) is not None
            ):
                raise TypeError(f"no initializer for {type(module).__name__}")
