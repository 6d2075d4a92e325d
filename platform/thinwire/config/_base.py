"""Shared pieces of the schema: the section base class, value types, the error type."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field


class ConfigError(ValueError):
    """An experiment file that cannot be used; `str()` lists every problem, one per line."""

    def __init__(self, source: str, problems: Sequence[str]) -> None:
        self.source = source
        self.problems = list(problems)
        super().__init__("\n".join(f"{source}: {p}" for p in self.problems))


def _unit_interval(x: float) -> float:
    if not 0.0 < x <= 1.0:
        raise ValueError("must be in (0, 1]")
    return x


def _probability(x: float) -> float:
    if not 0.0 <= x <= 1.0:
        raise ValueError("must be in [0, 1]")
    return x


def _positive(x: float) -> float:
    if not x > 0:
        raise ValueError("must be > 0")
    return x


def _non_negative(x: float) -> float:
    if not x >= 0:
        raise ValueError("must be >= 0")
    return x


def _device(x: str) -> str:
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", x):
        raise ValueError("must be 'auto', 'cpu', 'cuda' or 'cuda:<index>'")
    return x


Density = Annotated[float, AfterValidator(_unit_interval)]
Probability = Annotated[float, AfterValidator(_probability)]
PositiveFloat = Annotated[float, AfterValidator(_positive)]
NonNegativeFloat = Annotated[float, AfterValidator(_non_negative)]
PositiveInt = Annotated[int, Field(ge=1)]
Device = Annotated[str, AfterValidator(_device)]


class Section(BaseModel):
    """Base of every config section: frozen, unknown keys rejected."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)
