"""Shared pieces of the schema: the section base class, value types, the error type."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, get_args, get_origin

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError


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


def _discrete_wavelet(name: str) -> str:
    import pywt  # the codec's own library; imported here only when a wavelet is named

    if name not in pywt.wavelist(kind="discrete"):
        raise ValueError(
            "unknown discrete wavelet; expected a PyWavelets name such as 'haar', 'db4', "
            "'sym2', 'coif1' (see pywt.wavelist(kind='discrete'))"
        )
    return name


Density = Annotated[float, AfterValidator(_unit_interval)]
Probability = Annotated[float, AfterValidator(_probability)]
PositiveFloat = Annotated[float, AfterValidator(_positive)]
NonNegativeFloat = Annotated[float, AfterValidator(_non_negative)]
PositiveInt = Annotated[int, Field(ge=1)]
Device = Annotated[str, AfterValidator(_device)]
WaveletName = Annotated[str, AfterValidator(_discrete_wavelet)]


def _admits_bool(annotation: Any) -> bool:
    # Whether `bool` appears anywhere in a field's type (bool, bool | None, list[bool], ...).
    if annotation is bool:
        return True
    if get_origin(annotation) is Annotated:
        return _admits_bool(get_args(annotation)[0])
    return any(_admits_bool(arg) for arg in get_args(annotation))


_BOOL_NOT_ACCEPTED = PydanticCustomError(
    "bool_not_accepted", "a boolean (true/false) is not accepted here"
)


def _holds_bool(value: Any) -> bool:
    return isinstance(value, bool) or (
        isinstance(value, list) and any(isinstance(v, bool) for v in value)
    )


class Section(BaseModel):
    """Base of every config section: frozen, unknown keys rejected, numbers strict.

    Every float must be finite (`lr: .inf` is refused, not trained into a NaN model), and a
    YAML boolean is refused wherever the field is not itself a boolean: pydantic's lax mode
    would read `rounds: true` as 1.
    """

    model_config = ConfigDict(
        extra="forbid", frozen=True, allow_inf_nan=False, use_attribute_docstrings=True
    )

    @model_validator(mode="before")
    @classmethod
    def _no_bool_unless_boolean(cls, data: Any) -> Any:
        # A model-level check: a field-level "*" validator would also wrap the `kind`
        # discriminators, which pydantic forbids. Errors keep each field's own location.
        if not isinstance(data, Mapping):
            return data
        wrong = [
            InitErrorDetails(type=_BOOL_NOT_ACCEPTED, loc=(key,), input=value)
            for key, value in data.items()
            if key in cls.model_fields
            and _holds_bool(value)
            and not _admits_bool(cls.model_fields[key].annotation)
        ]
        if wrong:
            raise ValidationError.from_exception_data(cls.__name__, wrong)
        return data

    def check_experiment(self, experiment: Any, where: str) -> None:
        """Refuses an experiment this section's method cannot run in; by default, none.

        A method whose rule spans sections states it here, on its own section, so that the
        rule lives next to its fields and a plugin's section can have one too. The
        experiment calls it once it is otherwise valid, for every section it holds.

        Args:
            experiment: the validated `Experiment`.
            where: the section's dotted path in it (`codec.select`).

        Raises:
            ValueError: saying what to change.
        """
        del experiment, where
