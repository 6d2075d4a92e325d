"""Every derived seed of a run, one function per purpose.

A run has one seed (`experiment.seed`); every random choice derives its own 64-bit seed
from it, so runs replay exactly, no global RNG is touched (STYLE rule 4), and two uses never
share a stream by accident. Each purpose below owns a distinct *stream tag*, the first part
mixed after the seed; reading this module is how to see that no two collide.

Two mixers:

- `mix(seed, *parts)`: SplitMix64 chained over the parts (pure Python integers, the same on
  every device and platform). Every stream of the run, of the codecs and of the DDP hook
  uses it; it is also the hash inside algorithms (the Feistel keys of seeded supports).
- `graph_draw_seed` / `graph_round_seed`: NumPy's `SeedSequence`, which the graph builders
  hand to networkx and NumPy generators.

Example:
    >>> from thinwire.seeding import train_seed, uplink_codec_seed
    >>> train_seed(0, client=3, round=1) != train_seed(0, client=3, round=2)
    True
    >>> uplink_codec_seed(0, client=3) == uplink_codec_seed(0, client=3)
    True
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = [
    "dp_mask_seed",
    "dp_noise_seed",
    "downlink_codec_seed",
    "graph_draw_seed",
    "graph_round_seed",
    "jwins_alpha_seed",
    "mix",
    "peer_codec_seed",
    "peer_train_seed",
    "policy_seed",
    "sampling_seed",
    "stage_seed",
    "step_seed",
    "tensor_seed",
    "tensor_step_seed",
    "train_seed",
    "uplink_codec_seed",
    "vote_tie_seed",
    "bucket_seed",
    "client_speed_seed",
    "dispatch_seed",
]

_MASK64 = (1 << 64) - 1

# Stream tags of the run seed. Star streams are small integers, gossip streams 101-103, the
# asynchronous star's 201-202, the DP mask "mask" and the vote's tie-break "vote" in ASCII;
# the downlink's tag 0 is followed by nothing.
_DOWNLINK, _UPLINK, _TRAIN, _POLICY, _SAMPLING, _DP_NOISE = 0, 1, 2, 3, 4, 5
_PEER_TRAIN, _PEER_CODEC, _JWINS_ALPHA = 101, 102, 103
_DP_MASK = 0x6D61736B
_SPEED, _DISPATCH = 201, 202  # the asynchronous star's streams
_VOTE_TIE = 0x766F7465  # "vote"


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def mix(seed: int, *parts: int) -> int:
    """A 64-bit value mixed from `seed` and integers such as a round or tensor index.

    The primitive under every stream below; use a named stream for a new random choice and
    `mix` only to hash inside an algorithm.
    """
    x = _splitmix64(seed & _MASK64)
    for part in parts:
        x = _splitmix64(x ^ (part & _MASK64))
    return x


# ----------------------------------------------------------------- streams of the run seed


def downlink_codec_seed(run_seed: int) -> int:
    """The downlink codec's seed: one for the server and every client (they must agree)."""
    return mix(run_seed, _DOWNLINK)


def uplink_codec_seed(run_seed: int, client: int) -> int:
    """A star client's uplink codec seed (its random-k indices, stochastic rounding)."""
    return mix(run_seed, _UPLINK, client)


def train_seed(run_seed: int, client: int, round: int) -> int:
    """A star client's batch order in `round`."""
    return mix(run_seed, _TRAIN, client, round)


def policy_seed(run_seed: int, client: int) -> int:
    """A star client's send-policy seed (random-access coins and slots derive from it)."""
    return mix(run_seed, _POLICY, client)


def sampling_seed(run_seed: int, round: int) -> int:
    """Which clients the server selects in `round` (partial participation)."""
    return mix(run_seed, _SAMPLING, round)


def dp_noise_seed(run_seed: int, client: int, round: int) -> int:
    """A star client's DP-SGD Gaussian noise in `round`."""
    return mix(run_seed, _DP_NOISE, client, round)


def dp_mask_seed(run_seed: int, round: int) -> int:
    """The random-sparsification mask of `round`, shared by every client."""
    return mix(run_seed, _DP_MASK, round)


def client_speed_seed(run_seed: int) -> int:
    """The simulated compute-speed factors of an asynchronous star's clients (drawn once)."""
    return mix(run_seed, _SPEED)


def dispatch_seed(run_seed: int, version: int) -> int:
    """Which idle clients an asynchronous server starts after its step to `version`."""
    return mix(run_seed, _DISPATCH, version)


def vote_tie_seed(run_seed: int, round: int) -> int:
    """The majority-vote server's tie-break among equally voted coordinates in `round`."""
    return mix(run_seed, _VOTE_TIE, round)


def peer_train_seed(run_seed: int, peer: int, round: int) -> int:
    """A gossip peer's batch order in `round`."""
    return mix(run_seed, _PEER_TRAIN, peer, round)


def peer_codec_seed(run_seed: int, peer: int) -> int:
    """A gossip peer's codec seed."""
    return mix(run_seed, _PEER_CODEC, peer)


def jwins_alpha_seed(run_seed: int, peer: int, round: int) -> int:
    """A JWINS peer's random cut-off draw in `round`."""
    return mix(run_seed, _JWINS_ALPHA, peer, round)


def graph_draw_seed(seed: int, attempt: int) -> int:
    """The `attempt`-th draw of a static random graph (redrawn until connected)."""
    return int(np.random.SeedSequence([seed, 0, attempt]).generate_state(1, np.uint64)[0])


def graph_round_seed(seed: int, round: int) -> int:
    """The graph of `round` of a time-varying topology."""
    return int(np.random.SeedSequence([seed, round]).generate_state(1, np.uint64)[0])


# -------------------------------------------------------- streams of a component's own seed


def stage_seed(codec_seed: int, stage: int) -> int:
    """The seed of a codec's stage (0 transform, 1 selector, 2 quantizer, 3 low-rank codec)."""
    return mix(codec_seed, stage)


def tensor_seed(seed: int, index: int) -> int:
    """The seed of the `index`-th tensor (parameter position) of a per-tensor codec."""
    return mix(seed, index)


def tensor_step_seed(seed: int, index: int, step: int) -> int:
    """The `index`-th tensor's seed at `step`, for per-tensor state that is redrawn each step."""
    return mix(seed, index, step)


def step_seed(seed: int, step: int) -> int:
    """A stateful stage's seed for its `step`-th call (the (seed, step) pair it keeps)."""
    return mix(seed, step)


def bucket_seed(seed: int, layout: Sequence[int]) -> int:
    """The codec seed of a DDP gradient bucket holding the parameters at `layout`."""
    return mix(seed, *layout)
