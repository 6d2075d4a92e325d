"""Decentralized topologies, by concern; import what you need from its subpackage.

- `thinwire.topologies.graph`: communication graphs, mixing weights and the round-by-round
  `GraphSchedule`, with summaries and drawings (`thinwire topology`).
- `thinwire.topologies.methods`: the gossip methods (D-PSGD, CHOCO-SGD, SPARQ-SGD, JWINS),
  transport-free round logic over bytes, and `build_node`.
- `thinwire.topologies.transport`: the gRPC peer service and client, mailbox, admission
  limits, byte ledger and mutual TLS.
- `thinwire.topologies.runtime`: `simulate_gossip` (all nodes in one process) and
  `run_peer` (one node as a `thinwire peer` process).

`naming` (a node's `node-<id>` name) and `checkpoint` (a peer's saved state) sit here, shared
by several of them. This package re-exports nothing, so that importing the graphs or the
methods loads no gRPC, cryptography or matplotlib.
"""

__all__: list[str] = []
