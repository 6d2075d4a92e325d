"""Generates the committed protobuf (and gRPC) modules from thinwire's `.proto` files.

Run `python -m thinwire.wire._codegen` after editing a `.proto`; the test suite regenerates
into a temporary folder and fails when the committed modules have drifted. Needs the
`grpcio-tools` package (a test extra), which the library itself never imports.
"""

from __future__ import annotations

import shutil
import tempfile
from importlib.util import find_spec
from pathlib import Path

PACKAGES = ("thinwire.wire", "thinwire.topologies.transport")  # roles live outside platform/
"""The packages whose folders hold `.proto` files."""


def proto_files() -> dict[Path, str]:
    """Every `.proto` file thinwire owns, mapped to its path inside the import package.

    The packages are found, not imported: importing one loads its generated modules, which
    must not have to work for them to be regenerated.
    """
    found: dict[Path, str] = {}
    for package in PACKAGES:
        spec = find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise RuntimeError(f"package {package} is not installed")
        folder = Path(next(iter(spec.submodule_search_locations)))
        for proto in sorted(folder.glob("*.proto")):
            found[proto] = "/".join([*package.split("."), proto.name])
    return found


def generate(proto: Path) -> dict[str, str]:
    """Compiles one `.proto` and returns the generated files' names and texts.

    Messages give `<name>_pb2.py` and `<name>_pb2.pyi`; a file that declares a `service`
    also gives `<name>_pb2_grpc.py`. Protos are compiled under their package path
    (`thinwire/wire/update.proto`), so their names in protobuf's global descriptor pool
    cannot collide with another library's, and cross-file imports are absolute.
    """
    from grpc_tools import protoc

    protos = proto_files()
    with tempfile.TemporaryDirectory() as tmp:
        include, out = Path(tmp, "include"), Path(tmp, "out")
        for source, package_path in protos.items():
            (include / package_path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, include / package_path)
        out.mkdir()
        args = ["protoc", f"-I{include}", f"--python_out={out}", f"--pyi_out={out}"]
        if "\nservice " in proto.read_text():
            args.append(f"--grpc_python_out={out}")
        args.append(str(include / protos[proto]))
        if protoc.main(args) != 0:
            raise RuntimeError(f"protoc failed on {proto}")
        generated = out / Path(protos[proto]).parent
        return {p.name: p.read_text() for p in sorted(generated.iterdir())}


def main() -> None:
    """Regenerates every committed module in place."""
    for proto in proto_files():
        for name, text in generate(proto).items():
            (proto.parent / name).write_text(text)


if __name__ == "__main__":
    main()
