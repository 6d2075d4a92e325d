"""Deployment artefacts and the `thinwire server` / `thinwire client` wrappers around them."""

from __future__ import annotations

import json
import os
import socket
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from flwr.common.config import parse_config_args
from typer.testing import CliRunner

from thinwire.cli import app as cli
from thinwire.config import FlowerRuntime, load_config, parse_config
from thinwire.runtimes.flower.deploy import (
    CLIENT_APP,
    SERVER_APP,
    clientapp_executor_command,
    flower_environment,
    superexec_command,
    superlink_command,
    supernode_command,
    write_app,
    write_connection,
)
from thinwire.runtimes.flower.messages import read_run_config
from thinwire.runtimes.flower.supernode import Supervisor

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "flower.yaml"
runner = CliRunner()


def test_the_superlink_runs_without_dependency_installation() -> None:
    command = superlink_command(host="0.0.0.0", port=8000, isolation="process")
    assert command == [
        "flower-superlink",
        "--insecure",
        "--isolation",
        "process",
        "--disable-runtime-dependency-installation",
        "--host",
        "0.0.0.0",
        "--port",
        "8000",
    ]
    tls = superlink_command(certificates=(Path("ca"), Path("crt"), Path("key")))
    assert tls[1:7] == ["--ssl-ca-certfile", "ca", "--ssl-certfile", "crt", "--ssl-keyfile", "key"]
    with pytest.raises(ValueError, match="isolation"):
        superlink_command(isolation="thread")


def test_a_supernode_serves_one_partition() -> None:
    command = supernode_command(superlink="h:8000", partition=1, partitions=3, insecure=True)
    assert command == [
        "flower-supernode",
        "--insecure",
        "--superlink",
        "h:8000",
        "--isolation",
        "subprocess",
        "--port",
        "9094",
        "--node-config",
        "partition-id=1 num-partitions=3",
    ]
    served = supernode_command(superlink="h:8000", partition=1, isolation="process", port=9100)
    assert served[served.index("--isolation") + 1] == "process"
    assert clientapp_executor_command(9100)[1:] == [
        "-m",
        "thinwire.runtimes.flower.clientapp_executor",
        "--runtime-api-address",
        "127.0.0.1:9100",
    ]
    with pytest.raises(ValueError, match="isolation"):
        supernode_command(superlink="h:8000", partition=1, isolation="thread")
    kept = supernode_command(superlink="h:8000", partition=1, state_dir=Path("/var/tw state"))
    assert kept[-1] == 'partition-id=1 state-dir="/var/tw state"'
    assert parse_config_args([kept[-1]]) == {"partition-id": 1, "state-dir": "/var/tw state"}
    with pytest.raises(ValueError, match="without"):
        supernode_command(superlink="h:8000", partition=1, state_dir=Path('/a"b'))
    tls = supernode_command(superlink="h:8000", partition=0, root_certificates=Path("ca.crt"))
    assert tls[1:3] == ["--root-certificates", "ca.crt"]
    assert tls[-1] == "partition-id=0"
    with pytest.raises(ValueError, match="not in"):
        supernode_command(superlink="h:8000", partition=3, partitions=3)
    allowed = supernode_command(superlink="h:8000", partition=0, plugins=["a.b", "c"])
    assert parse_config_args([allowed[-1]]) == {"partition-id": 0, "allow-plugins": "a.b,c"}
    with pytest.raises(ValueError, match="dotted module name"):
        supernode_command(superlink="h:8000", partition=0, plugins=["a;b"])
    with pytest.raises(ValueError, match="not both"):
        superexec_command("h:8000", insecure=True, root_certificates=Path("ca.crt"))


def test_daemons_run_with_telemetry_and_update_checks_off() -> None:
    env = flower_environment({"PATH": "/bin", "FLWR_TELEMETRY_ENABLED": "1"})
    assert env["PATH"] == "/bin"
    assert env["FLWR_TELEMETRY_ENABLED"] == "0"
    assert env["FLWR_DISABLE_UPDATE_CHECK"] == "1"


def test_the_app_folder_carries_the_experiment_in_its_run_config(tmp_path: Path) -> None:
    experiment = parse_config(
        {"name": "x", "output": str(tmp_path / 'it\'s "odd" \\ ünï'), "runtime": {"kind": "flower"}}
    )
    path = write_app(tmp_path / "app", experiment=experiment, run_dir="/r/x", resume="/c.pt")
    toml = tomllib.loads(path.read_text())
    assert toml["tool"]["flwr"]["app"]["components"] == {
        "serverapp": SERVER_APP,
        "clientapp": CLIENT_APP,
    }
    settings = read_run_config(toml["tool"]["flwr"]["app"]["config"])
    assert settings.experiment == experiment
    assert (settings.run_dir, settings.resume) == ("/r/x", "/c.pt")
    assert toml["project"]["name"] and toml["tool"]["flwr"]["app"]["publisher"] == "thinwire"


