"""benchmarks/seeds.py: a table of row functions, each measuring one paper's claim."""

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "seeds.py"


@pytest.fixture(scope="module")
def seeds():
    spec = importlib.util.spec_from_file_location("seeds_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_row_has_a_unique_name_and_states_its_criterion(seeds):
    names = [entry.name for entry in seeds.ROWS]
    assert len(names) == len(set(names))
    assert all("here:" in entry.claim for entry in seeds.ROWS)


@pytest.mark.slow
def test_quick_rows_measure_and_print_as_markdown(seeds):
    results = seeds.run_rows(["qsgd-variance", "random-block-unbiased"], quick=True)
    assert [entry.name for entry, _, _ in results] == ["qsgd-variance", "random-block-unbiased"]
    assert all(result.holds for _, result, _ in results)
    lines = seeds.markdown(results).splitlines()
    assert len(lines) == 4 and lines[2].startswith("| QSGD |") and lines[2].endswith("| yes |")
