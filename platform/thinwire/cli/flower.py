"""`thinwire server` and `thinwire client`: the star on Flower's deployment engine.

Both are thin wrappers over Flower's own commands (`flwr run`, `flower-superlink`,
`flower-supernode`); `thinwire.runtimes.flower.deploy` builds their command lines and the app
folder, which also work without these wrappers.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Annotated

import typer

from thinwire.cli._app import ConfigArg, SetOpt, app, console, errors, fail, load, run_table
from thinwire.config import Experiment, FlowerRuntime
from thinwire.metrics import new_run_dir

__all__ = ["client", "server"]


AddressOpt = Annotated[
    str | None,
    typer.Option("--superlink", help="SuperLink host:port (default: runtime.superlink)."),
]
InsecureOpt = Annotated[
    bool, typer.Option("--insecure", help="Plain HTTP to the SuperLink (no TLS).")
]
RootCertificatesOpt = Annotated[
    Path | None,
    typer.Option(
        "--root-certificates",
        help="PEM bundle of the CA that signed the SuperLink's certificate.",
        exists=True,
        dir_okay=False,
    ),
]


def _flower_experiment(
    config: Path,
    overrides: list[str] | None,
    superlink: str | None,
    insecure: bool,
    root_certificates: Path | None,
) -> Experiment:
    """The experiment with a `flower` runtime; the CLI's flags override its fields."""
    overrides = list(overrides or ())
    kind = load(config, overrides).runtime.kind
    if kind == "gossip":
        fail(f"{config}: runtime.kind is 'gossip'; `thinwire server` runs the star on Flower")
    if kind == "simulation":
        overrides.insert(0, "runtime.kind=flower")  # the same file drives both runtimes
    # JSON strings are YAML strings: "[::1]:8000" or "10:20" stay text.
    if superlink is not None:
        overrides.append(f"runtime.superlink={json.dumps(superlink)}")
    if insecure:
        overrides += ["runtime.insecure=true", "runtime.root_certificates="]
    if root_certificates is not None:
        ca = json.dumps(str(root_certificates.resolve()))
        overrides += ["runtime.insecure=false", f"runtime.root_certificates={ca}"]
    return load(config, overrides)


@app.command()
def server(
    config: ConfigArg,
    overrides: SetOpt = None,
    superlink: AddressOpt = None,
    insecure: InsecureOpt = False,
    root_certificates: RootCertificatesOpt = None,
    resume: Annotated[
        Path | None,
        typer.Option(help="Continue from a checkpoint: a round-*.pt file or a run folder."),
    ] = None,
    start_superlink: Annotated[
        bool,
        typer.Option(
            "--start-superlink",
            help="Start a plain-HTTP SuperLink at the address for this run, stop it after.",
        ),
    ] = False,
    write_app: Annotated[
        Path | None,
        typer.Option(
            "--write-app",
            help="Only write the Flower app folder here; run it with `flwr run DIR CONNECTION`.",
            file_okay=False,
        ),
    ] = None,
) -> None:
    """Run an experiment on Flower: submit it to a SuperLink and wait for its rounds.

    Writes a Flower app folder (thinwire's ServerApp and ClientApp, the experiment YAML in
    its run config) and runs `flwr run APP CONNECTION --stream` against the SuperLink. The
    ServerApp writes the run folder as `thinwire run` does; its summary is printed at the
    end. Clients join with `thinwire client --superlink HOST:PORT --partition I`.
    Ctrl-C stops the run on the SuperLink.
    """
    from thinwire.runtimes.flower.deploy import write_app as write_flower_app

    experiment = _flower_experiment(config, overrides, superlink, insecure, root_certificates)
    runtime = experiment.runtime
    if not isinstance(runtime, FlowerRuntime):  # _flower_experiment sets it
        raise RuntimeError(f"expected a flower runtime, got {runtime.kind!r}")
    checkpoint = ""
    if resume is not None:
        from thinwire.checkpoint import find_checkpoint

        try:
            checkpoint = str(find_checkpoint(resume).resolve())
        except FileNotFoundError as exc:
            fail(str(exc))
    if write_app is not None:
        write_flower_app(write_app, experiment=experiment, resume=checkpoint)
        console.print(
            f"wrote the Flower app of {experiment.name!r} to [bold]{write_app}[/]; run it with\n"
            f"  flwr run {write_app} <connection>   "
            "(connections live in $FLWR_HOME/config.toml)"
        )
        return
    if start_superlink and not runtime.insecure:
        fail(
            "--start-superlink starts a plain-HTTP SuperLink for one machine; add --insecure, "
            "or start flower-superlink with --ssl-* options yourself (docker/README.md)"
        )
    with (
        _local_superlink(runtime.superlink) if start_superlink else nullcontext(),
        tempfile.TemporaryDirectory(prefix="thinwire-flower-") as tmp,
    ):
        run_dir = new_run_dir(Path(experiment.output).resolve(), experiment.name)
        app_dir = Path(tmp) / "app"
        write_flower_app(app_dir, experiment=experiment, run_dir=str(run_dir), resume=checkpoint)
        status = _submit(app_dir, Path(tmp) / "flwr_home", runtime)
    _report_flower_run(experiment, run_dir, status)


