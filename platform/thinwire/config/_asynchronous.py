"""The `server` section: the star's buffered asynchronous server (FedBuff) and its clients' speeds.

Without the section the star is synchronous: every round waits for all its participants.
With `server: {kind: buffered_async}` the server keeps `concurrency` clients training at
once, adds each update that arrives to a buffer weighted by a staleness function of how many
server steps it missed, and steps every `buffer` arrivals (`thinwire.server.buffered`; the
simulator's event loop is `thinwire.runtimes.asynchronous`). One server step is one round of
`train.rounds` and of the records.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from thinwire.config._base import NonNegativeFloat, PositiveFloat, PositiveInt, Section
from thinwire.registry import STALENESS, Kinded


@STALENESS.declare
class ConstantStaleness(Section):
    """s(tau) = 1: every update counts in full however stale (FedBuff without a discount)."""

    kind: Literal["constant"] = "constant"


@STALENESS.declare
class PolynomialStaleness(Section):
    """s(tau) = 1 / (1 + tau)^a; FedBuff's default is a = 0.5."""

    kind: Literal["polynomial"] = "polynomial"
    a: NonNegativeFloat = 0.5
    """Exponent; 0 is the constant function."""


@STALENESS.declare
class HingeStaleness(Section):
    """s(tau) = 1 for tau <= b, else 1 / (a (tau - b) + 1) (FedAsync's hinge, Xie et al. 2019)."""

    kind: Literal["hinge"] = "hinge"
    a: NonNegativeFloat = 10.0
    """Slope of the discount past b."""
    b: Annotated[int, Field(ge=0)] = 4
    """Staleness up to which an update counts in full."""


Staleness = Annotated[Kinded, STALENESS]
"""Any registered staleness function (`thinwire.server.buffered` registers the factories)."""


class ClientSpeeds(Section):
    """Simulated compute time of one local training task: `compute_s` times a client's factor.

    The factors are drawn once per run, lognormal with sigma `spread` (seeded by the
    experiment seed), unless `factors` lists them; a factor of 2 trains half as fast. The
    simulator adds the channel's transfer times to them; a Flower run takes real time.
    """

    compute_s: NonNegativeFloat = 1.0
    """Simulated seconds of one client's local training at factor 1."""
    spread: NonNegativeFloat = 0.5
    """Sigma of the lognormal factors (0: every client equally fast)."""
    factors: list[PositiveFloat] | None = None
    """One factor per client, instead of drawing them."""


class BufferedAsync(Section):
    """FedBuff (Nguyen et al., AISTATS 2022): asynchronous clients, a buffer of K updates.

    `concurrency` (M) clients train at once, each from the model version it was sent. An
    arriving update joins the buffer weighted by `staleness` of tau = (server version now) -
    (its version); every `buffer` (K) arrivals the server takes its step (`train.server`)
    on the buffer's aggregate, and the K clients that filled it (or, with M below
    `data.clients`, K clients drawn from the idle ones) start again from the new model.
    K = M = `data.clients` with constant staleness is the synchronous star.
    """

    kind: Literal["buffered_async"] = "buffered_async"
    buffer: PositiveInt = 2
    """K: arrivals per server step."""
    concurrency: PositiveInt | None = None
    """M: clients training at once; None: every client."""
    staleness: Staleness = PolynomialStaleness()
    speeds: ClientSpeeds = ClientSpeeds()
    update_timeout_s: PositiveFloat = 600.0
    """Flower: how long the server waits for a client's update before it gives the client
    up (a dropout) and sends another client the model, so the buffer never stalls."""

    def in_flight(self, clients: int) -> int:
        """M for `clients` clients."""
        return self.concurrency if self.concurrency is not None else clients

    def check_experiment(self, experiment: Any, where: str) -> None:
        """K <= M <= clients, and only the star settings an asynchronous server can honour."""
        problems = _problems(self, experiment, where)
        if problems:
            raise ValueError("; ".join(problems))


def _problems(section: BufferedAsync, experiment: Any, where: str) -> list[str]:
    clients = experiment.data.clients
    m = section.in_flight(clients)
    problems = []
    if not section.buffer <= m <= clients:
        problems.append(
            f"{where} needs buffer <= concurrency <= data.clients, got buffer {section.buffer}, "
            f"concurrency {m}, {clients} clients"
        )
    factors = section.speeds.factors
    if factors is not None and len(factors) != clients:
        problems.append(f"{where}.speeds.factors lists {len(factors)} values for {clients} clients")
    if experiment.decentralized:
        problems.append(f"{where} is the star's server; gossip peers have none")
    if experiment.runtime.kind not in ("simulation", "flower"):
        problems.append(
            f"{where} runs in the simulation or on Flower, not {experiment.runtime.kind!r}"
        )
    if getattr(experiment.runtime, "checkpoint_every", 0):
        problems.append(
            f"{where}: runtime.checkpoint_every is not supported (an asynchronous run's "
            "clients are mid-task at every step); set it to 0"
        )
    if getattr(experiment.runtime, "client_eval", False):
        problems.append(f"{where}: runtime.client_eval is not supported; remove it")
    if experiment.train.participation != 1.0:
        problems.append(f"{where}.concurrency sets who trains; remove train.participation")
    if experiment.policy.kind != "always":
        problems.append(
            f"{where}: policy {experiment.policy.kind!r} decides per synchronous round; "
            "an asynchronous client always sends (policy kind 'always')"
        )
    if experiment.downlink is not None:
        problems.append(
            f"{where}: a downlink codec keeps one public copy in step with every client; "
            "asynchronous clients hold different versions, so remove downlink"
        )
    if experiment.privacy is not None:
        problems.append(f"{where}: privacy is not supported with an asynchronous server")
    if experiment.aggregation.rule.kind == "sign_vote":
        problems.append(
            f"{where}: sign_vote ignores the magnitudes a staleness weight scales; use the "
            "mean, trimmed_mean or median rule"
        )
    return problems
