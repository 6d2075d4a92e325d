"""Registries: every family a user may extend maps a config `kind` to its section and factory.

A family (selectors, quantizers, aggregation rules, ...) is one `Registry`. Registering a
kind binds it, in one call, to the pydantic section that configures it and the factory that
builds it:

    SELECTORS.register("my_topk", section=MyTopK, factory=lambda section, seed: ...)

A config field typed `Annotated[Kinded, SELECTORS]` dispatches on `kind` when it is
validated, not when the schema is built, so a kind registered after `thinwire.config` was
imported validates, dumps, appears in `thinwire schema` and in the errors ("unknown selector
kind 'x'; expected one of a, b, c"), and builds. Replacing a kind needs `force=True`; an
unknown kind raises `ValueError` naming the registered ones (STYLE rule 12: no import strings,
no `eval`).

Where registration happens. Validation needs a kind's section; building needs its factory.
Every process validates (the CLI, a Flower SuperNode parsing the run config, a notebook), but
only the role that builds an object needs its factory, and the core may not import a role
(a gossip method's factory lives in `thinwire.topologies`, an aggregation rule's in
`thinwire.server`). So thinwire's own kinds are split along that line:

- the config module that defines a section declares it (`@SELECTORS.declare` above the class):
  light (pydantic only), so `import thinwire.config` stays light and every built-in kind
  validates in every process, with no import of the method's module;
- the module that holds the method registers its factory with `register`, naming the same
  section; that module is imported by whoever builds (the codec pipeline imports
  `thinwire.codecs`, the star server imports `thinwire.server`), so the core never imports a
  role. A declared kind without a factory is a clear error when something builds it, and a
  test checks that every declared kind has one once the builders are imported.

A plugin does both in one `register` call; its module is imported before validation, from
an experiment's `plugins:` list or the `thinwire.plugins` entry points (`thinwire.plugins`).

A family whose YAML is a plain name (`dataset: digits`) is a `NameRegistry` (`DATASETS`).

Adding a family: one `Registry` below, the field typed `Annotated[Kinded, FAMILY]` with a
default section, `@FAMILY.declare` on each built-in section, and `FAMILY.register(...)` next
to each method; the builder calls `FAMILY.factory(section.kind)(section, ...)`.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, Protocol, TypeVar

from pydantic import BaseModel, GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import PydanticCustomError, core_schema

from thinwire import plugins

if TYPE_CHECKING:
    from thinwire.codecs.base import Codec, Quantizer, Selector, Transform
    from thinwire.policies.base import Policy, PolicyContext

__all__ = [
    "ACCESS_RULES",
    "AGGREGATION_RULES",
    "DATASETS",
    "FEEDBACKS",
    "GOSSIP",
    "GRAPHS",
    "LOWRANK",
    "MIXINGS",
    "MODELS",
    "OPTIMIZERS",
    "PARTITIONS",
    "PLAIN_SERVER_HALF",
    "POLICIES",
    "PolicyRegistry",
    "QUANTIZERS",
    "RUNTIMES",
    "SCHEDULES",
    "SELECTORS",
    "STALENESS",
    "TRANSFORMS",
    "DatasetEntry",
    "Kinded",
    "NameRegistry",
    "Registry",
    "registries",
]

F = TypeVar("F")
S = TypeVar("S", bound=type[BaseModel])


class Kinded(Protocol):
    """What a registered field holds: a config section with a `kind`."""

    @property
    def kind(self) -> str:
        """The registered kind this section configures."""
        ...


class _Entry(NamedTuple):
    section: type[BaseModel]
    factory: Any  # None while only declared


def _literal_kinds(section: type[BaseModel]) -> tuple[str, ...]:
    """The kinds a section's `kind: Literal[...]` field admits."""
    field = section.model_fields.get("kind")
    annotation = field.annotation if field is not None else None
    if typing.get_origin(annotation) is not typing.Literal:
        raise TypeError(
            f"{section.__name__} needs a field `kind: Literal[...]` to be a registered section"
        )
    return tuple(str(value) for value in typing.get_args(annotation))


def _check_section(section: Any) -> None:
    # Duck-typed: thinwire.config imports this module, so naming its Section here would
    # make the two import each other. A Section is a pydantic model with check_experiment.
    if not (
        isinstance(section, type)
        and issubclass(section, BaseModel)
        and callable(getattr(section, "check_experiment", None))
    ):
        raise TypeError(f"a section must be a thinwire.config.Section subclass, got {section!r}")


