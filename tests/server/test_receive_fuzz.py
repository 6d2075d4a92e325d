"""The whole receive path under mutated messages from every codec (hypothesis).

wire decode, form check, codec decode, bound, aggregation: whatever a client sends, the
only refusal is a `WireError` (never a decoder bug), the model stays finite and keeps its
shapes, and a message the path accepts decodes to finite tensors of the spec's shapes.
"""

from __future__ import annotations

import logging
import random

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from receive_fuzz import CODECS, MUTATIONS, mutate, receive, servers

from thinwire.codecs.forms import support_form, values_form
from thinwire.codecs.receive import open_payloads
from thinwire.wire import WireError, decode

SERVERS = {s.name: s for s in servers()}
DONORS = [s.valid for s in SERVERS.values()]
FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(autouse=True)
def quiet(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR)  # a refused update logs a warning; thousands here


def test_every_codec_has_a_server_and_its_valid_update_is_accepted() -> None:
    assert set(SERVERS) == set(CODECS)
    for server in SERVERS.values():
        assert receive(server, server.valid).stage == "accepted", server.name


@pytest.mark.slow
@FUZZ
@given(
    codec=st.sampled_from(sorted(CODECS)),
    kind=st.sampled_from(sorted(MUTATIONS)),
    seed=st.integers(0, 2**32 - 1),
)
def test_a_mutated_update_is_averaged_or_refused_never_more(codec: str, kind: str, seed: int):
    server = SERVERS[codec]
    data = mutate(random.Random(seed), kind, server.valid, DONORS)
    outcome = receive(server, data)  # asserts a finite model of the right shapes
    assert outcome.stage != "internal", outcome.reason


@pytest.mark.slow
@FUZZ
@given(
    codec=st.sampled_from(sorted(CODECS)),
    kind=st.sampled_from(sorted(MUTATIONS)),
    seed=st.integers(0, 2**32 - 1),
)
def test_decode_then_open_raises_only_wire_errors(codec: str, kind: str, seed: int):
    server = SERVERS[codec]
    uplink = server.aggregator.uplink
    data = mutate(random.Random(seed), kind, server.valid, DONORS)
    try:
        update = decode(data, uplink.wire_spec)
        decoded = open_payloads(uplink, update.tensors, torch.device("cpu"), max_norm=1e6)
    except WireError:
        return
    for spec in uplink.spec:
        assert decoded[spec.name].shape == spec.shape
        assert bool(torch.isfinite(decoded[spec.name]).all())


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_a_foreign_form_is_refused_by_the_form_check(codec: str) -> None:
    # Every other codec's valid update, sent to this codec's server: refused before decode
    # unless each of its payloads happens to be of a form this codec also sends (a
    # threshold update whose payloads are all sparse fp32 is a top-k update on the wire).
    server = SERVERS[codec]
    uplink = server.aggregator.uplink
    for other in SERVERS.values():
        outcome = receive(server, other.valid)
        try:
            payloads = decode(other.valid, uplink.wire_spec).tensors
        except WireError:
            assert outcome.stage == "wire", (other.name, outcome)
            continue
        fits = all(
            support_form(p.support) in uplink.forms[name].supports
            and values_form(p.values) in uplink.forms[name].values
            for name, p in payloads.items()
        )
        assert outcome.stage == ("accepted" if fits else "form"), (other.name, outcome)
        assert fits or other.name != codec
