"""Real Flower processes on 127.0.0.1 for the end-to-end tests, each one always stopped.

`service_commands` is the single description of what every service of
`docker-compose.yml` runs; the compose drift test checks the compose file against it, and
`Cluster` runs the very same commands as plain processes on free loopback ports.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

from thinwire.runtimes.flower.deploy import (
    CLIENT_APP,
    flower_environment,
    superexec_command,
    superlink_command,
    supernode_command,
)

EXAMPLE = "examples/flower.yaml"
ROOT = Path(__file__).resolve().parents[2]


def service_commands(
    *,
    host: str,
    superlink: str,
    node_ports: list[int],
    state_dir: Path,
    config: str = EXAMPLE,
    certificates: Path | None = None,
) -> dict[str, list[str]]:
    """The command of every compose service, for a SuperLink at `superlink`.

    Args:
        host: the interface the SuperLink binds.
        superlink: the address SuperNodes and the submitter use to reach it.
        node_ports: each SuperNode's Runtime API port (one SuperNode per client).
        state_dir: the SuperNodes' client-state folder (one per container in compose; on
            one host they share it, each client keeping its own subfolder).
        config: the experiment file the one-shot service submits.
        certificates: the folder of `docker/make-certs.sh` files for TLS; None for plain HTTP.
    """
    port = int(superlink.rpartition(":")[2])
    ca = certificates / "ca.crt" if certificates else None
    trust = ["--root-certificates", str(ca)] if ca else ["--insecure"]
    commands = {
        "superlink": superlink_command(
            host=host,
            port=port,
            isolation="process",
            certificates=(
                (ca, certificates / "superlink.crt", certificates / "superlink.key")
                if certificates and ca
                else None
            ),
        ),
        "superexec-serverapp": superexec_command(
            superlink, insecure=ca is None, root_certificates=ca
        ),
    }
    for i, node_port in enumerate(node_ports):
        commands[f"supernode-{i}"] = client_command(
            superlink, i, len(node_ports), node_port, ca, state_dir
        )
    submit = ["thinwire", "server", config, "--superlink", superlink]
    commands["submit"] = submit + (trust if ca else [])
    return commands


def client_command(
    superlink: str,
    partition: int | str,
    partitions: int | str,
    port: int,
    ca: Path | None,
    state_dir: Path,
) -> list[str]:
    """`thinwire client` for one SuperNode (TLS trusting `ca`, or plain HTTP without it)."""
    trust = ["--root-certificates", str(ca)] if ca else ["--insecure"]
    return [
        "thinwire",
        "client",
        "--superlink",
        superlink,
        "--partition",
        str(partition),
        "--num-partitions",
        str(partitions),
        "--port",
        str(port),
        *trust,
        "--state-dir",
        str(state_dir),
    ]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def write_console_scripts(folder: Path) -> Path:
    """Console scripts of Flower and thinwire that run under this interpreter.

    Flower's daemons start `flower-superexec`, `flwr-serverapp` and `flwr-clientapp` by
    name; with these first on PATH, every one of them imports this checkout's thinwire.
    """
    folder.mkdir(parents=True, exist_ok=True)
    for distribution in ("flwr", "thinwire"):
        for entry in metadata.distribution(distribution).entry_points:
            if entry.group != "console_scripts":
                continue
            module, _, attribute = entry.value.partition(":")
            script = folder / entry.name
            script.write_text(
                f"#!{sys.executable}\n"
                "import importlib, sys\n"
                f"target = importlib.import_module({module!r})\n"
                f"for name in {attribute!r}.split('.'):\n"
                "    target = getattr(target, name)\n"
                "sys.exit(target())\n"
            )
            script.chmod(0o755)
    return folder


class Cluster:
    """Processes started for one test, each in its own process group, logged to files."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.logs = root / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        bin_dir = write_console_scripts(root / "bin")
        self.env = flower_environment(
            {
                **os.environ,
                "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
                "FLWR_HOME": str(root / "flwr_home"),
                # One thread per process: 8 Flower processes share the machine's cores.
                "OMP_NUM_THREADS": "1",
                "PYTHONUNBUFFERED": "1",
            }
        )
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, command: list[str]) -> subprocess.Popen[bytes]:
        """Starts `command` as service `name` (stdout and stderr to logs/<name>.log)."""
        log = (self.logs / f"{name}.log").open("wb")
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        self.processes[name] = process
        return process

    def log(self, name: str) -> str:
        """What service `name` has written so far."""
        return (self.logs / f"{name}.log").read_text(errors="replace")

    def kill(self, name: str) -> None:
        """Kills service `name` and everything it started, at once (a host that dies)."""
        _kill_tree(self.processes[name].pid, signal.SIGKILL)
        self.processes[name].wait(timeout=30)

    def wait_healthy(self, port: int, *, ca: Path | None = None, timeout_s: float = 60.0) -> None:
        """Waits until the server on `port` answers /health (over TLS trusting `ca`, if given)."""
        deadline = time.monotonic() + timeout_s
        url = f"https://localhost:{port}/health" if ca else f"http://127.0.0.1:{port}/health"
        context = ssl.create_default_context(cafile=str(ca)) if ca else None
        while True:
            try:
                with urllib.request.urlopen(url, timeout=2, context=context):
                    return
            except (urllib.error.URLError, OSError):
                dead = [n for n, p in self.processes.items() if p.poll() is not None]
                if dead or time.monotonic() > deadline:
                    logs = "\n".join(f"--- {n}\n{self.log(n)[-3000:]}" for n in self.processes)
                    raise RuntimeError(
                        f"no /health on port {port} (exited: {dead})\n{logs}"
                    ) from None
                time.sleep(0.2)

    def stop(self) -> None:
        """Stops every process started, gently first, and all they started.

        Raises:
            AssertionError: if any of them is still alive afterwards.
        """
        for process in self.processes.values():
            if process.poll() is None:
                _kill_tree(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for process in self.processes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
        for process in self.processes.values():
            _kill_tree(process.pid, signal.SIGKILL)
            if process.poll() is None:
                process.wait(timeout=10)
        survivors = [pid for pid, cmdline in _processes() if str(self.root) in cmdline]
        assert not survivors, f"processes of {self.root} survived: {survivors}"


def _children(pid: int) -> Iterator[int]:
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            yield int(stat.parent.name)


def _processes() -> Iterator[tuple[int, str]]:
    """(pid, command line) of every live process (zombies have an empty command line)."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text:
            yield int(cmdline.parent.name), text


def _kill_tree(pid: int, sig: signal.Signals) -> None:
    # The process group holds the service and its SuperExec and app processes; walking
    # /proc also catches any that started a session of their own.
    tree = [pid]
    index = 0
    while index < len(tree):
        tree.extend(_children(tree[index]))
        index += 1
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
    for member in tree:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(member, sig)


def write_app_with_client(
    cluster: Cluster,
    app: Path,
    overrides: list[str],
    *,
    module: str,
    source: str,
    extra: tuple[Path, ...] = (),
) -> None:
    """Writes the example's Flower app to `app`, its ClientApp replaced by `module:app`.

    `source` is the module's text; `extra` files are copied beside it (its imports).
    """
    written = subprocess.run(
        ["thinwire", "server", EXAMPLE, "--write-app", str(app)]
        + [arg for override in overrides for arg in ("--set", override)],
        cwd=ROOT,
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert written.returncode == 0, written.stderr
    pyproject = app / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace(CLIENT_APP, f"{module}:app"))
    (app / f"{module}.py").write_text(source)
    for path in extra:
        (app / path.name).write_bytes(path.read_bytes())


def start_local_federation(cluster: Cluster, port: int, *, clients: int = 3) -> None:
    """An insecure SuperLink on `port`, `clients` SuperNodes, and FLWR_HOME's `local` link."""
    home = Path(cluster.env["FLWR_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "local"\n\n[superlink.local]\n'
        f'address = "127.0.0.1:{port}"\ninsecure = true\n'
    )
    cluster.start("superlink", superlink_command(port=port))
    for i in range(clients):
        command = supernode_command(
            superlink=f"127.0.0.1:{port}",
            partition=i,
            partitions=clients,
            port=free_port(),
            insecure=True,
        )
        cluster.start(f"supernode-{i}", command)
    cluster.wait_healthy(port)


def start_clients(cluster: Cluster, superlink: str, state_dir: Path, *, clients: int = 3) -> None:
    """`clients` plain-HTTP `thinwire client` SuperNodes keeping state under `state_dir`."""
    for i in range(clients):
        command = client_command(superlink, i, clients, free_port(), None, state_dir)
        cluster.start(f"supernode-{i}", command)


def run_server(
    cluster: Cluster, superlink: str, overrides: list[str], *, timeout_s: float
) -> subprocess.CompletedProcess[str]:
    """`thinwire server --start-superlink` of the example with `overrides`, to its end."""
    server = ["thinwire", "server", EXAMPLE, "--superlink", superlink, "--insecure"]
    sets = [arg for override in overrides for arg in ("--set", override)]
    return subprocess.run(
        [*server, "--start-superlink", *sets],
        cwd=ROOT,
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
