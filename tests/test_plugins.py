"""The worked plugin example (examples/plugins) runs from YAML without editing thinwire."""

import os
import subprocess
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from thinwire import plugins
from thinwire.config import ConfigError, parse_config

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "examples" / "plugins"
EXPERIMENT = FOLDER / "experiment.yaml"


def thinwire(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(FOLDER), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [sys.executable, "-m", "thinwire", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_the_example_runs_with_thinwire_run(tmp_path):
    done = thinwire(
        "run",
        "-q",
        str(EXPERIMENT),
        "--set",
        "train.rounds=3",
        "--set",
        f"output={tmp_path}",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    [run] = list(tmp_path.glob("plugin-example-*"))
    config = (run / "config.yaml").read_text()
    assert "plugins:\n- thinwire_example_plugin" in config
    assert "kind: aged_topk" in config and "kind: norm_skip" in config


def test_validate_shows_the_plugin_kinds_and_errors_name_them(tmp_path):
    shown = thinwire("validate", str(EXPERIMENT), cwd=tmp_path)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "kind: aged_topk" in shown.stdout and "kind: norm_skip" in shown.stdout
    wrong = thinwire(
        "validate",
        str(EXPERIMENT),
        "--set",
        "codec.select.kind=aged_top",
        "--set",
        "policy.kind=norm_skp",
        cwd=tmp_path,
    )
    assert wrong.returncode != 0
    assert (
        "codec.select: unknown selector kind 'aged_top'; expected one of adaptive, aged_topk,"
        in wrong.stderr
    )
    assert (
        "policy: unknown policy kind 'norm_skp'; expected one of always, censor, norm_skip,"
        in wrong.stderr
    )


def test_a_missing_plugin_module_is_one_line_naming_file_field_and_module(tmp_path):
    done = thinwire(
        "validate", str(EXPERIMENT), "--set", "plugins=[thinwire_no_such_plugin]", cwd=tmp_path
    )
    assert done.returncode != 0
    module = "'thinwire_no_such_plugin'"
    problem = f"{EXPERIMENT}: plugins[0]: cannot import plugin module {module}: no such module"
    assert problem in done.stderr, done.stderr


def test_without_the_plugin_its_kinds_are_unknown():
    with pytest.raises(
        ConfigError, match="unknown selector kind 'aged_topk'; expected one of adaptive, none,"
    ):
        parse_config({"name": "t", "codec": {"select": {"kind": "aged_topk", "density": 0.1}}})


def test_entry_points_load_once_before_the_first_validation(monkeypatch):
    loaded = []
    point = EntryPoint("example", "json", plugins.ENTRY_POINT_GROUP)
    monkeypatch.setattr(plugins, "_entry_points_loaded", False)
    monkeypatch.setattr(
        plugins.importlib.metadata,
        "entry_points",
        lambda group: loaded.append(group) or [point],
    )
    parse_config({"name": "t"})
    assert loaded == [plugins.ENTRY_POINT_GROUP]
    parse_config({"name": "t", "codec": {"select": {"kind": "topk", "density": 0.1}}})
    assert loaded == [plugins.ENTRY_POINT_GROUP]


def test_a_failing_entry_point_names_itself(monkeypatch):
    point = EntryPoint("broken", "thinwire_no_such_plugin", plugins.ENTRY_POINT_GROUP)
    monkeypatch.setattr(plugins, "_entry_points_loaded", False)
    monkeypatch.setattr(plugins.importlib.metadata, "entry_points", lambda group: [point])
    with pytest.raises(plugins.PluginError, match="entry point 'broken'"):
        plugins.load_entry_points()


def test_a_node_imports_only_the_plugins_its_operator_allowed(monkeypatch):
    monkeypatch.setattr(plugins, "_entry_point_modules", lambda: frozenset({"json"}))
    monkeypatch.delitem(sys.modules, "thinwire_example_plugin", raising=False)
    with plugins.allowing(["csv"]):
        with pytest.raises(ConfigError, match=r"plugins\[1\]: .*--allow-plugin colorsys"):
            parse_config({"name": "t", "plugins": ["csv", "colorsys"]})
        parse_config({"name": "t", "plugins": ["csv", "json"]})  # allowed, and an entry point
    with plugins.allowing([]), pytest.raises(ConfigError, match="does not allow it"):
        parse_config({"name": "t", "plugins": ["thinwire_example_plugin"]})
    assert "thinwire_example_plugin" not in sys.modules  # refused before any import


def test_outside_allowing_any_importable_module_may_be_named():
    parse_config({"name": "t", "plugins": ["colorsys"]})
