"""The experiment schema and YAML loading.

One YAML file describes an experiment; `load_config` parses it into the frozen pydantic
models below. Unknown keys are errors, every number is range-checked, and a failure raises
`ConfigError` whose lines name the file, the dotted field path and what was expected:

    exp.yaml: codec.select.density: must be in (0, 1], got 2

Component choices (`kind: topk`, `kind: dirichlet`, ...) are tagged unions: each kind has its
own model with only its own fields, so a setting that does not apply cannot be written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

__all__ = [
    "ChannelConfig",
    "CodecConfig",
    "ConfigError",
    "DataConfig",
    "Experiment",
    "FlowerRuntime",
    "ModelConfig",
    "TrainConfig",
    "apply_overrides",
    "load_config",
    "parse_config",
]


class ConfigError(ValueError):
    """An experiment file that cannot be used; `str()` lists every problem, one per line."""

    def __init__(self, source: str, problems: Sequence[str]) -> None:
        self.source = source
        self.problems = list(problems)
        super().__init__("\n".join(f"{source}: {p}" for p in self.problems))


# --------------------------------------------------------------------------- value types


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

    model_config = ConfigDict(extra="forbid", frozen=True)


# --------------------------------------------------------------------------- codec


class IdentityTransform(Section):
    """No transform: compress the tensor's own coordinates."""

    kind: Literal["identity"] = "identity"


class WaveletTransform(Section):
    """Multilevel discrete wavelet transform of the flattened tensor (JWINS)."""

    kind: Literal["wavelet"] = "wavelet"
    wavelet: str = "sym2"
    level: Annotated[int, Field(ge=1, le=12)] = 4


Transform = Annotated[IdentityTransform | WaveletTransform, Field(discriminator="kind")]


class KeepAll(Section):
    """Send every coordinate."""

    kind: Literal["none"] = "none"


class TopK(Section):
    """Exact top-k by magnitude; k = ceil(density * n)."""

    kind: Literal["topk"] = "topk"
    density: Density


class SampledTopK(Section):
    """Top-k via a sampled threshold estimate plus an exact pass over the candidates (DGC)."""

    kind: Literal["topk_sampled"] = "topk_sampled"
    density: Density
    sample: Density = 0.01


class RandomK(Section):
    """k coordinates chosen by a seed that travels instead of the indices."""

    kind: Literal["random_k"] = "random_k"
    density: Density
    unbiased: bool = False


class RandomBlock(Section):
    """One contiguous block of k coordinates from a seeded start (wrapping around)."""

    kind: Literal["random_block"] = "random_block"
    density: Density


class RTopK(Section):
    """rTop-k: k coordinates drawn uniformly from the top r = ratio * k."""

    kind: Literal["rtopk"] = "rtopk"
    density: Density
    ratio: Annotated[float, Field(ge=1.0)] = 4.0


class HardThreshold(Section):
    """Every coordinate with |x_i| >= lam."""

    kind: Literal["threshold"] = "threshold"
    lam: PositiveFloat


class AdaptiveTopK(Section):
    """Top-k with k chosen per call from the input's energy against its running average."""

    kind: Literal["adaptive"] = "adaptive"
    density: Density
    min_density: Density = 0.0001
    max_density: Density = 0.1
    decay: Probability = 0.9

    @model_validator(mode="after")
    def _ordered(self) -> AdaptiveTopK:
        if not self.min_density <= self.density <= self.max_density:
            raise ValueError("needs min_density <= density <= max_density")
        return self


Select = Annotated[
    KeepAll | TopK | SampledTopK | RandomK | RandomBlock | RTopK | HardThreshold | AdaptiveTopK,
    Field(discriminator="kind"),
]


class NoQuantizer(Section):
    """Values travel as fp32."""

    kind: Literal["none"] = "none"


class Cast(Section):
    """Values travel as fp16 or bf16."""

    kind: Literal["fp16", "bf16"]


class QSGD(Section):
    """QSGD: s levels with stochastic rounding (unbiased), one norm per bucket."""

    kind: Literal["qsgd"] = "qsgd"
    levels: Annotated[int, Field(ge=1, le=2**20)] = 16
    bucket: Annotated[int, Field(ge=0)] = 0


