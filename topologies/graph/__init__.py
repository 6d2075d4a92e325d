"""Graph maths of a decentralized run: communication graphs, mixing weights, schedules.

`build_graph` turns the experiment's `topology:` section into a graph, `mixing_matrix` into
the weights each node averages with, and `GraphSchedule` serves both round by round (for
time-varying graphs too), the same for every peer. `summarize`, `summary_table` and
`draw_graph` describe a topology (`thinwire topology`); matplotlib loads only on drawing.

Importing this package loads no gRPC, TLS or plotting library.
"""

from thinwire.topologies.graph.graphs import (
    GraphError,
    build_graph,
    describe_components,
    is_time_varying,
    read_edge_list,
    require_connected,
    torus_shape,
)
from thinwire.topologies.graph.mixing import (
    MixingError,
    Spectrum,
    load_mixing_matrix,
    max_degree_weights,
    metropolis_hastings,
    mixing_matrix,
    spectrum,
    validate_mixing,
)
from thinwire.topologies.graph.schedule import GraphSchedule, RoundGraph
from thinwire.topologies.graph.summary import (
    SERVER,
    TopologySummary,
    draw_graph,
    server_star,
    summarize,
    summary_table,
)

__all__ = [
    "GraphError",
    "GraphSchedule",
    "MixingError",
    "RoundGraph",
    "SERVER",
    "Spectrum",
    "TopologySummary",
    "build_graph",
    "describe_components",
    "draw_graph",
    "is_time_varying",
    "load_mixing_matrix",
    "max_degree_weights",
    "metropolis_hastings",
    "mixing_matrix",
    "read_edge_list",
    "require_connected",
    "server_star",
    "spectrum",
    "summarize",
    "summary_table",
    "torus_shape",
    "validate_mixing",
]
