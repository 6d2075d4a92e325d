"""The `data`, `model` and `train` sections."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from thinwire.config._base import (
    Density,
    Device,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    Section,
)
from thinwire.registry import DATASETS, MODELS, OPTIMIZERS, PARTITIONS, SCHEDULES, Kinded


@PARTITIONS.declare
class IIDPartition(Section):
    """Shuffle, then deal examples out evenly."""

    kind: Literal["iid"] = "iid"


@PARTITIONS.declare
class DirichletPartition(Section):
    """Label skew: each class is split across clients in Dirichlet(alpha) proportions."""

    kind: Literal["dirichlet"] = "dirichlet"
    alpha: PositiveFloat = 0.5
    """Concentration: small alpha gives each client few labels; large, near-IID."""
    min_examples: PositiveInt = 2
    """Each client gets at least this many examples (the split is redrawn until it does)."""


@PARTITIONS.declare
class ShardsPartition(Section):
    """Sort by label, cut into equal shards, give each client `shards` of them (FedAvg)."""

    kind: Literal["shards"] = "shards"
    shards: PositiveInt = 2
    """Label-sorted shards per client."""


Partition = Annotated[Kinded, PARTITIONS]
"""Any registered partition (`thinwire.learning.partition` registers the factories)."""


class SyntheticData(Section):
    """FedProx's Synthetic(alpha, beta): per-client softmax models and feature shifts."""

    alpha: NonNegativeFloat = 1.0
    beta: NonNegativeFloat = 1.0
    dim: PositiveInt = 60
    classes: Annotated[int, Field(ge=2)] = 10
    samples_per_client: PositiveInt = 200
    """Median client size; sizes are lognormal around it (at least 10 per client)."""


# thinwire's own data sets validate in every process; `thinwire.learning.datasets`
# registers their loaders and layouts.
DATASETS.declare("digits", reads_files=False)
DATASETS.declare("synthetic", reads_files=False)
DATASETS.declare("mnist", reads_files=True)
DATASETS.declare("fashion_mnist", reads_files=True)
DATASETS.declare("cifar10", reads_files=True)


class DataConfig(Section):
    """Which data, split over how many clients, and how."""

    dataset: Annotated[str, DATASETS] = "digits"
    """Which registered data set (the names and their layouts are at the end of this page)."""
    root: Path | None = None
    """Folder holding the files of a data set that reads files (never downloaded)."""
    clients: PositiveInt = 10
    """Clients of the star, or nodes of the gossip graph."""
    partition: Partition = IIDPartition()
    test_fraction: Annotated[float, Field(gt=0.0, lt=1.0)] = 0.2
    """Held-out share for datasets without an official test split (digits, synthetic)."""
    synthetic: SyntheticData | None = None

    @model_validator(mode="after")
    def _dataset_fields(self) -> DataConfig:
        reads_files = DATASETS.entry(self.dataset).reads_files
        if reads_files and self.root is None:
            raise ValueError(f"dataset {self.dataset!r} reads local files: set data.root")
        if not reads_files and self.root is not None:
            files = [name for name, entry in DATASETS.entries().items() if entry.reads_files]
            raise ValueError(f"data.root applies only to {', '.join(files)}")
        if self.synthetic is not None and self.dataset != "synthetic":
            raise ValueError("data.synthetic applies only to dataset 'synthetic'")
        if self.dataset == "synthetic" and self.partition != IIDPartition():
            raise ValueError(
                "dataset 'synthetic' is generated per client (its own non-IID split); "
                "remove data.partition"
            )
        return self


@MODELS.declare
class LogisticRegression(Section):
    """Multinomial logistic regression (convex)."""

    kind: Literal["logreg"] = "logreg"


@MODELS.declare
class MLP(Section):
    """Fully connected network with ReLU."""

    kind: Literal["mlp"] = "mlp"
    hidden: list[PositiveInt] = [64]
    """Width of each hidden layer."""


@MODELS.declare
class CNN(Section):
    """Two conv layers and a linear head."""

    kind: Literal["cnn"] = "cnn"
    channels: list[PositiveInt] = [16, 32]
    """Output channels of the two conv layers."""


@MODELS.declare
class ResNet20(Section):
    """ResNet-20, the standard CIFAR variant (He et al., 3 stages of 3 basic blocks)."""

    kind: Literal["resnet20"] = "resnet20"