class Registry(Generic[F]):
    """The kinds of one family, each bound to its config section and factory.

    Args:
        family: what a kind of this family is called in messages ("selector").
    """

    def __init__(self, family: str) -> None:
        self.family = family
        self._entries: dict[str, _Entry] = {}
        _ALL.append(self)

    def __repr__(self) -> str:
        return f"Registry({self.family!r}: {', '.join(self._entries)})"

    def declare(self, section: S) -> S:
        """Class decorator: the section's kinds validate; their factory is registered later.

        For thinwire's own sections (see the module docstring); a plugin calls `register`.

        Raises:
            ValueError: if one of its kinds is already declared by another section.
        """
        _check_section(section)
        for kind in _literal_kinds(section):
            entry = self._entries.get(kind)
            if entry is not None and entry.section is not section:
                raise ValueError(f"{self.family} kind {kind!r} is already declared")
            self._entries[kind] = _Entry(section, entry.factory if entry else None)
        return section

    def register(
        self, kind: str, *, section: type[BaseModel], factory: F, force: bool = False
    ) -> None:
        """Makes `{kind: <kind>}` validate as `section` and build with `factory`.

        Args:
            kind: the name YAML uses; `section`'s `kind: Literal[...]` must admit it.
            section: the `thinwire.config.Section` subclass that configures the kind.
            factory: what builds it from a validated section (its signature is the family's,
                e.g. `(section, seed) -> Selector | None` for selectors).
            force: replace a kind that already has a factory, or another section.

        Raises:
            ValueError: if `kind` is taken and `force` is not set, or `section` does not
                admit `kind`.
        """
        if not isinstance(kind, str) or not kind:
            raise ValueError(f"a {self.family} kind must be a non-empty string, got {kind!r}")
        _check_section(section)
        if kind not in _literal_kinds(section):
            raise ValueError(
                f"{section.__name__}.kind does not admit {kind!r}; "
                f'declare it as kind: Literal["{kind}"] = "{kind}"'
            )
        entry = self._entries.get(kind)
        taken = entry is not None and (entry.factory is not None or entry.section is not section)
        if taken and not force:
            raise ValueError(
                f"{self.family} kind {kind!r} is already registered; pass force=True to replace it"
            )
        self._entries[kind] = _Entry(section, factory)

    def kinds(self) -> tuple[str, ...]:
        """The kinds that validate, sorted."""
        plugins.load_entry_points()
        return tuple(sorted(self._entries))

    def sections(self) -> tuple[type[BaseModel], ...]:
        """Each section once, in the order its first kind was declared or registered."""
        plugins.load_entry_points()
        return tuple(dict.fromkeys(entry.section for entry in self._entries.values()))

    def kinds_of(self, section: type[BaseModel]) -> tuple[str, ...]:
        """The kinds `section` configures here, in its Literal's order."""
        return tuple(k for k in _literal_kinds(section) if self._bound(k, section))

    def _bound(self, kind: str, section: type[BaseModel]) -> bool:
        entry = self._entries.get(kind)
        return entry is not None and entry.section is section

    def factory(self, kind: str) -> F:
        """The factory of `kind`.

        Raises:
            ValueError: for a kind nobody registered, or one only declared.
        """
        entry = self._entries.get(kind)
        if entry is None:
            raise ValueError(self._unknown(kind))
        if entry.factory is None:
            raise ValueError(
                f"{self.family} kind {kind!r} validates but has no factory: import the module "
                f"that registers it ({self.family} factories register where the method lives)"
            )
        factory: F = entry.factory
        return factory

    def _unknown(self, kind: Any) -> str:
        return f"unknown {self.family} kind {kind!r}; expected one of {', '.join(self.kinds())}"

    # --- the pydantic field type -----------------------------------------------------------

    def validate(self, value: Any) -> Any:
        """The section `value` (a mapping with a `kind`, or a section) configures.

        Raises:
            pydantic.ValidationError: from the kind's section, its locations under the field.
            pydantic_core.PydanticCustomError: no mapping, no `kind`, or an unknown kind.
        """
        plugins.load_entry_points()
        if isinstance(value, BaseModel):
            kind = getattr(value, "kind", None)
            if isinstance(kind, str) and self._bound(kind, type(value)):
                return value  # already validated: a default, or a section built in code
            raise PydanticCustomError(
                "unknown_kind",
                "{type} is not a registered {family} section",
                {"type": type(value).__name__, "family": self.family},
            )
        if not isinstance(value, Mapping):
            raise PydanticCustomError(
                "model_type",
                "expected a {family} section (a mapping with a kind)",
                {"family": self.family},
            )
        if "kind" not in value:
            raise PydanticCustomError("missing_kind", "missing 'kind'")
        kind = value["kind"]
        entry = self._entries.get(kind) if isinstance(kind, str) else None
        if entry is None:
            # Kinds are code-like names; braces would be read as template fields.
            message = self._unknown(kind).replace("{", "(").replace("}", ")")
            raise PydanticCustomError("unknown_kind", message, {"kind": str(kind)})
        return entry.section.model_validate(value)

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        del source, handler  # the kinds are looked up when a value is validated
        return core_schema.no_info_plain_validator_function(
            self.validate,
            serialization=core_schema.plain_serializer_function_ser_schema(
                _dump, info_arg=True, when_used="always"
            ),
        )

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        del schema
        variants = [handler(section.__pydantic_core_schema__) for section in self.sections()]
        return {"oneOf": variants, "discriminator": {"propertyName": "kind"}}