def test_a_connection_names_the_superlink_and_how_to_trust_it(tmp_path: Path) -> None:
    plain = write_connection(tmp_path / "a", address="h:8000", insecure=True)
    config = tomllib.loads(plain.read_text())["superlink"]
    assert config["default"] == "thinwire"
    assert config["thinwire"] == {"address": "h:8000", "insecure": True}
    tls = write_connection(
        tmp_path / "b", address="h:8000", insecure=False, root_certificates=Path("/ca.crt")
    )
    assert tomllib.loads(tls.read_text())["superlink"]["thinwire"]["root-certificates"] == "/ca.crt"


# --------------------------------------------------------------------------- thinwire server


def test_server_writes_an_app_folder_for_flwr_run(tmp_path: Path) -> None:
    result = runner.invoke(
        cli, ["server", str(EXAMPLE), "--set", "train.rounds=7", "--write-app", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    assert "flwr run" in result.output
    config = tomllib.loads((tmp_path / "pyproject.toml").read_text())["tool"]["flwr"]["app"]
    settings = read_run_config(config["config"])
    assert settings.experiment == load_config(EXAMPLE, ["train.rounds=7"])
    assert settings.run_dir == ""


@pytest.mark.parametrize("address", ["10.0.0.1:9000", "[::1]:9000", "host-10:20"])
def test_server_runs_a_simulation_config_on_flower(tmp_path: Path, address: str) -> None:
    quickstart = ROOT / "examples" / "quickstart.yaml"
    result = runner.invoke(
        cli,
        ["server", str(quickstart), "--superlink", address, "--insecure"]
        + ["--write-app", str(tmp_path)],
    )
    assert result.exit_code == 0, result.output
    config = tomllib.loads((tmp_path / "pyproject.toml").read_text())["tool"]["flwr"]["app"]
    runtime = read_run_config(config["config"]).experiment.runtime
    assert runtime == FlowerRuntime(superlink=address, insecure=True)


def test_server_refuses_a_gossip_config(tmp_path: Path) -> None:
    gossip = tmp_path / "gossip.yaml"
    gossip.write_text(
        yaml.safe_dump(
            {
                "name": "g",
                "runtime": {
                    "kind": "gossip",
                    "run_id": "r",
                    "pattern": "p-{i}:1",
                    "insecure": True,
                },
            }
        )
    )
    result = runner.invoke(cli, ["server", str(gossip)])
    assert result.exit_code == 2
    assert "runtime.kind is 'gossip'" in result.output


def test_server_refuses_a_superlink_it_cannot_start_and_a_missing_checkpoint(
    tmp_path: Path,
) -> None:
    tls = runner.invoke(
        cli, ["server", str(EXAMPLE), "--set", "runtime.insecure=false", "--start-superlink"]
    )
    assert tls.exit_code == 2 and "--start-superlink starts a plain-HTTP SuperLink" in tls.output
    missing = runner.invoke(cli, ["server", str(EXAMPLE), "--resume", str(tmp_path / "none")])
    assert missing.exit_code == 2 and "no checkpoint at" in missing.output


def test_server_refuses_to_start_a_superlink_on_a_port_already_taken(tmp_path: Path) -> None:
    with socket.socket() as holder:  # an orphaned SuperLink, say
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        address = f"127.0.0.1:{holder.getsockname()[1]}"
        result = runner.invoke(
            cli,
            ["server", str(EXAMPLE), "--start-superlink", "--insecure", "--superlink", address]
            + ["--set", f"output={tmp_path}"],
        )
    assert result.exit_code == 2
    assert f"--start-superlink: cannot listen at {address}" in " ".join(result.output.split())
    assert not list(tmp_path.iterdir())  # nothing was submitted, no run folder made


def fake_flwr(folder: Path, status: str) -> Path:
    """A `flwr` that starts run 42 with `run` and reports `status` with `ls`.

    It records its arguments, the app's pyproject.toml and the connection file in $CAPTURE.
    """
    folder.mkdir()
    script = folder / "flwr"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, os, shutil, sys\n"
        "capture = os.environ['CAPTURE']\n"
        "with open(os.path.join(capture, 'calls.jsonl'), 'a') as f:\n"
        "    f.write(json.dumps(sys.argv[1:]) + '\\n')\n"
        "if sys.argv[1] == 'run':\n"
        "    shutil.copy(os.path.join(sys.argv[2], 'pyproject.toml'), capture)\n"
        "    shutil.copy(os.path.join(os.environ['FLWR_HOME'], 'config.toml'), capture)\n"
        "    print('Successfully started run 42')\n"
        "    print('INFO thinwire.runtimes.flower.rounds: round 1/1')\n"
        "elif sys.argv[1] == 'ls':\n"
        f"    print(json.dumps({{'success': True, 'runs': [{{'status': {status!r}}}]}}))\n"
    )
    script.chmod(0o755)
    return folder


@pytest.mark.parametrize(("status", "code"), [("finished:completed", 0), ("finished:failed", 1)])
def test_server_submits_with_flwr_run_and_reports_the_runs_status(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, status: str, code: int
) -> None:
    bin_dir = fake_flwr(tmp_path / "bin", status)
    capture = tmp_path / "capture"
    capture.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("CAPTURE", str(capture))
    result = runner.invoke(cli, ["server", str(EXAMPLE), "--set", f"output={tmp_path}/runs"])
    assert result.exit_code == code, result.output
    run, ls = [json.loads(line) for line in (capture / "calls.jsonl").open()]
    assert run[0] == "run" and run[2:] == ["thinwire", "--stream"]
    assert ls == ["ls", "thinwire", "--run-id", "42", "--format", "json"]
    connection = tomllib.loads((capture / "config.toml").read_text())["superlink"]["thinwire"]
    assert connection == {"address": "127.0.0.1:8000", "insecure": True}
    config = tomllib.loads((capture / "pyproject.toml").read_text())["tool"]["flwr"]["app"]
    assert read_run_config(config["config"]).run_dir.startswith(f"{tmp_path}/runs/flower-star-")
    assert "round 1/1" in result.output  # the streamed log is passed through
    if code:
        assert "the run ended as finished:failed" in result.output


# --------------------------------------------------------------------------- thinwire client


def test_client_execs_a_supernode_for_its_partition(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls: list[tuple[list[str], dict[str, str]]] = []

    def supervise(self: Supervisor) -> int:
        calls.append((self.command, self.env, self.companion))
        return 0

    monkeypatch.setattr("shutil.which", lambda name: f"/opt/bin/{name}")
    monkeypatch.setattr(Supervisor, "run", supervise)
    result = runner.invoke(
        cli,
        ["client", "--superlink", "server:8000", "--partition", "2", "--num-partitions", "3"]
        + ["--port", "9100", "--insecure"],
    )
    assert result.exit_code == 0, result.output
    ((argv, env, companion),) = calls
    state_dir = (tmp_path / "flwr_home" / "thinwire-state").resolve()  # the default
    assert argv == supernode_command(
        superlink="server:8000",
        partition=2,
        partitions=3,
        port=9100,
        insecure=True,
        state_dir=state_dir,
        isolation="process",
    )
    assert companion == clientapp_executor_command(9100)  # it serves the SuperNode's messages
    assert state_dir.is_dir()
    fresh = runner.invoke(
        cli, ["client", "--superlink", "s:1", "--partition", "0", "--insecure", "--fresh-process"]
    )
    assert fresh.exit_code == 0, fresh.output
    assert calls[-1][0][4:6] == ["--isolation", "subprocess"] and calls[-1][2] is None
    chosen = runner.invoke(
        cli,
        ["client", "--superlink", "s:1", "--partition", "0", "--insecure"]
        + ["--state-dir", str(tmp_path / "mine")],
    )
    assert chosen.exit_code == 0, chosen.output
    assert calls[-1][0][-1] == f'partition-id=0 state-dir="{tmp_path / "mine"}"'

    assert env["FLWR_TELEMETRY_ENABLED"] == "0" and env["FLWR_DISABLE_UPDATE_CHECK"] == "1"


def test_client_refuses_contradictory_or_impossible_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Supervisor, "run", lambda self: pytest.fail("must not start"))
    ca = tmp_path / "ca.crt"
    ca.write_text("pem")
    both = runner.invoke(
        cli,
        ["client", "--superlink", "s:1", "--partition", "0", "--insecure"]
        + ["--root-certificates", str(ca)],
    )
    assert both.exit_code == 2 and "not both" in both.output
    out_of_range = runner.invoke(
        cli, ["client", "--superlink", "s:1", "--partition", "3", "--num-partitions", "3"]
    )
    assert out_of_range.exit_code == 2 and "not in [0, 3)" in out_of_range.output
