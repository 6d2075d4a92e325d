"""The learning stack every role shares: data, partitions, models and the local trainer.

- `load_dataset` / `Dataset`: digits, FedProx synthetic, MNIST, Fashion-MNIST, CIFAR-10
  (local files only, never downloaded).
- `partition` / `client_indices`: IID, Dirichlet label skew, label shards.
- `build_model`: logreg, MLP, CNN, ResNet-20, initialized deterministically from a seed.
- `train_local` / `evaluate`: index-batched local SGD on tensors already on the device,
  built from `make_optimizer`, `batch_indices` and `train_steps` for other trainers to reuse;
  `train_private` is the DP-SGD trainer built from them (`thinwire.privacy`).
- `Trainer` / `local_sgd` / `private`: a role's trainer as a value; DP-SGD wraps it.
- `model_state` / `flatten` / `state_delta` / `model_delta`: the named tensors that travel, and
  their flat form.
- `Workspace` / `load_federation`: one model on a device shared by a process's roles, and
  a run's data, partitions and initial model set up from its config.
- `save_model` / `load_saved_model`: a run's final model in its run folder, and back.
- `simulation_threads` / `torch_threads`: the CPU threads a simulated run uses.
- `learning_rate`: the per-round schedule. `resolve_device`: the config's device string.

Example:
    >>> import torch
    >>> from thinwire.config import DataConfig, MLP, SGD
    >>> data = load_dataset(DataConfig(dataset="digits"), seed=0)
    >>> model = build_model(MLP(), data.input_shape, data.num_classes, seed=0)
    >>> stats = train_local(model, data.x_train, data.y_train, steps=10, batch_size=32,
    ...                     lr=0.05, optimizer=SGD(), generator=torch.Generator().manual_seed(0))
    >>> stats.steps
    10
"""

from thinwire.learning.datasets import ClientSplit, Dataset, DatasetError, load_dataset
from thinwire.learning.device import resolve_device
from thinwire.learning.federation import Federation, load_federation
from thinwire.learning.model_state import (
    ModelState,
    flatten,
    load_model_state,
    model_delta,
    model_state,
    state_delta,
    tensor_specs,
    unflatten,
)
from thinwire.learning.models import build_model
from thinwire.learning.partition import client_indices, partition
from thinwire.learning.private import PrivacyPlan, private, train_private
from thinwire.learning.saved import load_saved_model, save_model
from thinwire.learning.schedule import learning_rate
from thinwire.learning.threads import simulation_threads, torch_threads
from thinwire.learning.train import (
    Evaluation,
    TrainStats,
    batch_indices,
    evaluate,
    local_steps_for,
    make_optimizer,
    train_local,
    train_steps,
)
from thinwire.learning.trainer import TrainCall, Trainer, local_sgd
from thinwire.learning.workspace import Workspace

__all__ = [
    "ClientSplit",
    "Dataset",
    "DatasetError",
    "Evaluation",
    "Federation",
    "ModelState",
    "PrivacyPlan",
    "TrainCall",
    "TrainStats",
    "Trainer",
    "Workspace",
    "batch_indices",
    "build_model",
    "client_indices",
    "evaluate",
    "flatten",
    "learning_rate",
    "load_dataset",
    "load_federation",
    "load_model_state",
    "load_saved_model",
    "local_sgd",
    "local_steps_for",
    "make_optimizer",
    "model_delta",
    "model_state",
    "partition",
    "private",
    "resolve_device",
    "save_model",
    "simulation_threads",
    "state_delta",
    "tensor_specs",
    "torch_threads",
    "train_local",
    "train_private",
    "train_steps",
    "unflatten",
]
