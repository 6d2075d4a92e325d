"""CHOCO-SGD and SPARQ-SGD: gossip of compressed corrections to public model estimates.

Koloskova, Stich, Jaggi, "Decentralized Stochastic Optimization and Gossip Algorithms with
Compressed Communication" (ICML'19); Koloskova, Lin, Stich, Jaggi, "Decentralized Deep
Learning with Arbitrary Communication Compression" (ICLR'20). Per node i and round t:

1. x^{t+1/2} = local SGD steps from x^t;
2. q_i = C(x^{t+1/2} - x_hat_i), C the experiment's codec (any codec: top-k, QSGD, sign...);
3. send q_i to every neighbour (the same bytes to all);
4. x_hat_j += q_j for j in N_i and i itself: every holder of x_hat_j applies the same q_j,
   so the copies stay bit-for-bit equal to j's own estimate;
5. x^{t+1} = x^{t+1/2} + gamma * sum_j w_ij (x_hat_j - x_hat_i).

SPARQ-SGD (`thinwire.topologies.methods.sparq`) runs the same node with a `Trigger`: steps
2-5 happen only on synchronization rounds, and there only when the node fires; a node that
does not fire sends an empty message and its neighbours keep its estimate (q_i = 0). The
consensus step 5 runs on every synchronization round, fired or not.

Estimates start at the common initial model by default (every node derives it from the
seed; `estimates: zero` is the paper's x_hat = 0, whose first messages carry the model).

**Lost messages and restarts.** Both public implementations keep only x_hat_i and the
weighted sum s_i = sum_j w_ij x_hat_j (algorithms.md §1.3). That is exact while every
message arrives, but a message that does not arrive leaves the receiver's x_hat_j behind
the sender's for good, and a silent drift in s_i cannot be repaired without knowing which
x_hat_j it came from. This node therefore keeps one copy of x_hat_j per neighbour (memory
(deg + 2) d floats instead of 3 d) and resynchronizes, driven by the receiver, which is the
one that knows what it used:

- a neighbour whose message is missing or rejected in a round is marked *stale*: its
  corrections are ignored and it drops out of step 5 (its weight stays with this node)
  until a full estimate of it arrives;
- a node sends a stale neighbour its own full estimate (a MODEL message, fp32 dense)
  flagged `ask`: "send me yours"; the neighbour answers with its full estimate in the next
  round, unless it sent one in the same round already (the two crossed);
- a node that missed rounds (restarted, or caught up with the others) marks every
  neighbour stale (their estimates moved meanwhile, and its own may lag what it pushed
  before it died), so both sides exchange full estimates once and carry on.

A lost message therefore costs one or two dense messages on that link, and nothing drifts.
On a graph redrawn every round, x_hat_j would be missing from most of j's messages, so the
config refuses CHOCO and SPARQ there.

Tuning: gamma trades consensus speed against compression noise; with the identity codec
gamma = 1 is D-PSGD. ChocoSGD's grid found 0.04 for top-1% on convex problems and
0.45-0.5 for sign compression on ResNet-20; sweep it for your codec.
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple

import torch

from thinwire.codecs.model import ModelCodec
from thinwire.codecs.receive import open_payloads
from thinwire.config import ChocoGossip, SparqGossip
from thinwire.learning import flatten
from thinwire.seeding import peer_codec_seed
from thinwire.topologies.methods.node import (
    Absorbed,
    Inbox,
    NodeCore,
    Prepared,
    Received,
    StateNode,
    asks,
    elapsed,
)
from thinwire.topologies.methods.sparq import Trigger
from thinwire.wire import Kind

__all__ = ["ChocoNode", "ChocoState", "Link"]


class Link(NamedTuple):
    """What a node knows about one neighbour's estimate and its own estimate there."""

    current: bool  # this node's copy of the neighbour's estimate equals the neighbour's
    owed: bool  # the neighbour asked for this node's full estimate: send it next round
    sent_full: bool  # the neighbour got this node's full estimate in the current round


class ChocoState(NamedTuple):
    """What a CHOCO or SPARQ node keeps between rounds."""

    x: torch.Tensor  # (d,) float32: the model (x^{t+1/2} between prepare and absorb)
    estimate: torch.Tensor  # (d,) float32: x_hat_i, this node's public estimate
    copies: dict[str, torch.Tensor]  # neighbour id -> (d,) float32: x_hat_j as held here
    links: dict[str, Link]  # neighbour id -> the link's synchronization flags
    codec: dict[str, Any]  # the correction codec's state, per payload


