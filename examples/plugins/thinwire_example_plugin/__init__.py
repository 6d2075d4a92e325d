"""An example thinwire plugin: one codec selector and one send policy, registered at import.

Importing this package registers

- selector `aged_topk` (`codec.select`): top-k by magnitude times age, so that no
  coordinate starves (`thinwire_example_plugin.selector`);
- policy `norm_skip` (`policy`): a client stays silent while its accumulated update is
  shorter than a threshold (`thinwire_example_plugin.policy`).

Each registration binds the kind to its config section and its factory in one call; see
docs/extending.md for the walk-through.
"""

from thinwire.registry import POLICIES, SELECTORS
from thinwire_example_plugin.policy import NormSkip, NormSkipState, norm_skip
from thinwire_example_plugin.selector import AgedTopK, AgedTopKState, aged_top_k

__all__ = [
    "AgedTopK",
    "AgedTopKState",
    "NormSkip",
    "NormSkipState",
    "aged_top_k",
    "norm_skip",
]

SELECTORS.register(
    "aged_topk",
    section=AgedTopK,
    factory=lambda section, seed: aged_top_k(section.density, power=section.power),
)
POLICIES.register(
    "norm_skip",
    section=NormSkip,
    factory=lambda section, context: norm_skip(section.threshold, max_silent=section.max_silent),
)
