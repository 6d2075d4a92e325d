"""Reading an experiment file strictly: UTF-8 text, valid YAML, no key written twice.

PyYAML's `safe_load` lets the last of two equal keys win without a word, so a `seed:`
written twice silently runs the second; and a binary or UTF-16 file surfaces as a
`UnicodeDecodeError` traceback. Here both are a `ConfigError` of one line that names the
file (and, for a duplicate, the key and both lines).
"""

from __future__ import annotations

import codecs
from pathlib import Path
from typing import Any

import yaml

from thinwire.config._base import ConfigError

__all__ = ["read_yaml"]

_BOMS = {
    codecs.BOM_UTF32_LE: "UTF-32",
    codecs.BOM_UTF32_BE: "UTF-32",
    codecs.BOM_UTF16_LE: "UTF-16",
    codecs.BOM_UTF16_BE: "UTF-16",
}


class _DuplicateKey(yaml.YAMLError):
    def __init__(self, key: Any, first: int, second: int) -> None:
        super().__init__(f"key {key!r} is written twice (lines {first} and {second})")


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key written twice in one mapping."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: the base class reports it
                continue
            if first is not None:
                raise _DuplicateKey(key, first, line)
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def _text(path: Path, source: str) -> str:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(source, [f"cannot read the file: {exc.strerror or exc}"]) from None
    for bom, name in _BOMS.items():
        if data.startswith(bom):
            raise ConfigError(source, [f"the file is {name} text; save it as UTF-8"])
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        byte = f"byte 0x{data[exc.start]:02x} at offset {exc.start}"
        raise ConfigError(source, [f"not UTF-8 text ({byte}); save it as UTF-8"]) from None
    if "\x00" in text:
        raise ConfigError(source, [f"not a text file (NUL byte at offset {data.index(0)})"])
    return text


def read_yaml(path: str | Path) -> Any:
    """Parses the YAML file at `path`; what it holds is not yet validated.

    Raises:
        ConfigError: of one line naming the file, for a file that cannot be read, is not
            UTF-8 text, is not valid YAML, or writes a key twice in one mapping.
    """
    source = str(path)
    text = _text(Path(path), source)
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except _DuplicateKey as exc:
        raise ConfigError(source, [str(exc)]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        problem = " ".join(str(problem).split())
        raise ConfigError(source, [f"{where}not valid YAML ({problem})"]) from None