class ScaledSign(Section):
    """Scaled sign: ||x_b||_1 / |b| * sign(x) per bucket b."""

    kind: Literal["sign"] = "sign"
    bucket: Annotated[int, Field(ge=0)] = 0


Quantize = Annotated[NoQuantizer | Cast | QSGD | ScaledSign, Field(discriminator="kind")]


class NoFeedback(Section):
    """Whatever the codec drops is lost."""

    kind: Literal["none"] = "none"


class ResidualFeedback(Section):
    """Error feedback (Stich et al.): what was not sent is added to the next input."""

    kind: Literal["residual"] = "residual"


class DGCFeedback(Section):
    """DGC: momentum correction and momentum-factor masking around the residual."""

    kind: Literal["dgc"] = "dgc"
    momentum: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.9
    nesterov: bool = False


Feedback = Annotated[NoFeedback | ResidualFeedback | DGCFeedback, Field(discriminator="kind")]


def _feedback_shorthand(value: Any) -> Any:
    # `error_feedback: true` is the design card's spelling of the residual memory.
    if value is True:
        return {"kind": "residual"}
    if value is False or value is None:
        return {"kind": "none"}
    return value


class CodecConfig(Section):
    """What an update becomes on the wire: transform -> select -> quantize, with feedback."""

    transform: Transform = IdentityTransform()
    select: Select = KeepAll()
    quantize: Quantize = NoQuantizer()
    error_feedback: Feedback = NoFeedback()
    scope: Literal["tensor", "model"] = "tensor"
    """'tensor': one payload per parameter tensor; 'model': one for the flattened model."""

    @model_validator(mode="before")
    @classmethod
    def _shorthands(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "error_feedback" in data:
            data = {**data, "error_feedback": _feedback_shorthand(data["error_feedback"])}
        return data


# --------------------------------------------------------------------------- data


class IIDPartition(Section):
    """Shuffle, then deal examples out evenly."""

    kind: Literal["iid"] = "iid"


class DirichletPartition(Section):
    """Label skew: each class is split across clients in Dirichlet(alpha) proportions."""

    kind: Literal["dirichlet"] = "dirichlet"
    alpha: PositiveFloat = 0.5
    min_examples: PositiveInt = 2
    """Each client gets at least this many examples (the split is redrawn until it does)."""


class ShardsPartition(Section):
    """Sort by label, cut into equal shards, give each client `shards` of them (FedAvg)."""

    kind: Literal["shards"] = "shards"
    shards: PositiveInt = 2


Partition = Annotated[
    IIDPartition | DirichletPartition | ShardsPartition, Field(discriminator="kind")
]


class SyntheticData(Section):
    """FedProx's Synthetic(alpha, beta): per-client softmax models and feature shifts."""

    alpha: NonNegativeFloat = 1.0
    beta: NonNegativeFloat = 1.0
    dim: PositiveInt = 60
    classes: Annotated[int, Field(ge=2)] = 10
    samples_per_client: PositiveInt = 200
    """Median client size; sizes are lognormal around it (at least 10 per client)."""


FILE_DATASETS = ("mnist", "fashion_mnist", "cifar10")


class DataConfig(Section):
    """Which data, split over how many clients, and how."""

    dataset: Literal["digits", "synthetic", "mnist", "fashion_mnist", "cifar10"] = "digits"
    root: Path | None = None
    """Folder holding the files of mnist / fashion_mnist / cifar10 (never downloaded)."""
    clients: PositiveInt = 10
    partition: Partition = IIDPartition()
    test_fraction: Annotated[float, Field(gt=0.0, lt=1.0)] = 0.2
    """Held-out share for datasets without an official test split (digits, synthetic)."""
    synthetic: SyntheticData | None = None

    @model_validator(mode="after")
    def _dataset_fields(self) -> DataConfig:
        if self.dataset in FILE_DATASETS and self.root is None:
            raise ValueError(f"dataset {self.dataset!r} reads local files: set data.root")
        if self.dataset not in FILE_DATASETS and self.root is not None:
            raise ValueError(f"data.root applies only to {', '.join(FILE_DATASETS)}")
        if self.synthetic is not None and self.dataset != "synthetic":
            raise ValueError("data.synthetic applies only to dataset 'synthetic'")
        if self.dataset == "synthetic" and self.partition != IIDPartition():
            raise ValueError(
                "dataset 'synthetic' is generated per client (its own non-IID split); "
                "remove data.partition"
            )
        return self


# --------------------------------------------------------------------------- model


class LogisticRegression(Section):
    """Multinomial logistic regression (convex)."""

    kind: Literal["logreg"] = "logreg"


class MLP(Section):
    """Fully connected network with ReLU."""

    kind: Literal["mlp"] = "mlp"
    hidden: list[PositiveInt] = [64]


class CNN(Section):
    """Two conv layers and a linear head."""

    kind: Literal["cnn"] = "cnn"
    channels: list[PositiveInt] = [16, 32]


class ResNet20(Section):
    """ResNet-20, the standard CIFAR variant (He et al., 3 stages of 3 basic blocks)."""

    kind: Literal["resnet20"] = "resnet20"


ModelConfig = Annotated[LogisticRegression | MLP | CNN | ResNet20, Field(discriminator="kind")]


# --------------------------------------------------------------------------- training


class SGD(Section):
    """Local SGD (heavy-ball or Nesterov momentum optional)."""

    kind: Literal["sgd"] = "sgd"
    momentum: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.0
    nesterov: bool = False
    weight_decay: NonNegativeFloat = 0.0

    @model_validator(mode="after")
    def _nesterov_needs_momentum(self) -> SGD:
        if self.nesterov and self.momentum == 0.0:
            raise ValueError("nesterov needs momentum > 0")
        return self


class Adam(Section):
    """Local Adam."""

    kind: Literal["adam"] = "adam"
    weight_decay: NonNegativeFloat = 0.0


Optimizer = Annotated[SGD | Adam, Field(discriminator="kind")]


class ConstantLR(Section):
    """The same learning rate every round."""

    kind: Literal["constant"] = "constant"


class StepLR(Section):
    """Multiply the learning rate by `gamma` at each listed round."""

    kind: Literal["step"] = "step"
    milestones: list[Annotated[int, Field(ge=1)]]
    gamma: PositiveFloat = 0.1


class CosineLR(Section):
    """Cosine decay from lr to `final` * lr over the run."""

    kind: Literal["cosine"] = "cosine"
    final: NonNegativeFloat = 0.0


class InverseTimeLR(Section):
    """lr_t = lr * a / (a + t): the decaying schedule of convex analyses."""

    kind: Literal["inverse_time"] = "inverse_time"
    a: PositiveFloat = 10.0


LRSchedule = Annotated[ConstantLR | StepLR | CosineLR | InverseTimeLR, Field(discriminator="kind")]


class ServerStep(Section):
    """How the server applies the averaged delta: x <- x + lr * m, m <- momentum * m + delta."""

    lr: PositiveFloat = 1.0
    momentum: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.0


class TrainConfig(Section):
    """Rounds and local training."""

    rounds: PositiveInt = 50
    local_steps: PositiveInt | None = 10
    local_epochs: PositiveInt | None = None
    batch_size: PositiveInt = 32
    lr: PositiveFloat = 0.05
    optimizer: Optimizer = SGD()
    schedule: LRSchedule = ConstantLR()
    participation: Density = 1.0
    """Fraction of clients sampled each round (seeded)."""
    server: ServerStep = ServerStep()
    eval_every: PositiveInt = 1
    device: Device = "auto"

    @model_validator(mode="before")
    @classmethod
    def _one_budget(cls, data: Any) -> Any:
        # local_epochs replaces the default local_steps unless both are written.
        if isinstance(data, Mapping) and data.get("local_epochs") is not None:
            if data.get("local_steps") is not None:
                raise ValueError("set either train.local_steps or train.local_epochs, not both")
            data = {**data, "local_steps": None}
        return data


# --------------------------------------------------------------------------- policy


class AlwaysSend(Section):
    """Every selected client sends every round."""

    kind: Literal["always"] = "always"


Policy = Annotated[AlwaysSend, Field(discriminator="kind")]


# --------------------------------------------------------------------------- topology


class MetropolisHastingsWeights(Section):
    """w_ij = 1 / (max(deg_i, deg_j) + 1) on each edge; each row's rest on the diagonal."""

    kind: Literal["metropolis_hastings"] = "metropolis_hastings"


class MaxDegreeWeights(Section):
    """w_ij = 1 / (max_deg + 1) on every edge: one uniform weight for the whole graph."""

    kind: Literal["max_degree"] = "max_degree"


class MatrixFileWeights(Section):
    """A fixed mixing matrix read from a CSV or .npy file, validated against the graph."""

    kind: Literal["file"] = "file"
    path: Path


Mixing = Annotated[
    MetropolisHastingsWeights | MaxDegreeWeights | MatrixFileWeights,
    Field(discriminator="kind"),
]

_FIXED_MATRIX = "a mixing matrix file needs a fixed graph, not one redrawn every round"

Attempts = Annotated[int, Field(ge=1, le=10_000)]
"""How many seeded draws a random graph may take to come out connected."""


class GraphSection(Section):
    """Base of every topology: the graph kind's own fields plus its mixing weights."""

    mixing: Mixing = MetropolisHastingsWeights()


class StarTopology(GraphSection):
    """A hub and its leaves: a server and its clients, or peer 0 linked to every other peer."""

    kind: Literal["star"] = "star"


class RingTopology(GraphSection):
    """Node i linked to i - 1 and i + 1 (mod n); needs n >= 3."""

    kind: Literal["ring"] = "ring"


class TorusTopology(GraphSection):
    """A rows x cols grid with wrap-around, 4-regular; omit both for the most square shape."""

    kind: Literal["torus"] = "torus"
    rows: Annotated[int, Field(ge=3)] | None = None
    cols: Annotated[int, Field(ge=3)] | None = None

    @model_validator(mode="after")
    def _both_or_neither(self) -> TorusTopology:
        if (self.rows is None) != (self.cols is None):
            raise ValueError("set both torus rows and cols, or neither")
        return self


class CompleteTopology(GraphSection):
    """Every pair of nodes linked."""

    kind: Literal["complete"] = "complete"


class ChainTopology(GraphSection):
    """A path: node i linked to i + 1."""

    kind: Literal["chain"] = "chain"


class RegularTopology(GraphSection):
    """A uniformly random d-regular graph, fixed or redrawn every round."""

    kind: Literal["regular"] = "regular"
    degree: PositiveInt
    time_varying: bool = False
    """Draw a new graph each round (seeded by the run seed and the round)."""
    attempts: Attempts = 100
    """Draws allowed for a connected graph (a fixed graph must be connected)."""

    @model_validator(mode="after")
    def _fixed_matrix(self) -> RegularTopology:
        if self.time_varying and isinstance(self.mixing, MatrixFileWeights):
            raise ValueError(_FIXED_MATRIX)
        return self


class MatchingTopology(GraphSection):
    """A new uniformly random matching every round (one node rests when n is odd)."""

    kind: Literal["matching"] = "matching"

    @model_validator(mode="after")
    def _fixed_matrix(self) -> MatchingTopology:
        if isinstance(self.mixing, MatrixFileWeights):
            raise ValueError(_FIXED_MATRIX)
        return self


class ErdosRenyiTopology(GraphSection):
    """G(n, p), redrawn with derived seeds until connected."""

    kind: Literal["erdos_renyi"] = "erdos_renyi"
    p: Density
    attempts: Attempts = 100


class SmallWorldTopology(GraphSection):
    """Watts-Strogatz: a ring lattice of k nearest neighbours, each edge rewired w.p. p."""

    kind: Literal["small_world"] = "small_world"
    k: Annotated[int, Field(ge=2)] = 4
    p: Probability = 0.1
    attempts: Attempts = 100

    @model_validator(mode="after")
    def _even_k(self) -> SmallWorldTopology:
        if self.k % 2:
            raise ValueError(f"small_world k must be even (k/2 neighbours per side), got {self.k}")
        return self


class ExponentialTopology(GraphSection):
    """Node i linked to i +- 2^j (mod n) for every 2^j < n."""

    kind: Literal["exponential"] = "exponential"


class EdgeListTopology(GraphSection):
    """Edges read from a text file: one `u v` pair per line, nodes numbered 0..n-1."""

    kind: Literal["edges"] = "edges"
    path: Path


Topology = Annotated[
    StarTopology
    | RingTopology
    | TorusTopology
    | CompleteTopology
    | ChainTopology
    | RegularTopology
    | MatchingTopology
    | ErdosRenyiTopology
    | SmallWorldTopology
    | ExponentialTopology
    | EdgeListTopology,
    Field(discriminator="kind"),
]


# --------------------------------------------------------------------------- channel


class ChannelConfig(Section):
    """The simulated network: per-client link speeds (one value for all, or one per client)."""

    uplink_mbps: PositiveFloat | list[PositiveFloat] = 20.0
    downlink_mbps: PositiveFloat | list[PositiveFloat] = 100.0
    latency_ms: NonNegativeFloat | list[NonNegativeFloat] = 10.0


# --------------------------------------------------------------------------- runtime


class SimulationRuntime(Section):
    """Every role in one process."""

    kind: Literal["simulation"] = "simulation"


_ADDRESS = re.compile(r"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})")


def _address(text: str, *, port_zero: bool = False) -> str:
    match = _ADDRESS.fullmatch(text)
    low = 0 if port_zero else 1
    if not match or not low <= int(match.group(1)) <= 65535:
        raise ValueError(f"{text!r} is not host:port (port {low}..65535; IPv6 hosts in [ ])")
    return text


def _peer_address(text: str) -> str:
    return _address(text)


def _peer_pattern(text: str) -> str:
    if "{i}" not in text:
        raise ValueError(f"pattern {text!r} must contain {{i}}, the node id")
    _address(text.replace("{i}", "0"))
    return text


def _listen_address(text: str) -> str:
    _address(text.replace("{port}", "1").replace("{i}", "0"), port_zero=True)
    return text


class TLSFiles(Section):
    """PEM files of one node: the run's CA, this node's certificate and its private key."""

    ca: Path
    cert: Path
    key: Path
    mutual: bool = True
    """Require a client certificate from every pusher and bind it to the claimed node id."""


class GossipRuntime(Section):
    """One `thinwire peer` process per graph node, each serving the gRPC `Gossip` service.

    Peers are listed (`peers`, one host:port per node) or generated (`pattern`, such as
    `peer-{i}:50051`). Exactly one of `tls` and `insecure: true` must be set, so a run is
    never unencrypted by accident.
    """

    kind: Literal["gossip"] = "gossip"
    run_id: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=100)]
    """Names the run; nodes accept pushes only from their own run."""
    peers: list[Annotated[str, AfterValidator(_peer_address)]] | None = None
    pattern: Annotated[str, AfterValidator(_peer_pattern)] | None = None
    listen: Annotated[str, AfterValidator(_listen_address)] = "[::]:{port}"
    """Where a node serves; {port} is the port of its own peer address, {i} its id."""
    deadline_s: PositiveFloat = 30.0
    """How long a node waits for its neighbours each round; also each push's deadline."""
    chunk_bytes: Annotated[int, Field(ge=1024, le=64 * 2**20)] = 2**20
    max_message_bytes: Annotated[int, Field(ge=1024, le=2**40)] = 2**30
    """Largest encoded update a node accepts, in bytes."""
    window: Annotated[int, Field(ge=1, le=1000)] = 2
    """Rounds a node buffers: pushes for [current, current + window) are kept."""
    retries: Annotated[int, Field(ge=0, le=4)] = 3
    """Extra attempts of a push that failed with UNAVAILABLE (gRPC allows at most 4)."""
    backoff_s: PositiveFloat = 0.2
    """First retry's backoff bound; it doubles with every further attempt."""
    keepalive_s: PositiveFloat = 60.0
    """Interval of HTTP/2 keepalive pings on an open connection."""
    tls: TLSFiles | None = None
    insecure: bool = False

    @model_validator(mode="after")
    def _exactly_one(self) -> GossipRuntime:
        if (self.peers is None) == (self.pattern is None):
            raise ValueError("set exactly one of runtime.peers and runtime.pattern")
        if self.peers is not None and len(self.peers) < 2:
            raise ValueError(f"runtime.peers lists {len(self.peers)} address; gossip needs 2+")
        if (self.tls is None) == (not self.insecure):
            raise ValueError("set exactly one of runtime.tls and runtime.insecure: true")
        if self.chunk_bytes > self.max_message_bytes:
            raise ValueError("runtime.chunk_bytes must not exceed runtime.max_message_bytes")
        return self


