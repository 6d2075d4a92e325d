"""What a thinwire deployment on Flower runs: the app folder, the connection, the commands.

Everything here produces plain Flower artefacts, so each piece also works without thinwire's
wrappers:

- `write_app` writes a Flower app folder (a `pyproject.toml` whose components are thinwire's
  installed ServerApp and ClientApp, with the experiment YAML in its run config). `flwr run
  <folder> <connection>` runs it; `thinwire server` does exactly that.
- `write_connection` writes a `$FLWR_HOME/config.toml` naming the SuperLink.
- `superlink_command`, `superexec_command` and `supernode_command` are the daemons' command
  lines, and `clientapp_executor_command` the process that serves a SuperNode started with
  `isolation="process"`. `docker-compose.yml` and the multi-process tests run these same
  commands (a test compares them), and `thinwire client` runs `supernode_command` with
  `clientapp_executor_command` beside it.

Daemons get `flower_environment()`: Flower's update check and telemetry off, and a 0.1 s
SuperExec task poll (the default 1 s adds up to a second to every message).
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import signal
import sys
import tomllib
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path

import yaml

from thinwire.config import Experiment
from thinwire.runtimes.flower.messages import (
    NODE_NUM_PARTITIONS,
    NODE_PARTITION,
    NODE_PLUGINS,
    NODE_STATE_DIR,
    RUN_DIR,
    RUN_EXPERIMENT,
    RUN_RESUME,
    read_run_config,
)
from thinwire.runtimes.flower.run_config import field_keys

__all__ = [
    "CLIENT_APP",
    "CONNECTION",
    "clientapp_executor_command",
    "die_with_parent",
    "SERVER_APP",
    "SUPERLINK_PORT",
    "SUPERNODE_PORT",
    "flower_environment",
    "superexec_command",
    "superlink_command",
    "supernode_command",
    "write_app",
    "write_connection",
]

SERVER_APP = "thinwire.runtimes.flower.server_app:app"
CLIENT_APP = "thinwire.runtimes.flower.client_app:app"
CONNECTION = "thinwire"
"""The connection name `write_connection` writes and `thinwire server` uses."""

SUPERLINK_PORT = 8000  # Flower 1.42: Fleet, Control and Runtime API on one HTTP port
SUPERNODE_PORT = 9094  # a SuperNode's Runtime API, where its SuperExec connects

_ENVIRONMENT = {
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "FLWR_SUPEREXEC_TASK_POLL_INTERVAL": "0.1",
}


def flower_environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """`base` (default: this process's environment) with Flower's settings for thinwire."""
    return {**(os.environ if base is None else base), **_ENVIRONMENT}


def die_with_parent() -> None:
    """A `preexec_fn`: the child gets SIGTERM when its parent dies (Linux; elsewhere no-op).

    What a daemon started for the length of a command (a SuperLink by `thinwire server
    --start-superlink`, a SuperNode by `thinwire client`) needs so that it never outlives
    that command, even when the command is SIGKILLed.
    """
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the signal was armed
        os.kill(os.getpid(), signal.SIGTERM)


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>

_MODULE_NAME = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


def _trust(insecure: bool, root_certificates: Path | None) -> list[str]:
    if insecure and root_certificates is not None:
        raise ValueError("pass either insecure or root_certificates, not both")
    if insecure:
        return ["--insecure"]
    return ["--root-certificates", str(root_certificates)] if root_certificates else []


def superlink_command(
    *,
    host: str = "127.0.0.1",
    port: int = SUPERLINK_PORT,
    isolation: str = "subprocess",
    certificates: tuple[Path, Path, Path] | None = None,
) -> list[str]:
    """The SuperLink, without per-run dependency installation.

    Args:
        host: interface to bind (`0.0.0.0` for SuperNodes on other hosts).
        port: the one HTTP port of the Fleet, Control and Runtime APIs.
        isolation: `subprocess` runs the ServerApp in a child process; `process` leaves it to
            a separate `superexec_command` (as in `docker-compose.yml`).
        certificates: (CA, certificate, private key) PEM files for TLS; None serves plain
            HTTP (`--insecure`).
    """
    if isolation not in ("subprocess", "process"):
        raise ValueError(f"isolation must be 'subprocess' or 'process', got {isolation!r}")
    if certificates is None:
        tls = ["--insecure"]
    else:
        ca, cert, key = certificates
        tls = ["--ssl-ca-certfile", str(ca), "--ssl-certfile", str(cert), "--ssl-keyfile", str(key)]
    return [
        "flower-superlink",
        *tls,
        "--isolation",
        isolation,
        "--disable-runtime-dependency-installation",
        "--host",
        host,
        "--port",
        str(port),
    ]


def superexec_command(
    runtime_api: str, *, insecure: bool, root_certificates: Path | None = None
) -> list[str]:
    """The SuperExec that runs ServerApps for a SuperLink started with `isolation="process"`."""
    return [
        "flower-superexec",
        *_trust(insecure, root_certificates),
        "--runtime-api-address",
        runtime_api,
    ]


def supernode_command(
    *,
    superlink: str,
    partition: int,
    partitions: int | None = None,
    port: int = SUPERNODE_PORT,
    insecure: bool = False,
    root_certificates: Path | None = None,
    state_dir: Path | None = None,
    plugins: Sequence[str] = (),
    isolation: str = "subprocess",
) -> list[str]:
    """A SuperNode serving client `partition` (what `thinwire client` runs).

    Args:
        superlink: the SuperLink's host:port.
        partition: the client index this host trains as.
        partitions: the number of clients, checked against the experiment's `data.clients`.
        port: this SuperNode's Runtime API port (distinct per SuperNode on one host).
        insecure: plain HTTP to the SuperLink.
        root_certificates: PEM bundle of the CA that signed the SuperLink's certificate.
        state_dir: the folder where the node keeps its client's state between messages
            (node-local, persistent); None leaves the ClientApp's default
            (`thinwire.runtimes.flower.messages.default_state_dir`).
        plugins: the modules a run's `plugins:` list may make this node import (beyond the
            installed `thinwire.plugins` entry points).
        isolation: `subprocess` lets the SuperNode start a fresh `flwr-clientapp` process
            per message (Flower's default); `process` leaves its messages to a process
            connecting to its Runtime API (`clientapp_executor_command`).

    Raises:
        ValueError: for a partition outside [0, partitions), a state folder path with a
            '"', or a plugin that is not a dotted module name.
    """
    if partition < 0 or (partitions is not None and partition >= partitions):
        raise ValueError(f"partition {partition} is not in [0, {partitions})")
    if isolation not in ("subprocess", "process"):
        raise ValueError(f"isolation must be 'subprocess' or 'process', got {isolation!r}")
    node_config = f"{NODE_PARTITION}={partition}"
    if partitions is not None:
        node_config += f" {NODE_NUM_PARTITIONS}={partitions}"
    if state_dir is not None:
        if '"' in str(state_dir) or not str(state_dir):
            raise ValueError(f"a state folder path must be non-empty, without '\"': {state_dir}")
        node_config += f" {NODE_STATE_DIR}={_toml_string(str(state_dir))}"
    for name in plugins:
        if not _MODULE_NAME.fullmatch(name):
            raise ValueError(f"--allow-plugin takes a dotted module name, got {name!r}")
    if plugins:
        node_config += f" {NODE_PLUGINS}={_toml_string(','.join(plugins))}"
    return [
        "flower-supernode",
        *_trust(insecure, root_certificates),
        "--superlink",
        superlink,
        "--isolation",
        isolation,
        "--port",
        str(port),
        "--node-config",
        node_config,
    ]


def clientapp_executor_command(port: int = SUPERNODE_PORT) -> list[str]:
    """The process that runs every message of the SuperNode on `port` (this host's loopback).

    See `thinwire.runtimes.flower.clientapp_executor`; the SuperNode must be started with
    `isolation="process"`.
    """
    return [
        sys.executable,
        "-m",
        "thinwire.runtimes.flower.clientapp_executor",
        "--runtime-api-address",
        f"127.0.0.1:{port}",
    ]


def _toml_string(text: str) -> str:
    # A JSON string literal is a TOML basic string, once DEL (raw in JSON, not in TOML) is
    # escaped; non-ASCII stays raw because TOML rejects JSON's surrogate-pair escapes.
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _field_lines(experiment: Experiment) -> str:
    lines = []
    for key, value in field_keys(experiment).items():
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, int | float):
            text = repr(value)
        else:
            text = _toml_string(value)
        lines.append(f"{_toml_string(key)} = {text}")
    return "\n".join(lines)


def write_app(
    folder: Path,
    *,
    experiment: Experiment,
    run_dir: str = "",
    resume: str = "",
    clientapp: str = CLIENT_APP,
) -> Path:
    """Writes the Flower app folder of a run and returns its `pyproject.toml`.

    Args:
        folder: where to write (created if missing).
        experiment: the experiment; its YAML travels in the run config.
        run_dir: absolute run folder for the ServerApp; "" lets it make one under `output`.
        resume: checkpoint to continue from, as the ServerApp's host sees it; "" for none.
        clientapp: the ClientApp component (another app that wraps thinwire's, with mods).
    """
    version = metadata.version("thinwire")
    text = yaml.safe_dump(experiment.model_dump(mode="json"), sort_keys=False)
    pyproject = f"""\
# The Flower app of thinwire experiment {experiment.name!r}, written by `thinwire server`.
# Run it on a SuperLink with `flwr run <this folder> <connection>`. thinwire itself must be
# installed wherever the ServerApp and the ClientApps run (the docker image has it); it is not
# a dependency below, so a SuperLink that installs dependencies never fetches another package.
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "thinwire-star"
version = "{version}"
description = "thinwire: compressed federated learning on Flower (star)"
license = "Apache-2.0"
dependencies = ["flwr>=1.42,<1.43"]

[tool.hatch.build.targets.wheel]
packages = ["."]

[tool.flwr.app]
publisher = "thinwire"

[tool.flwr.app.components]
serverapp = "{SERVER_APP}"
clientapp = {_toml_string(clientapp)}

[tool.flwr.app.config]
{RUN_EXPERIMENT} = {_toml_string(text)}
{RUN_DIR} = {_toml_string(run_dir)}
{RUN_RESUME} = {_toml_string(resume)}
# Every field on its own, so `flwr run -c 'train.rounds=10'` changes just that field:
{_field_lines(experiment)}
"""
    parsed = tomllib.loads(pyproject)["tool"]["flwr"]["app"]["config"]
    if parsed[RUN_EXPERIMENT] != text:
        raise ValueError("the experiment YAML does not survive TOML quoting")
    if read_run_config(parsed).experiment != experiment:
        raise ValueError("the experiment's field keys do not read back as the experiment")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "pyproject.toml"
    path.write_text(pyproject)
    return path


def write_connection(
    flwr_home: Path,
    *,
    address: str,
    insecure: bool,
    root_certificates: Path | None = None,
    name: str = CONNECTION,
) -> Path:
    """Writes `$FLWR_HOME/config.toml` with one SuperLink connection, `name`, as the default."""
    lines = [
        "[superlink]",
        f"default = {_toml_string(name)}",
        "",
        f"[superlink.{name}]",
        f"address = {_toml_string(address)}",
    ]
    if insecure and root_certificates is not None:
        raise ValueError("pass either insecure or root_certificates, not both")
    if insecure:
        lines.append("insecure = true")
    elif root_certificates is not None:
        lines.append(f"root-certificates = {_toml_string(str(root_certificates))}")
    flwr_home.mkdir(parents=True, exist_ok=True)
    path = flwr_home / "config.toml"
    path.write_text("\n".join(lines) + "\n")
    return path