ModelConfig = Annotated[Kinded, MODELS]
"""Any registered model (`thinwire.learning.models` registers the factories)."""


@OPTIMIZERS.declare
class SGD(Section):
    """Local SGD (heavy-ball or Nesterov momentum optional)."""

    kind: Literal["sgd"] = "sgd"
    momentum: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.0
    """Heavy-ball momentum of local SGD (reset every round)."""
    nesterov: bool = False
    """Nesterov momentum instead of heavy-ball."""
    weight_decay: NonNegativeFloat = 0.0
    """L2 penalty added to the gradient."""

    @model_validator(mode="after")
    def _nesterov_needs_momentum(self) -> SGD:
        if self.nesterov and self.momentum == 0.0:
            raise ValueError("nesterov needs momentum > 0")
        return self


@OPTIMIZERS.declare
class Adam(Section):
    """Local Adam."""

    kind: Literal["adam"] = "adam"
    weight_decay: NonNegativeFloat = 0.0
    """L2 penalty added to the gradient."""


Optimizer = Annotated[Kinded, OPTIMIZERS]
"""Any registered local optimizer (`thinwire.learning.train` registers the factories)."""


@SCHEDULES.declare
class ConstantLR(Section):
    """The same learning rate every round."""

    kind: Literal["constant"] = "constant"


@SCHEDULES.declare
class StepLR(Section):
    """Multiply the learning rate by `gamma` at each listed round."""

    kind: Literal["step"] = "step"
    milestones: list[Annotated[int, Field(ge=1)]]
    """Rounds at which the learning rate is multiplied by gamma."""
    gamma: PositiveFloat = 0.1
    """Factor applied at each milestone."""


@SCHEDULES.declare
class CosineLR(Section):
    """Cosine decay from lr to `final` * lr over the run."""

    kind: Literal["cosine"] = "cosine"
    final: NonNegativeFloat = 0.0
    """Last round's learning rate as a fraction of lr."""


@SCHEDULES.declare
class InverseTimeLR(Section):
    """lr_t = lr * a / (a + t): the decaying schedule of convex analyses."""

    kind: Literal["inverse_time"] = "inverse_time"
    a: PositiveFloat = 10.0
    """Offset a of lr * a / (a + t)."""


LRSchedule = Annotated[Kinded, SCHEDULES]
"""Any registered learning-rate schedule (`thinwire.learning.schedule` registers them)."""


class ServerStep(Section):
    """How the server applies the averaged delta: x <- x + lr * m, m <- momentum * m + delta."""

    lr: PositiveFloat = 1.0
    """Server learning rate on the averaged delta (1.0: plain FedAvg)."""
    momentum: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.0
    """Server momentum (FedAvgM); 0 disables it."""


class TrainConfig(Section):
    """Rounds and local training."""

    rounds: PositiveInt = 50
    """Communication rounds."""
    local_steps: PositiveInt | None = 10
    """Local SGD steps per round (or set local_epochs)."""
    local_epochs: PositiveInt | None = None
    """Local passes over the client's data per round, instead of local_steps."""
    batch_size: PositiveInt = 32
    """Local mini-batch size (capped at the client's example count)."""
    lr: PositiveFloat = 0.05
    """Local learning rate (before the schedule)."""
    optimizer: Optimizer = SGD()
    schedule: LRSchedule = ConstantLR()
    participation: Density = 1.0
    """Fraction of clients sampled each round (seeded)."""
    server: ServerStep = ServerStep()
    eval_every: PositiveInt = 1
    """Evaluate the global model every this many rounds (and after the last)."""
    device: Device = "auto"
    """Where training runs; auto picks CUDA when present."""
    threads: PositiveInt | None = None
    """CPU threads of a simulated run; None chooses: one for small models (cheaper, as fast),
    all the process may use for large ones (`thinwire.learning.threads`)."""

    @model_validator(mode="before")
    @classmethod
    def _one_budget(cls, data: Any) -> Any:
        # local_epochs replaces the default local_steps unless both are written.
        if isinstance(data, Mapping) and data.get("local_epochs") is not None:
            if data.get("local_steps") is not None:
                raise ValueError("set either train.local_steps or train.local_epochs, not both")
            data = {**data, "local_steps": None}
        return data
