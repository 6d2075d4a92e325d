"""A node's round report and the JSON-lines log it is written to."""

from __future__ import annotations

from thinwire.topologies.methods.node import Absorbed, Prepared
from thinwire.topologies.runtime.reports import NodeLog, NodeReport, read_node_log


def report() -> NodeReport:
    prepared = Prepared(
        {3: b"abc", 1: b""}, fired=True, train_loss=0.5, refreshed=(3,), compute_s=0.1
    )
    absorbed = Absorbed({1: 7}, missing=(3,), rejected=(), compute_s=0.2)
    return NodeReport.of(round=4, node=2, lr=0.05, prepared=prepared, absorbed=absorbed)


def test_a_report_counts_the_bytes_of_each_message_per_neighbour():
    r = report()
    assert r.sent == {1: 0, 3: 3}
    assert list(r.sent) == [1, 3]
    assert (r.bytes_sent, r.bytes_received) == (3, 7)
    assert (r.missing, r.refreshed, r.fired) == ((3,), (3,), True)
    assert r.compute_s == 0.1 + 0.2


def test_reports_round_trip_through_json():
    r = report()
    assert NodeReport.from_json(r.to_json()) == r
    assert r.to_json()["sent"] == {"1": 0, "3": 3}


def test_the_log_appends_one_line_per_report_with_runtime_extras(tmp_path):
    path = tmp_path / "logs" / "node-2.jsonl"
    with NodeLog(path) as log:
        log.write(report(), wall_s=1.5)
    with NodeLog(path) as log:  # a restarted peer continues its log
        log.write(report()._replace(round=5))
    lines = read_node_log(path)
    assert [line["round"] for line in lines] == [4, 5]
    assert lines[0]["wall_s"] == 1.5
    assert NodeReport.from_json(lines[0]) == report()