class FlowerRuntime(Section):
    """The star on Flower's deployment engine: one SuperLink, one SuperNode per client.

    `thinwire server` submits the run to `superlink`; each client host runs
    `thinwire client --superlink HOST:PORT --partition i`. The ServerApp drives the rounds:
    a round ends when every participant has answered or `round_timeout_s` has passed, and
    needs `min_replies` answers by then, or the run stops (after a checkpoint).
    """

    kind: Literal["flower"] = "flower"
    superlink: Annotated[str, AfterValidator(_peer_address)] = "127.0.0.1:8000"
    """The SuperLink's HTTP API (Fleet and Control on one port), where runs are submitted."""
    insecure: bool = False
    """Plain HTTP to the SuperLink (loopback, a private compose network); TLS otherwise."""
    root_certificates: Path | None = None
    """PEM bundle of the CA that signed the SuperLink's certificate; None trusts the system's."""
    min_replies: PositiveInt = 1
    """Replies (with or without an update) a round needs by its deadline."""
    round_timeout_s: PositiveFloat = 600.0
    """How long a round waits for its participants; a missing reply is a dropout."""
    connect_timeout_s: PositiveFloat = 300.0
    """How long the server waits for every partition's SuperNode before the first round."""
    poll_interval_s: Annotated[float, Field(gt=0.0, le=10.0)] = 0.1
    """Pause between the server's pulls of replies from the SuperLink."""
    checkpoint_every: Annotated[int, Field(ge=0)] = 0
    """Write the server state every this many rounds (and after the last); 0 never."""
    client_eval: bool = False
    """Also evaluate the global model on each client's own data (one more message a round)."""

    @model_validator(mode="after")
    def _one_trust(self) -> FlowerRuntime:
        if self.insecure and self.root_certificates is not None:
            raise ValueError("runtime.root_certificates applies only without insecure: true")
        return self


