"""Everything a run would refuse before its first round, checked without training.

The schema (`thinwire.config`) knows the file alone. Whether the file runs *here* also
depends on the machine and on what the run builds from it: the device must exist, the
output folder must be writable, the data must be there and split over `data.clients`
clients, the graph must have that many nodes, every codec must accept its settings, and
privacy's delta must fit each client's data. `preflight` sets those up with the very
functions a run calls (`resolve_device`, `load_dataset`, `client_indices`, `ModelCodec`,
`PrivacyPlan.for_client`, `GraphSchedule`, `build_node`), on the CPU and without a
training step, so `thinwire validate` and `thinwire run` share one code path and the same
errors.

Each failure becomes one line of a `ConfigError` naming the file and the field it comes
from (`train.device: ...`, `topology: torus 3 x 4 has 12 nodes, but the run has 13`).
Stages that need an earlier stage's result are skipped once it failed. Real data sets are
loaded in full (their files are read once more when the run starts); digits and
synthetic take milliseconds.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TypeVar

import torch

from thinwire.codecs.model import ModelCodec
from thinwire.config import ConfigError, Experiment
from thinwire.learning import (
    Dataset,
    DatasetError,
    PrivacyPlan,
    Workspace,
    build_model,
    client_indices,
    flatten,
    load_dataset,
    resolve_device,
)
from thinwire.registry import DATASETS

__all__ = ["preflight", "writable_folder"]

_T = TypeVar("_T")

_FAILURES = (ValueError, RuntimeError, OSError, DatasetError)
"""What setting a run up raises for a config it cannot run (GraphError is a ValueError)."""


def writable_folder(path: Path) -> str | None:
    """Why a run could not create its folder under `path`, or None if it can.

    `path` may not exist yet (the run creates it with its parents); then its nearest
    existing ancestor must be a writable folder.
    """
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            return f"no part of {path} exists"
        probe = probe.parent
    if not probe.is_dir():
        return f"{probe} is a file, not a folder" + ("" if probe == path else f" (in {path})")
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"the folder {probe} is not writable" + ("" if probe == path else f" (for {path})")
    return None


class _Problems:
    """Runs setup stages, recording each failure as `field: message`."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def stage(self, field: str, build: Callable[[], _T]) -> _T | None:
        try:
            return build()
        except _FAILURES as exc:
            self.lines.append(f"{field}: {' '.join(str(exc).split())}")
            return None


def preflight(experiment: Experiment, source: str) -> None:
    """Sets the run up as `thinwire run` would, on the CPU, and reports what fails.

    Args:
        experiment: a schema-valid experiment.
        source: the file it came from, for the error lines.

    Raises:
        ConfigError: one line per field whose setting the run would refuse.
    """
    problems = _Problems()
    why = writable_folder(Path(experiment.output))
    if why is not None:
        problems.lines.append(f"output: {why}")
    problems.stage("train.device", lambda: resolve_device(experiment.train.device))
    reads_files = DATASETS.entry(experiment.data.dataset).reads_files
    data_field = "data.root" if reads_files else "data.dataset"
    dataset = problems.stage(
        data_field, lambda: load_dataset(experiment.data, seed=experiment.seed)
    )
    if dataset is not None:
        _check_roles(experiment, dataset, problems)
    if problems.lines:
        raise ConfigError(source, problems.lines)


def _check_roles(experiment: Experiment, dataset: Dataset, problems: _Problems) -> None:
    # What the clients, server or peers build from the data, the model and the codec.
    data = experiment.data
    parts = problems.stage(
        "data.clients", lambda: client_indices(dataset, data, seed=experiment.seed)
    )
    cpu = torch.device("cpu")
    workspace = problems.stage(
        "model",
        lambda: Workspace(
            build_model(
                experiment.model,
                dataset.input_shape,
                dataset.num_classes,
                seed=experiment.seed,
                device=cpu,
            ),
            cpu,
        ),
    )
    if workspace is None:
        return
    problems.stage("codec", lambda: ModelCodec(experiment.codec, workspace.spec, seed=0))
    if experiment.downlink is not None:
        downlink = experiment.downlink
        problems.stage("downlink", lambda: ModelCodec(downlink, workspace.spec, seed=0))
    if parts is None:
        return
    privacy = experiment.privacy
    if privacy is not None:
        # delta < 1/N binds hardest for the largest client, which therefore goes first.
        sizes = sorted({len(p) for p in parts}, reverse=True)
        field = "privacy.delta" if not privacy.delta < 1.0 / sizes[0] else "privacy"
        for n in sizes:
            plan = partial(PrivacyPlan.for_client, experiment, privacy, n)
            if problems.stage(field, plan) is None:
                break
    if experiment.decentralized:
        _check_peers(experiment, dataset, parts, workspace, problems)


def _check_peers(
    experiment: Experiment,
    dataset: Dataset,
    parts: list[torch.Tensor],
    workspace: Workspace,
    problems: _Problems,
) -> None:
    from thinwire.topologies.graph.schedule import GraphSchedule
    from thinwire.topologies.methods.registry import build_node

    count = experiment.data.clients
    schedule = problems.stage(
        "topology", lambda: GraphSchedule(experiment.topology, count, seed=experiment.seed)
    )
    if schedule is None:
        return
    initial = flatten(workspace.tensors())
    for i, index in enumerate(parts):
        node = partial(
            build_node,
            experiment,
            i,
            x=dataset.x_train[index],
            y=dataset.y_train[index],
            workspace=workspace,
            schedule=schedule,
            initial=initial,
        )
        if problems.stage("gossip", node) is None:
            return
