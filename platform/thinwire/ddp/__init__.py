"""Data-parallel training on torch.distributed with thinwire's codecs.

- `register(model, codec=...)`: a DDP communication hook that compresses each gradient
  bucket with a thinwire codec, `PowerSGD`, `ACPSGD` or `OkTopk`, and exchanges it with the
  collective that suits it (allreduce, all-gather of serialized payloads, ACP-SGD's and
  PowerSGD's factor allreduces, Ok-Topk's sparse allreduce).
- `leave_process_group()`: the end of a rank, safe with a DDP module still about.
- `thinwire.runtimes.ddp`: the `runtime: {kind: ddp}` experiment runtime behind
  `thinwire ddp exp.yaml --nproc N` (imported on demand; it pulls in the star's roles).

Example::

    model = torch.nn.parallel.DistributedDataParallel(net)
    thinwire.ddp.register(model, codec=thinwire.ddp.PowerSGD(rank=2))
"""

from thinwire.ddp.acpsgd import ACPSGD
from thinwire.ddp.collectives import Traffic, leave_process_group
from thinwire.ddp.hook import HookState, HookStats, Method, register
from thinwire.ddp.oktopk import OkTopk, OkTopkState
from thinwire.ddp.powersgd import PowerSGD

__all__ = [
    "ACPSGD",
    "HookState",
    "HookStats",
    "Method",
    "OkTopk",
    "OkTopkState",
    "PowerSGD",
    "Traffic",
    "leave_process_group",
    "register",
]
