"""The committed update_pb2 modules are exactly what update.proto compiles to."""

import ast
import tempfile
from pathlib import Path

from grpc_tools import protoc

from thinwire.wire import _codegen
from thinwire.wire import update_pb2 as pb

PROTO = Path(pb.__file__).with_name("update.proto")


def serialized_descriptor(module_source: str) -> bytes:
    """The file descriptor a generated `_pb2.py` registers (its version header aside)."""
    for node in ast.walk(ast.parse(module_source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "AddSerializedFile"
        ):
            return ast.literal_eval(node.args[0])
    raise AssertionError("no AddSerializedFile call in the generated module")


def test_committed_module_matches_the_proto():
    generated = _codegen.generate(PROTO)
    assert serialized_descriptor(generated["update_pb2.py"]) == pb.DESCRIPTOR.serialized_pb, (
        "update_pb2.py is stale: run `python -m thinwire.wire._codegen`"
    )


def test_committed_stub_matches_the_proto():
    generated = _codegen.generate(PROTO)
    assert generated["update_pb2.pyi"] == PROTO.with_name("update_pb2.pyi").read_text(), (
        "update_pb2.pyi is stale: run `python -m thinwire.wire._codegen`"
    )


def test_the_descriptor_check_notices_drift():
    source = PROTO.read_text().replace("uint64 round = 3;", "uint64 round = 9;")
    changed = _compile_text(source)
    assert serialized_descriptor(changed) != pb.DESCRIPTOR.serialized_pb


def _compile_text(source: str) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp, "thinwire", "wire")
        folder.mkdir(parents=True)
        (folder / "update.proto").write_text(source)
        assert (
            protoc.main(["protoc", f"-I{tmp}", f"--python_out={tmp}", str(folder / "update.proto")])
            == 0
        )
        return (folder / "update_pb2.py").read_text()
