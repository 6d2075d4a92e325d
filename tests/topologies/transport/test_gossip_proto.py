"""The committed generated modules match gossip.proto."""

from __future__ import annotations

from pathlib import Path

import pytest

import thinwire.topologies.transport

pytest.importorskip("grpc_tools")

from thinwire.wire import _codegen  # noqa: E402

PROTO = Path(thinwire.topologies.transport.__file__).parent / "gossip.proto"


def test_generated_modules_are_up_to_date():
    generated = _codegen.generate(PROTO)
    assert set(generated) == {"gossip_pb2.py", "gossip_pb2.pyi", "gossip_pb2_grpc.py"}
    for name, text in generated.items():
        committed = PROTO.parent / name
        assert committed.read_text() == text, (
            f"{name} is stale: run python -m thinwire.wire._codegen"
        )


def test_every_rpc_message_and_field_is_commented():
    lines = PROTO.read_text().splitlines()
    for index, line in enumerate(lines):
        code = line.split("//")[0].strip()
        declares = code.startswith(("rpc ", "message ", "service ", "enum "))
        field = "=" in code and code.endswith(";") and not code.startswith(("syntax", "package"))
        if declares:
            assert lines[index - 1].strip().startswith("//"), f"line {index + 1}: {line}"
        if field and not code.endswith("= 0;"):
            assert "//" in line or lines[index - 1].strip().startswith("//"), (
                f"line {index + 1} has no comment: {line}"
            )
