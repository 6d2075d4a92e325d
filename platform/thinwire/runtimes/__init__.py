"""The runtimes: what drives the roles (server, clients, gossip nodes) round by round.

- `thinwire.runtimes.simulation`: every role in one process (`thinwire run`), with
  `thinwire.runtimes.run_folder` writing its run folder;
- `thinwire.runtimes.flower`: the star as a Flower ServerApp and ClientApp
  (`thinwire server`, `thinwire client`);
- `thinwire.runtimes.ddp`: the star's clients as ranks of a torch.distributed job
  (`thinwire ddp`).

Gossip's runtime (real peers, `thinwire peer`) lives with the gossip nodes in
`thinwire.topologies`. Each runtime registers on `thinwire.registry.RUNTIMES` how `thinwire
run` starts it (`run_folder.run_experiment` dispatches on `runtime.kind`); each module is
imported on demand: importing this package loads none of them.
"""

__all__: list[str] = []
