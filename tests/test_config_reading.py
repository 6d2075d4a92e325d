"""Reading an experiment file strictly: text encodings, duplicate keys, booleans, finite numbers.

Each refusal is one line that names the file and, where there is one, the dotted field.
"""

from pathlib import Path

import pytest

from thinwire.config import ConfigError, Section, load_config

BASE = "name: a\n"


def problems_of(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).startswith(f"{path}: ")
    return info.value.problems


def write_text(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(text)
    return path


def write_bytes(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "exp.yaml"
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ((BASE + "seed: 1\n").encode("utf-16"), "the file is UTF-16 text; save it as UTF-8"),
        ((BASE + "seed: 1\n").encode("utf-32"), "the file is UTF-32 text; save it as UTF-8"),
        (b"name: caf\xe9\n", "not UTF-8 text (byte 0xe9 at offset 9); save it as UTF-8"),
        (bytes(range(256)) * 4, "not UTF-8 text (byte 0x80 at offset 128); save it as UTF-8"),
        ((BASE + "seed: 1\n").encode("utf-16-le"), "not a text file (NUL byte at offset 1)"),
    ],
    ids=["utf-16", "utf-32", "latin-1", "binary", "utf-16-without-bom"],
)
def test_an_unreadable_file_is_one_line_naming_the_file(tmp_path, data, expected):
    assert problems_of(write_bytes(tmp_path, data)) == [expected]


def test_utf8_with_a_byte_order_mark_is_read(tmp_path):
    path = write_bytes(tmp_path, "\ufeffname: a  # café\nseed: 4\n".encode())
    experiment = load_config(path)
    assert (experiment.name, experiment.seed) == ("a", 4)


def test_a_yaml_syntax_error_is_one_line_with_its_position(tmp_path):
    [problem] = problems_of(write_text(tmp_path, "name: a\ntrain: {rounds: 3\n"))
    assert problem.startswith("line 3, column 1: not valid YAML (")
    assert "\n" not in problem


def test_a_duplicate_key_names_the_key_and_both_lines(tmp_path):
    path = write_text(tmp_path, "name: a\nseed: 1\ntrain: {rounds: 2}\nseed: 2\n")
    assert problems_of(path) == ["key 'seed' is written twice (lines 2 and 4)"]


def test_a_duplicate_key_inside_a_section_is_refused_too(tmp_path):
    text = "name: a\ntrain:\n  rounds: 2\n  lr: 0.1\n  rounds: 3\n"
    assert problems_of(write_text(tmp_path, text)) == [
        "key 'rounds' is written twice (lines 3 and 5)"
    ]


def test_equal_keys_in_different_sections_are_fine(tmp_path):
    text = "name: a\ntrain: {server: {lr: 1.0}, lr: 0.1}\n"
    assert load_config(write_text(tmp_path, text)).train.lr == 0.1


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("train: {rounds: true}", "train.rounds"),
        ("seed: false", "seed"),
        ("train: {lr: true}", "train.lr"),
        ("codec: {select: {kind: topk, density: true}}", "codec.select.density"),
        ("model: {kind: mlp, hidden: [64, true]}", "model.hidden"),
        ("channel: {uplink_mbps: true}", "channel.uplink_mbps"),
        ("data: {clients: true}", "data.clients"),
    ],
)
def test_a_boolean_is_not_a_number(tmp_path, text, field):
    [problem] = problems_of(write_text(tmp_path, f"{BASE}{text}\n"))
    assert problem.startswith(f"{field}: a boolean (true/false) is not accepted here")


def test_boolean_fields_and_numbers_keep_working(tmp_path):
    text = (
        "name: a\ntrain: {rounds: 3, lr: 1, optimizer: {kind: sgd, momentum: 0.9, "
        "nesterov: true}}\ncodec: {select: {kind: random_k, density: 1, unbiased: true}, "
        "error_feedback: true}\n"
    )
    experiment = load_config(write_text(tmp_path, text))
    assert experiment.train.rounds == 3 and experiment.train.lr == 1.0
    assert experiment.train.optimizer.nesterov is True
    assert experiment.codec.error_feedback.kind == "residual"


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("train: {lr: .inf}", "train.lr"),
        ("train: {lr: .nan}", "train.lr"),
        ("train: {server: {lr: -.inf}}", "train.server.lr"),
        ("codec: {select: {kind: threshold, lam: .inf}}", "codec.select.lam"),
        ("channel: {uplink_mbps: [1.0, .inf, 2.0]}", "channel.uplink_mbps[1]"),
        ("privacy: {noise_multiplier: .inf}", "privacy.noise_multiplier"),
        ("data: {dataset: synthetic, synthetic: {alpha: .nan}}", "data.synthetic.alpha"),
    ],
)
def test_every_float_must_be_finite(tmp_path, text, field):
    found = problems_of(write_text(tmp_path, f"{BASE}{text}\n"))
    assert f"{field}: input should be a finite number" in [p.split(",")[0] for p in found]


def _sections(cls: type[Section]) -> list[type[Section]]:
    found = [cls]
    for sub in cls.__subclasses__():
        found.extend(_sections(sub))
    return found


def test_no_section_allows_inf_or_nan():
    sections = _sections(Section)
    assert len(sections) > 50
    assert [s.__name__ for s in sections if s.model_config.get("allow_inf_nan") is not False] == []


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("codec: {transform: {kind: wavelet, wavelet: nosuch}}", "codec.transform.wavelet"),
        ("codec: {transform: {kind: wavelet, wavelet: morl}}", "codec.transform.wavelet"),
        (
            "topology: {kind: ring}\ngossip: {kind: jwins, wavelet: db99}\ndata: {clients: 4}",
            "gossip.wavelet",
        ),
    ],
    ids=["unknown", "continuous", "jwins"],
)
def test_a_wavelet_must_be_a_discrete_pywavelets_name(tmp_path, text, field):
    [problem] = problems_of(write_text(tmp_path, f"{BASE}{text}\n"))
    assert problem.startswith(f"{field}: unknown discrete wavelet;")