Runtime = Annotated[SimulationRuntime | GossipRuntime | FlowerRuntime, Field(discriminator="kind")]


# --------------------------------------------------------------------------- experiment


class Experiment(Section):
    """One experiment: everything `thinwire run` needs."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=100)]
    seed: Annotated[int, Field(ge=0, lt=2**63)] = 0
    data: DataConfig = DataConfig()
    model: ModelConfig = MLP()
    train: TrainConfig = TrainConfig()
    codec: CodecConfig = CodecConfig()
    downlink: CodecConfig | None = None
    """Codec for the server's model broadcast; None sends the model dense."""
    policy: Policy = AlwaysSend()
    topology: Topology = StarTopology()
    channel: ChannelConfig = ChannelConfig()
    runtime: Runtime = SimulationRuntime()
    output: Path = Path("runs")

    @model_validator(mode="after")
    def _per_client_lists(self) -> Experiment:
        for key in ("uplink_mbps", "downlink_mbps", "latency_ms"):
            value = getattr(self.channel, key)
            if isinstance(value, list) and len(value) != self.data.clients:
                raise ValueError(
                    f"channel.{key} lists {len(value)} values for {self.data.clients} clients"
                )
        if isinstance(self.runtime, FlowerRuntime):
            sampled = max(1, int(self.train.participation * self.data.clients))
            if self.runtime.min_replies > sampled:
                raise ValueError(
                    f"runtime.min_replies is {self.runtime.min_replies} but a round samples "
                    f"only {sampled} client(s) (train.participation * data.clients)"
                )
        return self