def _dump(value: Any, info: core_schema.SerializationInfo) -> Any:
    # The section as its own model dumps it, under the options of the enclosing dump.
    if not isinstance(value, BaseModel):
        return value
    return value.model_dump(
        mode=info.mode,
        by_alias=bool(info.by_alias),
        exclude_unset=info.exclude_unset,
        exclude_defaults=info.exclude_defaults,
        exclude_none=info.exclude_none,
        round_trip=info.round_trip,
    )


_ALL: list[Registry[Any]] = []


class DatasetEntry(NamedTuple):
    """What a `data.dataset` name stands for."""

    reads_files: bool
    """Whether it reads files from `data.root` (which it then requires, and others refuse)."""
    layout: str = ""
    """What `data.root` must hold, or where the data come from (the config reference)."""
    loader: Any = None
    """`loader(DataConfig, seed) -> Dataset`; None while only declared."""


class NameRegistry:
    """Name-only kinds: a plain name in YAML (`dataset: digits`), not a section with a kind.

    The same split as `Registry`: the config declares a built-in name (`declare`, light);
    the module that loads it registers its loader and layout (`register`, also the one
    call a plugin makes). As a field type, `Annotated[str, DATASETS]`.
    """

    def __init__(self, family: str) -> None:
        self.family = family
        self._entries: dict[str, DatasetEntry] = {}

    def declare(self, name: str, *, reads_files: bool) -> None:
        """Makes `name` validate; its loader is registered later, where it lives."""
        if name in self._entries:
            raise ValueError(f"{self.family} {name!r} is already declared")
        self._entries[name] = DatasetEntry(reads_files)

    def register(
        self, name: str, *, reads_files: bool, layout: str, loader: Any, force: bool = False
    ) -> None:
        """Makes `name` validate and load with `loader`.

        Raises:
            ValueError: `name` is taken (it has a loader, or was declared otherwise) and
                `force` is not set.
        """
        if not isinstance(name, str) or not name:
            raise ValueError(f"a {self.family} name must be a non-empty string, got {name!r}")
        entry = self._entries.get(name)
        taken = entry is not None and (entry.loader is not None or entry.reads_files != reads_files)
        if taken and not force:
            raise ValueError(
                f"{self.family} {name!r} is already registered; pass force=True to replace it"
            )
        self._entries[name] = DatasetEntry(reads_files, layout, loader)

    def kinds(self) -> tuple[str, ...]:
        """The names that validate, sorted."""
        plugins.load_entry_points()
        return tuple(sorted(self._entries))

    def entries(self) -> Mapping[str, DatasetEntry]:
        """Every name and its entry, in the order they were first declared or registered."""
        plugins.load_entry_points()
        return dict(self._entries)

    def entry(self, name: str) -> DatasetEntry:
        """What `name` stands for; ValueError naming the registered ones if nobody did."""
        entry = self.entries().get(name)
        if entry is None:
            raise ValueError(
                f"unknown {self.family} {name!r}; expected one of " + ", ".join(self.kinds())
            )
        return entry

    def loader(self, name: str) -> Any:
        """The loader of `name`; ValueError for an unknown name or one only declared."""
        loader = self.entry(name).loader
        if loader is None:
            raise ValueError(f"{self.family} {name!r} has no loader: import its module")
        return loader

    def _validate_name(self, name: str) -> str:
        try:
            self.entry(name)
        except ValueError as exc:  # braces would be read as template fields
            message = str(exc).replace("{", "(").replace("}", ")")
            raise PydanticCustomError("unknown_name", message) from None
        return name

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        # A plain string, checked against the names registered when it is validated.
        return core_schema.no_info_after_validator_function(self._validate_name, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {**handler(schema), "enum": list(self.entries())}


def registries() -> Mapping[str, Registry[Any]]:
    """Every family's registry, by family name."""
    return {registry.family: registry for registry in _ALL}


PLAIN_SERVER_HALF = "plain"
"""The server half of a send policy that needs nothing of the server."""


class PolicyRegistry(Registry[F]):
    """Send policies: a kind binds its section, its client factory and its server half.

    The server half is named, not imported: the star's server maps the name to its pieces
    (`thinwire.server.halves`), so registering a policy in the core imports no role.
    """

    def __init__(self, family: str) -> None:
        super().__init__(family)
        self._servers: dict[str, str] = {}

    def register(
        self,
        kind: str,
        *,
        section: type[BaseModel],
        factory: F,
        server: str = PLAIN_SERVER_HALF,
        force: bool = False,
    ) -> None:
        """`Registry.register`, plus `server`: the name of the kind's server half.

        Args:
            kind: the name YAML uses; `section`'s `kind: Literal[...]` must admit it.
            section: the `thinwire.config.Section` subclass that configures the kind.
            factory: `(section, PolicyContext) -> Policy`, the client's half.
            server: a server half registered with `thinwire.server.register_server_half`
                ("plain", "stale_reuse", "slotted", or a plugin's).
            force: replace a kind that already has a factory, or another section.
        """
        super().register(kind, section=section, factory=factory, force=force)
        self._servers[kind] = server

    def server_half(self, kind: str) -> str:
        """The name of `kind`'s server half.

        Raises:
            ValueError: for a kind nobody registered, or one only declared.
        """
        self.factory(kind)  # the unknown-kind and no-factory errors
        return self._servers[kind]


# --- the families ------------------------------------------------------------------------
# One line per family. Factory signatures are the family's; see where each is built.

# Codec stages (built by thinwire.codecs.build; the seed is the stage's own):
TRANSFORMS: Registry[Callable[[Any, int], Transform | None]] = Registry("transform")
SELECTORS: Registry[Callable[[Any, int], Selector | None]] = Registry("selector")
QUANTIZERS: Registry[Callable[[Any, int], Quantizer | None]] = Registry("quantizer")
FEEDBACKS: Registry[Callable[[Any, Codec], Codec]] = Registry("feedback")  # wraps the chain
# A whole tensor codec in place of select + quantize (PowerSGD's factors); None: the chain
LOWRANK: Registry[Callable[[Any, int], Codec | None]] = Registry("low-rank codec")

# Send policies (built by thinwire.policies.build_policy, once per client), each with the
# name of its server half (run by the star's server, thinwire.server.halves):
POLICIES: PolicyRegistry[Callable[[Any, PolicyContext], Policy]] = PolicyRegistry("policy")

# The star server's aggregation rule: `factory(section) -> Rule` (thinwire.server.rules).
AGGREGATION_RULES: Registry[Callable[[Any], Any]] = Registry("aggregation rule")

# Random-access rules of the random_access policy: `factory(section, PolicyContext, slots)
# -> Policy` (thinwire.policies).
ACCESS_RULES: Registry[Callable[[Any, Any, int], Any]] = Registry("access rule")

# The learning stack (thinwire.learning):
# models: `factory(section, input_shape, num_classes) -> nn.Module`, called on the meta
# device (thinwire.learning.models materializes and seeds the weights);
MODELS: Registry[Callable[[Any, tuple[int, ...], int], Any]] = Registry("model")
# partitions: `factory(section, labels: np.ndarray, clients, rng) -> [indices per client]`;
PARTITIONS: Registry[Callable[[Any, Any, int, Any], Any]] = Registry("partition")
# local optimizers: `factory(section, parameters, lr) -> torch.optim.Optimizer`;
OPTIMIZERS: Registry[Callable[[Any, Any, float], Any]] = Registry("optimizer")
# learning-rate schedules: `factory(section, lr, round, rounds) -> float` (round from 1).
SCHEDULES: Registry[Callable[[Any, float, int, int], float]] = Registry("schedule")

# Decentralized runs (thinwire.topologies): graphs `factory(section, nodes, seed, round)
# -> nx.Graph`, mixing rules `factory(section, graph) -> np.ndarray` (validated there),
# gossip methods `factory(NodeCore, section) -> GossipNode`.
GRAPHS: Registry[Callable[[Any, int, int, int], Any]] = Registry("topology")
MIXINGS: Registry[Callable[[Any, Any], Any]] = Registry("mixing")
GOSSIP: Registry[Callable[[Any, Any], Any]] = Registry("gossip method")

# Data sets (`data.dataset`, a plain name): loaders `(DataConfig, seed) -> Dataset`
# (thinwire.learning.datasets).
DATASETS = NameRegistry("dataset")

# Runtimes, as `thinwire run` starts them: `run(section, experiment, RunOptions) ->
# RunOutcome` writes the run folder (thinwire.runtimes.run_folder); a runtime that runs as
# several commands (Flower, gossip peers) raises ValueError naming them.
RUNTIMES: Registry[Callable[[Any, Any, Any], Any]] = Registry("runtime")

# Staleness weights of the buffered asynchronous server: `factory(section) -> (tau -> float)`
# (thinwire.server.buffered).
STALENESS: Registry[Callable[[Any], Callable[[int], float]]] = Registry("staleness function")
