"""The whole experiment: every section, and the rules that span sections."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from thinwire.config._aggregation import AggregationConfig, aggregation_problems
from thinwire.config._asynchronous import BufferedAsync
from thinwire.config._base import Section
from thinwire.config._codec import CodecConfig
from thinwire.config._gossip import (
    SPARQ_CODEC,
    ChocoGossip,
    ExactGossip,
    Gossip,
    JwinsGossip,
    SparqGossip,
)
from thinwire.config._learning import MLP, DataConfig, ModelConfig, TrainConfig
from thinwire.config._policy import (
    AlwaysSend,
    Policy,
    RandomAccessPolicy,
)
from thinwire.config._privacy import (
    PrivacyConfig,
)
from thinwire.config._runtime import ChannelConfig, FlowerRuntime, Runtime, SimulationRuntime
from thinwire.config._topology import GraphSection, StarTopology, Topology
from thinwire.config._vote import MajorityVote
from thinwire.plugins import PluginError, import_modules, load_entry_points

ModuleName = Annotated[str, Field(pattern=r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")]


def _no_plugins(names: list[str]) -> bool:
    return not names


def _synchronous(server: BufferedAsync | None) -> bool:
    return server is None


class Experiment(Section):
    """One experiment: everything `thinwire run` needs."""

    plugins: Annotated[list[ModuleName], Field(exclude_if=_no_plugins)] = []
    """Modules imported before the rest of the file is validated, so that the kinds they
    register validate (see docs/extending.md); left out of a dump when empty."""
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=100)]
    """Names the run and its folder (`<output>/<name>-<timestamp>`)."""
    seed: Annotated[int, Field(ge=0, lt=2**63)] = 0
    """Seeds everything random: split, model, batches, sampling, codecs, noise."""
    data: DataConfig = DataConfig()
    model: ModelConfig = MLP()
    train: TrainConfig = TrainConfig()
    codec: CodecConfig = CodecConfig()
    downlink: CodecConfig | None = None
    """Codec for the server's model broadcast; None sends the model dense."""
    policy: Policy = AlwaysSend()
    privacy: PrivacyConfig | None = None
    """DP-SGD on the clients; None trains without privacy."""
    vote: MajorityVote | None = None
    """Star: clients vote a common sparse support and send values on it (sparse SGD with
    majority voting); None: the codec's updates."""
    topology: Topology = StarTopology()
    gossip: Gossip = ExactGossip()
    """What gossip peers exchange; applies to decentralized runs (see `decentralized`)."""
    channel: ChannelConfig = ChannelConfig()
    aggregation: AggregationConfig = AggregationConfig()
    """Bounds on received updates, and the star server's aggregation rule."""
    server: Annotated[BufferedAsync | None, Field(exclude_if=_synchronous)] = None
    """The star's server schedule: None runs synchronous rounds; `kind: buffered_async` an
    asynchronous server (FedBuff); left out of a dump when None."""
    runtime: Runtime = SimulationRuntime()
    output: Path = Path("runs")
    """Folder that receives the run folders."""
    seeds: list[Annotated[int, Field(ge=0, lt=2**63)]] | None = None
    """Repeat the run once per seed, in one sweep folder (`thinwire run`); None: `seed` only."""
    sweep: dict[str, Annotated[list[Any], Field(min_length=1)]] | None = None
    """A grid over dotted fields, e.g. {codec.select.density: [0.01, 0.001]}: one run per
    point (and per seed), each a run folder in one sweep folder (`thinwire run`)."""

    @property
    def decentralized(self) -> bool:
        """Whether peers gossip on a graph: any topology but star, or the gossip runtime."""
        return self.topology.kind != "star" or self.runtime.kind == "gossip"

    @property
    def clients_per_round(self) -> int:
        """max(1, floor(participation * clients)): how many clients a star round samples."""
        return max(1, int(self.train.participation * self.data.clients))

    @model_validator(mode="before")
    @classmethod
    def _import_plugins(cls, data: Any) -> Any:
        # Before any field: a plugin's kinds must be registered when its sections validate.
        load_entry_points()
        names = data.get("plugins") if isinstance(data, Mapping) else None
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            return data  # not a list of names: the field's own validation says so
        try:
            import_modules(names)
        except PluginError as exc:
            message = str(exc).replace("{", "(").replace("}", ")")
            error = InitErrorDetails(
                type=PydanticCustomError("plugin_import", message),
                loc=("plugins", exc.index or 0),
                input=exc.module,
            )
            raise ValidationError.from_exception_data(cls.__name__, [error]) from None
        return data

    @model_validator(mode="before")
    @classmethod
    def _sparq_codec(cls, data: Any) -> Any:
        # SPARQ compresses fired corrections with SignTop_k unless the file names a codec.
        if isinstance(data, Mapping) and "codec" not in data:
            gossip = data.get("gossip")
            kind = (
                gossip.get("kind") if isinstance(gossip, Mapping) else getattr(gossip, "kind", None)
            )
            if kind == "sparq":
                data = {**data, "codec": SPARQ_CODEC}
        return data

    @model_validator(mode="after")
    def _gossip_fits(self) -> Experiment:
        if not self.decentralized:
            if self.gossip != ExactGossip():
                raise ValueError(
                    "gossip applies to decentralized runs; set a topology other than star "
                    "(or runtime.kind: gossip)"
                )
            return self
        problems = _gossip_problems(self)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @model_validator(mode="after")
    def _sweep_fits(self) -> Experiment:
        if self.seeds is None and self.sweep is None:
            return self
        if self.runtime.kind != "simulation":
            raise ValueError(
                "seeds and sweep make several simulated runs (thinwire run); "
                f"runtime.kind {self.runtime.kind!r} runs one deployment"
            )
        if self.seeds is not None and len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds lists a seed twice: {self.seeds}")
        for key in self.sweep or {}:
            if not re.fullmatch(r"[A-Za-z_]\w*(\.(\d+|[A-Za-z_]\w*))*", key):
                raise ValueError(f"sweep key {key!r} is not a dotted field such as train.lr")
            if key.split(".")[0] in ("seeds", "sweep", "name"):
                raise ValueError(f"sweep cannot vary {key!r} (seeds: lists the seeds)")
        return self

    @model_validator(mode="after")
    def _per_client_lists(self) -> Experiment:
        for key in ("uplink_mbps", "downlink_mbps", "latency_ms"):
            value = getattr(self.channel, key)
            if isinstance(value, list) and len(value) != self.data.clients:
                raise ValueError(
                    f"channel.{key} lists {len(value)} values for {self.data.clients} clients"
                )
        return self

    @model_validator(mode="after")
    def _policy_fits(self) -> Experiment:
        # random_access's own need of slots is its section's check (check_experiment).
        random_access = isinstance(self.policy, RandomAccessPolicy)
        if self.channel.slots is not None and not random_access:
            raise ValueError("channel.slots applies only to policy kind 'random_access'")
        return self

    @model_validator(mode="after")
    def _flower_fits(self) -> Experiment:
        if not isinstance(self.runtime, FlowerRuntime):
            return self
        if self.topology.kind != "star":
            raise ValueError(
                f"runtime.kind 'flower' runs the star; topology {self.topology.kind!r} "
                "needs runtime.kind 'gossip'"
            )
        sampled = self.clients_per_round
        if self.runtime.min_replies > sampled:
            raise ValueError(
                f"runtime.min_replies is {self.runtime.min_replies} but a round samples "
                f"only {sampled} client(s) (train.participation * data.clients)"
            )
        return self

    @model_validator(mode="after")
    def _aggregation_fits(self) -> Experiment:
        problems = aggregation_problems(
            self.aggregation,
            decentralized=self.decentralized,
            random_access=isinstance(self.policy, RandomAccessPolicy),
        )
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @model_validator(mode="after")
    def _privacy_fits(self) -> Experiment:
        privacy = self.privacy
        if privacy is not None and self.topology.kind != "star":
            raise ValueError(
                f"privacy trains the star's clients (topology: star), "
                f"not the peers of topology {self.topology.kind!r}"
            )
        return self

    @model_validator(mode="after")
    def _methods_fit(self) -> Experiment:
        # Last: each method's own cross-section rule (Section.check_experiment).
        for where, section in _sections(self, ""):
            section.check_experiment(self, where)
        return self