class ChocoNode(StateNode):
    """A CHOCO-SGD peer, or a SPARQ-SGD peer when built from a `SparqGossip` section.

    Args:
        core: the node's shared parts.
        config: the `gossip` section (choco or sparq).

    Raises:
        ValueError: on a time-varying graph, or with a codec that has error feedback.
    """

    def __init__(self, core: NodeCore, config: ChocoGossip | SparqGossip) -> None:
        experiment = core.experiment
        if core.schedule.time_varying:
            raise ValueError(f"gossip.kind {config.kind} needs a fixed graph (see the module doc)")
        if experiment.codec.error_feedback.kind != "none":
            raise ValueError(
                f"gossip.kind {config.kind} keeps x - x_hat as its memory; the codec must "
                "not add error feedback"
            )
        self.core = core
        self.gamma = config.gamma
        self.trigger = (
            Trigger(config.threshold, sync_every=config.sync_every)
            if isinstance(config, SparqGossip)
            else None
        )
        self.codec = ModelCodec(
            experiment.codec,
            core.workspace.spec,
            seed=peer_codec_seed(experiment.seed, core.index),
        )
        self._specs = {
            Kind.GOSSIP_CORRECTION: self.codec.wire_spec,
            Kind.MODEL: core.dense.wire_spec,
        }
        self.neighbours = core.neighbours(0)
        start = core.initial if config.estimates == "initial" else torch.zeros_like(core.initial)
        self.state = ChocoState(
            x=core.initial.clone(),
            estimate=start.clone(),
            copies={str(j): start.clone() for j in self.neighbours},
            links={
                str(j): Link(current=True, owed=False, sent_full=False) for j in self.neighbours
            },
            codec=self.codec.init(core.template),
        )

    def communicates(self, round: int) -> bool:
        """CHOCO: every round; SPARQ: its synchronization rounds."""
        return self.trigger is None or self.trigger.synchronizes(round)

    def _fires(self, round: int, distance: torch.Tensor) -> bool:
        if self.trigger is None:
            return True
        squared = float(torch.dot(distance, distance))
        return self.trigger.fires(round=round, lr=self.core.learning_rate(round), distance=squared)

    def prepare(self, round: int) -> Prepared:
        """Trains; on an exchange round, compresses x - x_hat and addresses each neighbour.

        In-sync neighbours get the correction (or, when SPARQ does not fire, an empty
        message); a stale neighbour, or one that asked, gets the full estimate instead.
        """
        start = time.perf_counter()
        state = self.state
        x, stats = self.core.train(state.x, round)
        if not self.communicates(round):
            self.state = state._replace(x=x)
            return Prepared({}, False, stats.loss, (), elapsed(start))
        fired = self._fires(round, x - state.estimate)
        estimate, codec_state, correction = state.estimate, state.codec, b""
        if fired:
            payloads, codec_state = self.codec.encode(
                self.core.named(x - state.estimate), state.codec
            )
            step = flatten(self.codec.decode(payloads, self.core.workspace.device))
            estimate = state.estimate + step
            correction = self.core.encode(round, Kind.GOSSIP_CORRECTION, payloads)
        messages: dict[int, bytes] = {}
        links: dict[str, Link] = {}
        full: dict[bool, bytes] = {}
        for j in self.neighbours:
            link = state.links[str(j)]
            if link.owed or not link.current:
                ask = not link.current
                if ask not in full:
                    full[ask] = self.core.encode_dense(round, estimate, ask=ask)
                messages[j] = full[ask]
                links[str(j)] = Link(current=link.current, owed=False, sent_full=True)
            else:
                messages[j] = correction
                links[str(j)] = link._replace(sent_full=False)
        self.state = ChocoState(x, estimate, state.copies, links, codec_state)
        refreshed = tuple(j for j in self.neighbours if links[str(j)].sent_full)
        return Prepared(messages, fired, stats.loss, refreshed, elapsed(start))

    def open(self, sender: int, round: int, data: bytes) -> Received:
        """Validates a correction, a full estimate, or (SPARQ) a silence, and decodes it.

        A correction goes through the shared receive path (`open_payloads`): its forms must
        be this run's codec's, and the decoded values finite and within
        `aggregation.max_norm_ratio` of this node's model norm.
        """
        silence = self.trigger is not None
        update = self.core.read(sender, round, data, self._specs, silence=silence)
        x = self.state.x
        if update is None or update.kind == Kind.MODEL:
            return self.core.received(sender, round, update, len(data), reference=x)
        decoded = open_payloads(
            self.codec,
            update.tensors,
            self.core.workspace.device,
            max_norm=self.core.max_norm(x),
            what="correction",
        )
        values = flatten(decoded)
        return Received(sender, round, update.kind, values, None, asks(update), len(data))

    def absorb(self, round: int, inbox: Inbox) -> Absorbed:
        """Applies the round's corrections and estimates, then takes the consensus step."""
        start = time.perf_counter()
        if not self.communicates(round):
            if inbox:
                raise ValueError(f"round {round} exchanges nothing, but messages were given")
            return Absorbed({}, (), (), elapsed(start))
        accepted, absorbed = self.core.unpack(round, inbox, self.open)
        state = self.state
        copies = dict(state.copies)
        links: dict[str, Link] = {}
        for j in self.neighbours:
            key, link, message = str(j), state.links[str(j)], accepted.get(j)
            if message is None:  # missing or rejected: j may have moved its estimate
                links[key] = Link(current=False, owed=link.owed, sent_full=False)
                continue
            owed = link.owed or (message.ask and not link.sent_full)
            current = link.current
            if message.kind == Kind.MODEL:
                copies[key], current = message.values, True
            elif message.kind == Kind.GOSSIP_CORRECTION and current:
                copies[key] = copies[key] + message.values
            links[key] = Link(current=current, owed=owed, sent_full=False)
        weights = self.core.weights(round)
        pull = torch.zeros_like(state.x)
        for j in self.neighbours:
            if links[str(j)].current:
                pull += weights[j] * (copies[str(j)] - state.estimate)
        x = state.x + self.gamma * pull
        self.state = state._replace(x=x, copies=copies, links=links)
        return absorbed._replace(compute_s=elapsed(start))

    def desynchronized(self) -> None:
        """After missed rounds every link resynchronizes: full estimates both ways.

        Neighbours' estimates moved meanwhile, and this node's own may lag what it pushed
        before a crash.
        """
        stale = Link(current=False, owed=True, sent_full=False)
        self.state = self.state._replace(links=dict.fromkeys(self.state.links, stale))
