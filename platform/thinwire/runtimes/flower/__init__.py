"""The Flower runtime: thinwire's star as a Flower ServerApp and ClientApp.

The server side (`server_app`, `strategy`, `rounds`, `exchange`, `roster`, `run_config`,
`superlink`, `deploy`) drives `thinwire.server.Aggregator`; the client side (`client_app`,
`partition`, `state`, `supernode`, `node_files`) drives `thinwire.clients.Client`. The
message schema both apps speak (`messages`) lives here, beside both, so neither role
imports the other.
"""

from __future__ import annotations

from typing import Any, NoReturn

from thinwire.config import FlowerRuntime
from thinwire.registry import RUNTIMES

__all__: list[str] = []


def _refuse_run(section: Any, experiment: Any, options: Any) -> NoReturn:
    # `thinwire run` starts one process; a deployment is a SuperLink, a ServerApp and
    # one SuperNode per partition.
    del section, experiment, options
    raise ValueError(
        "runtime.kind is 'flower': a Flower deployment runs as several processes; run it "
        "with `thinwire server` and one `thinwire client --partition i` per client"
    )


RUNTIMES.register("flower", section=FlowerRuntime, factory=_refuse_run)