def _sections(section: Section, path: str) -> Iterator[tuple[str, Section]]:
    """Every section under `section` (not itself), depth first, with its dotted path."""
    for name in type(section).model_fields:
        value = getattr(section, name)
        where = f"{path}.{name}" if path else name
        items = enumerate(value) if isinstance(value, list | tuple) else [(None, value)]
        for index, item in items:
            if isinstance(item, Section):
                at = where if index is None else f"{where}[{index}]"
                yield at, item
                yield from _sections(item, at)


def _time_varying(topology: Topology) -> bool:
    return isinstance(topology, GraphSection) and topology.draws_each_round()


def _gossip_problems(experiment: Experiment) -> list[str]:
    # Settings of the star that a gossip run would silently ignore, and method mismatches.
    problems = []
    gossip = experiment.gossip
    if experiment.runtime.kind not in ("simulation", "gossip"):
        problems.append(f"runtime {experiment.runtime.kind!r} runs the star, not gossip peers")
    if experiment.policy.kind != "always":
        problems.append(
            "policy applies to the star's clients; gossip peers send every round (SPARQ's "
            "event trigger is gossip.kind: sparq)"
        )
    if experiment.downlink is not None:
        problems.append("downlink compresses the star's server broadcast; remove it for gossip")
    if experiment.train.participation != 1.0:
        problems.append("train.participation samples the star's clients; gossip needs 1.0")
    if isinstance(gossip, ExactGossip | JwinsGossip) and experiment.codec != CodecConfig():
        what = "full models" if isinstance(gossip, ExactGossip) else "its own wavelet coefficients"
        problems.append(
            f"gossip.kind {gossip.kind} sends {what}; remove the codec section (it applies "
            "to choco and sparq)"
        )
    if isinstance(gossip, ChocoGossip | SparqGossip):
        if experiment.codec.error_feedback.kind != "none":
            problems.append(
                f"gossip.kind {gossip.kind} keeps x - x_hat as its memory of what was not "
                "sent; set codec.error_feedback: none"
            )
        if _time_varying(experiment.topology):
            problems.append(
                f"gossip.kind {gossip.kind} needs a fixed graph: its public estimates x_hat_j "
                "must see every message node j sends; use dpsgd or jwins on a graph redrawn "
                "every round"
            )
    return problems
