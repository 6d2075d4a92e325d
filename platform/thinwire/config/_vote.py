"""The star's sparsity vote: sparse SGD with majority voting (Ozfatura, Ozfatura, Gündüz 2020)."""

from __future__ import annotations

from typing import Any, Literal

from thinwire.config._base import Density, Section


class MajorityVote(Section):
    """Clients vote a common support of K = ceil(density * d) coordinates, then send values.

    Each sampled client votes its top-K indices of a_i = update + residual; the server
    keeps the K most voted coordinates S and every client sends a_i on S as K plain
    values, with no indices (the residual keeps the rest). The server's model change
    travels back on S too. See `thinwire.voting`.
    """

    density: Density
    """Fraction of the flattened model on the common support: K = ceil(density * d)."""
    mask: Literal["previous", "two_phase"] = "previous"
    """'two_phase': each round votes, then sends values on the mask just voted (two
    exchanges per round; simulator only). 'previous': round t sends values on the mask
    voted in round t - 1, with its vote for the next one (one exchange; round 1 only
    votes)."""

    def check_experiment(self, experiment: Any, where: str) -> None:
        """The vote replaces the uplink and downlink codecs, the send policy and the step."""
        from thinwire.config._codec import CodecConfig  # the experiment imports this module

        problems = []
        if experiment.decentralized:
            problems.append("it runs the star (topology: star)")
        if experiment.codec != CodecConfig() or experiment.downlink is not None:
            problems.append("it is the uplink and downlink codec: leave codec and downlink unset")
        if experiment.policy.kind != "always":
            problems.append("every sampled client votes and sends: policy kind 'always'")
        if experiment.privacy is not None:
            problems.append("privacy is not combined with it")
        if experiment.train.server.momentum != 0.0:
            problems.append("the downlink sends the step on S only: train.server.momentum 0")
        if getattr(experiment, "server", None) is not None:
            problems.append("every round votes together: leave the asynchronous server unset")
        runtime = experiment.runtime.kind
        if runtime not in ("simulation", "flower"):
            problems.append(f"it runs in the simulator and on Flower, not runtime {runtime!r}")
        elif self.mask == "two_phase" and runtime != "simulation":
            problems.append(
                f"mask 'two_phase' needs two exchanges per round, which runtime {runtime!r} "
                "does not run (use mask 'previous')"
            )
        if problems:
            raise ValueError(f"{where} (majority vote): " + "; ".join(problems))
