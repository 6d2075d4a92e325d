"""Transport settings and the gRPC options they declare."""

from __future__ import annotations

import json

import pytest

from thinwire.config import GossipRuntime
from thinwire.topologies.transport import (
    TransportSettings,
    channel_options,
    server_options,
    service_config,
)

RUNTIME = GossipRuntime(run_id="r", pattern="peer-{i}:50051", insecure=True)


def test_defaults_are_the_config_defaults():
    assert TransportSettings.from_runtime(RUNTIME) == TransportSettings()


def test_settings_follow_the_runtime_section():
    runtime = RUNTIME.model_copy(
        update={"deadline_s": 3.0, "chunk_bytes": 4096, "retries": 0, "keepalive_s": 5.0}
    )
    settings = TransportSettings.from_runtime(runtime)
    assert (settings.timeout_s, settings.chunk_bytes, settings.retries) == (3.0, 4096, 0)


def test_retry_policy_retries_unavailable_and_a_full_receiver_with_exponential_backoff():
    config = json.loads(service_config(TransportSettings(retries=3, backoff_s=0.25)))
    (method,) = config["methodConfig"]
    assert method["name"] == [{"service": "thinwire.topologies.v1.Gossip"}]
    assert method["retryPolicy"] == {
        "maxAttempts": 4,
        "initialBackoff": "0.250s",
        "maxBackoff": "2.000s",
        "backoffMultiplier": 2,
        "retryableStatusCodes": ["UNAVAILABLE", "RESOURCE_EXHAUSTED"],
    }
    assert (
        "retryPolicy"
        not in json.loads(service_config(TransportSettings(retries=0)))["methodConfig"][0]
    )


def test_channel_and_server_options():
    settings = TransportSettings(chunk_bytes=2**20, keepalive_s=30)
    channel = dict(channel_options(settings))
    server = dict(server_options(settings))
    assert channel["grpc.max_send_message_length"] == settings.frame_limit > 2**20
    assert server["grpc.max_receive_message_length"] == settings.frame_limit
    assert channel["grpc.enable_retries"] == 1
    assert channel["grpc.per_rpc_retry_buffer_size"] >= 2 * settings.frame_limit
    assert channel["grpc.keepalive_time_ms"] == server["grpc.keepalive_time_ms"] == 30_000
    assert server["grpc.http2.min_ping_interval_without_data_ms"] <= 30_000
    assert server["grpc.so_reuseport"] == 0


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("chunk_bytes", 0, "chunk_bytes must be >= 1"),
        ("retries", 5, "retries must be in 0..4"),
        ("timeout_s", 0, "timeout_s must be > 0"),
        ("max_message_bytes", -1, "max_message_bytes must be >= 0"),
    ],
)
def test_bad_settings_are_refused(field, value, message):
    with pytest.raises(ValueError, match=message):
        TransportSettings(**{field: value})