@contextmanager
def _local_superlink(address: str) -> Iterator[None]:
    """Runs a plain-HTTP SuperLink at `address` while the block runs, and never longer.

    The port must be free: a SuperLink that cannot bind would leave `/health` to whatever
    holds the port (an orphaned SuperLink of an earlier run), and the run would go there.
    The SuperLink runs under `thinwire.runtimes.flower.superlink`, a supervisor armed with a
    parent-death signal: it stops the SuperLink and everything the SuperLink started (the
    SuperExec, the ServerApp) when the block ends, and also when this process is SIGKILLed.
    """
    import subprocess
    import time
    import urllib.error
    import urllib.request

    from thinwire.runtimes.flower.deploy import (
        die_with_parent,
        flower_environment,
        superlink_command,
    )

    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    problem = _port_taken(host, int(port))
    if problem is not None:
        fail(
            f"--start-superlink: cannot listen at {address} ({problem}); another SuperLink "
            "(perhaps one left by a killed run) or another program holds the port. Stop it, "
            "or pick a free port with --superlink HOST:PORT"
        )
    command = superlink_command(host=host, port=int(port))
    supervised = [sys.executable, "-m", "thinwire.runtimes.flower.superlink", *command]
    process = subprocess.Popen(
        supervised, env=flower_environment(), start_new_session=True, preexec_fn=die_with_parent
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://{address}/health", timeout=2):
                    pass
                if process.poll() is None:
                    break
            except (urllib.error.URLError, OSError):
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                fail(f"the SuperLink did not come up at {address}: {' '.join(command)}")
            time.sleep(0.2)
        errors.print(f"SuperLink started at {address} (pid {process.pid})", highlight=False)
        yield
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()


def _port_taken(host: str, port: int) -> str | None:
    """Why `host:port` cannot be listened on, or None if it can."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers bind
        try:
            probe.bind((host, port))
        except OSError as exc:
            return exc.strerror or str(exc)
    return None


def _submit(app_dir: Path, flwr_home: Path, runtime: FlowerRuntime) -> str:
    """Runs `flwr run --stream`, echoing its output; returns the run's final status."""
    import re
    import subprocess

    from thinwire.runtimes.flower.deploy import (
        CONNECTION,
        die_with_parent,
        flower_environment,
        write_connection,
    )

    ca = runtime.root_certificates
    write_connection(
        flwr_home,
        address=runtime.superlink,
        insecure=runtime.insecure,
        root_certificates=ca.resolve() if ca is not None else None,
    )
    env = {**flower_environment(), "FLWR_HOME": str(flwr_home)}
    run_id = None
    process = subprocess.Popen(
        ["flwr", "run", str(app_dir), CONNECTION, "--stream"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=die_with_parent,
    )
    if process.stdout is None:  # stdout=PIPE always gives one
        raise RuntimeError("flwr run started without an output pipe")
    try:
        for line in process.stdout:
            sys.stdout.write(line)
            started = re.search(r"Successfully started run (\d+)", line)
            run_id = started.group(1) if started and run_id is None else run_id
        process.wait()
    except KeyboardInterrupt:
        process.terminate()
        if run_id is not None:
            errors.print(f"stopping run {run_id}", highlight=False)
            subprocess.run(["flwr", "stop", run_id, CONNECTION], env=env, check=False)
        raise typer.Exit(130) from None
    if run_id is None:
        fail(f"`flwr run` did not start a run (exit code {process.returncode})", 1)
    listing = subprocess.run(
        ["flwr", "ls", CONNECTION, "--run-id", run_id, "--format", "json"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        runs = json.loads(listing.stdout)["runs"]
        return str(runs[0]["status"])
    except (ValueError, KeyError, IndexError):
        return f"unknown (flwr ls: {listing.stdout.strip() or listing.stderr.strip()})"


def _report_flower_run(experiment: Experiment, run_dir: Path, status: str) -> None:
    from thinwire.metrics import load_records, summarize

    if not (run_dir / "metrics.jsonl").is_file():
        if status != "finished:completed":
            fail(f"the run ended as {status} before writing {run_dir}; see its log above", 1)
        console.print(f"run {status}; its folder is on the ServerApp's host: {run_dir}")
        return
    records = load_records(run_dir)
    if records:
        console.print(run_table(f"{experiment.name} ({run_dir})", summarize(records)))
    if status != "finished:completed":
        fail(f"the run ended as {status} after {len(records)} round(s); see its log above", 1)


@app.command()
def client(
    superlink: Annotated[str, typer.Option("--superlink", help="SuperLink host:port.")],
    partition: Annotated[
        int, typer.Option("--partition", min=0, help="The client index this host trains as.")
    ],
    num_partitions: Annotated[
        int | None,
        typer.Option(
            "--num-partitions",
            min=1,
            help="Number of clients; checked against the experiment's data.clients.",
        ),
    ] = None,
    port: Annotated[
        int,
        typer.Option(help="This SuperNode's Runtime API port (distinct per SuperNode on a host)."),
    ] = 9094,
    insecure: InsecureOpt = False,
    root_certificates: RootCertificatesOpt = None,
    state_dir: Annotated[
        Path | None,
        typer.Option(
            "--state-dir",
            help="Node-local folder for the client's state between rounds (residuals, model "
            "copy), kept across runs and restarts [default: $FLWR_HOME/thinwire-state, "
            "FLWR_HOME defaulting to ~/.flwr].",
            file_okay=False,
        ),
    ] = None,
    allow_plugin: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-plugin",
            help="A plugin module a run's `plugins:` list may make this node import "
            "(repeat for several); installed thinwire.plugins entry points are always allowed.",
        ),
    ] = None,
    fresh_process: Annotated[
        bool,
        typer.Option(
            "--fresh-process",
            help="Run every message in a fresh flwr-clientapp process (Flower's default), "
            "which frees the model's memory between messages, instead of one long-lived "
            "process that keeps the client and its state between rounds.",
        ),
    ] = False,
) -> None:
    """Start a Flower SuperNode that trains as one client (run one per client host).

    Runs `flower-supernode --superlink HOST:PORT --node-config "partition-id=I ..."` with
    Flower's telemetry and update check off, and starts a fresh one whenever the SuperLink
    has restarted and no longer knows it (so clients outlive a server restart). Beside it
    one long-lived process runs every message (unless --fresh-process), keeping the imports,
    the client and its state between rounds instead of starting anew per message. Every run's
    experiment arrives with the run; training uses CUDA when the experiment says
    `device: auto` and this host has a GPU.
    Without --insecure the connection uses TLS, trusting --root-certificates or the system.
    The client's state between rounds lives in --state-dir, keyed by experiment and
    partition, so a resumed run or a restarted SuperNode continues from it.
    """
    import logging
    import shutil

    from thinwire.runtimes.flower.deploy import (
        clientapp_executor_command,
        flower_environment,
        supernode_command,
    )
    from thinwire.runtimes.flower.messages import default_state_dir
    from thinwire.runtimes.flower.supernode import Supervisor

    if insecure and root_certificates is not None:
        fail("pass either --insecure or --root-certificates, not both")
    state_dir = (state_dir or default_state_dir()).resolve()
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        fail(f"cannot create the state folder {state_dir}: {exc}")
    try:
        command = supernode_command(
            superlink=superlink,
            partition=partition,
            partitions=num_partitions,
            port=port,
            insecure=insecure,
            root_certificates=root_certificates,
            state_dir=state_dir,
            plugins=allow_plugin or (),
            isolation="subprocess" if fresh_process else "process",
        )
    except ValueError as exc:
        fail(str(exc))
    companion = None if fresh_process else clientapp_executor_command(port)
    if shutil.which(command[0]) is None:
        fail(f"{command[0]} is not on PATH; install thinwire's dependencies (flwr)")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    code = Supervisor(command, flower_environment(), companion=companion).run()
    raise typer.Exit(code)