# --------------------------------------------------------------------------- loading


def apply_overrides(raw: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """Returns `raw` with dotted `key=value` overrides applied (values parsed as YAML).

    Raises:
        ValueError: for an override that is not `dotted.key=value` or walks into a scalar.
    """
    result: dict[str, Any] = yaml.safe_load(yaml.safe_dump(raw)) or {}
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*", key.strip()):
            raise ValueError(f"override {item!r} is not of the form dotted.key=value")
        parts = key.strip().split(".")
        node = result
        for i, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                where = ".".join(parts[: i + 1])
                raise ValueError(f"override {item!r}: {where} is a value, not a section")
            node = child
        node[parts[-1]] = yaml.safe_load(text) if text.strip() else None
    return result


def _dotted(loc: tuple[int | str, ...], raw: Any) -> str:
    # pydantic puts a tagged union's tag into the path (codec.select.topk.density) and
    # validator names for function-validated types; keep only keys present in the input.
    parts: list[str] = []
    node = raw
    for item in loc:
        if isinstance(node, Mapping) and item in node:
            node = node[item]
            parts.append(str(item))
        elif isinstance(node, list) and isinstance(item, int) and item < len(node):
            node = node[item]
            parts.append(f"[{item}]")
        elif isinstance(item, str) and (
            (isinstance(node, Mapping) and node.get("kind") == item)
            or item.startswith(("function-", "list[", "tagged-union[", "literal["))
            or item in ("int", "float", "str", "bool", "list")
        ):
            continue
        else:
            parts.append(str(item))
            node = None
    return ".".join(parts).replace(".[", "[") or "(top level)"


def _message(error: Mapping[str, Any]) -> str:
    msg = str(error["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        msg = msg.removeprefix(prefix)
    if error["type"] == "extra_forbidden":
        return "unknown key"
    if error["type"] == "missing":
        return "required field is missing"
    if error["type"] == "union_tag_not_found":
        return "missing 'kind'"
    if error["type"] == "union_tag_invalid":
        ctx = error.get("ctx", {})
        return f"unknown kind {ctx.get('tag')!r}; expected one of {ctx.get('expected_tags')}"
    msg = msg[0].lower() + msg[1:] if msg else msg
    if error["type"] not in ("model_type", "union_tag_invalid", "union_tag_not_found"):
        value = error.get("input")
        if not isinstance(value, Mapping | list):
            msg += f", got {value!r}"
    return msg


def parse_config(raw: Any, source: str = "<config>") -> Experiment:
    """Validates an already-parsed YAML document.

    Raises:
        ConfigError: listing each invalid field as `dotted.path: problem, got value`.
    """
    if not isinstance(raw, Mapping):
        raise ConfigError(source, [f"expected a mapping of sections, got {type(raw).__name__}"])
    try:
        return Experiment.model_validate(raw)
    except ValidationError as exc:
        problems = [f"{_dotted(e['loc'], raw)}: {_message(e)}" for e in exc.errors()]
        raise ConfigError(source, problems) from None


def load_config(path: str | Path, overrides: Sequence[str] = ()) -> Experiment:
    """Reads an experiment YAML file, applies `key=value` overrides and validates it.

    Args:
        path: the YAML file.
        overrides: dotted overrides such as `codec.select.density=0.001`.

    Raises:
        ConfigError: naming the file and each bad field.
    """
    source = str(path)
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(source, [f"cannot read the file: {exc.strerror or exc}"]) from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(source, [f"{where}not valid YAML ({problem})"]) from None
    try:
        raw = apply_overrides(raw if isinstance(raw, dict) else {}, overrides) if overrides else raw
    except ValueError as exc:
        raise ConfigError(source, [str(exc)]) from None
    return parse_config(raw, source)
