"""Derived seeds: every stream pinned to its value (runs replay bit for bit), none shared."""

import pytest

from thinwire import seeding
from thinwire.seeding import (
    bucket_seed,
    client_speed_seed,
    dispatch_seed,
    downlink_codec_seed,
    dp_mask_seed,
    dp_noise_seed,
    graph_draw_seed,
    graph_round_seed,
    jwins_alpha_seed,
    mix,
    peer_codec_seed,
    peer_train_seed,
    policy_seed,
    sampling_seed,
    stage_seed,
    step_seed,
    tensor_seed,
    tensor_step_seed,
    train_seed,
    uplink_codec_seed,
    vote_tie_seed,
)

RUN = 11

# The values every earlier thinwire release drew (README numbers and checkpoints rest on them).
PINNED = [
    (downlink_codec_seed(RUN), 10520313552068553934),
    (uplink_codec_seed(RUN, 3), 10780987987232355302),
    (train_seed(RUN, 3, 4), 1972284223655670778),
    (policy_seed(RUN, 3), 14868722485738043104),
    (sampling_seed(RUN, 4), 4543915319718161244),
    (dp_noise_seed(RUN, 3, 4), 7961553335998823752),
    (dp_mask_seed(RUN, 4), 10351522665879842713),
    (vote_tie_seed(RUN, 4), 13955062102690954666),
    (peer_train_seed(RUN, 3, 4), 9820438797523800602),
    (peer_codec_seed(RUN, 3), 8361357275962831291),
    (jwins_alpha_seed(RUN, 3, 4), 14678954936954702792),
    (graph_draw_seed(RUN, 2), 8520201743356848002),
    (graph_round_seed(RUN, 4), 3244318073298522973),
    (client_speed_seed(RUN), 18029624317084904543),
    (dispatch_seed(RUN, 4), 15216413937954475623),
    (mix(7), 7191089600892374487),
    (mix(7, 1, 2), 1650069959653123811),
]


@pytest.mark.parametrize(("value", "expected"), PINNED)
def test_each_stream_keeps_its_value(value, expected):
    assert value == expected


def test_run_streams_differ_from_one_another():
    client, round = 3, 4
    values = [
        downlink_codec_seed(RUN),
        uplink_codec_seed(RUN, client),
        train_seed(RUN, client, round),
        policy_seed(RUN, client),
        sampling_seed(RUN, round),
        dp_noise_seed(RUN, client, round),
        dp_mask_seed(RUN, round),
        vote_tie_seed(RUN, round),
        peer_train_seed(RUN, client, round),
        peer_codec_seed(RUN, client),
        jwins_alpha_seed(RUN, client, round),
        client_speed_seed(RUN),
        dispatch_seed(RUN, round),
    ]
    assert len(set(values)) == len(values)


def test_component_streams_are_the_mixer_over_their_parts():
    assert step_seed(5, 9) == stage_seed(5, 9) == tensor_seed(5, 9) == mix(5, 9)
    assert tensor_step_seed(5, 2, 9) == mix(5, 2, 9)
    assert bucket_seed(5, (0, 3, 4)) == mix(5, 0, 3, 4)


def test_mix_mixes_every_part():
    seeds = {mix(7, step) for step in range(1000)}
    assert len(seeds) == 1000
    assert mix(7, 1, 2) != mix(7, 2, 1)
    assert all(0 <= s < 2**64 for s in seeds)


def test_graph_seeds_differ_by_path():
    assert graph_round_seed(0, 1) != graph_round_seed(0, 2) != graph_round_seed(1, 1)
    assert graph_draw_seed(0, 1) != graph_round_seed(0, 1)


def test_every_public_function_is_pinned_or_checked():
    assert set(seeding.__all__) == {
        "bucket_seed",
        "client_speed_seed",
        "dispatch_seed",
        "dp_mask_seed",
        "dp_noise_seed",
        "downlink_codec_seed",
        "graph_draw_seed",
        "graph_round_seed",
        "jwins_alpha_seed",
        "mix",
        "peer_codec_seed",
        "peer_train_seed",
        "policy_seed",
        "sampling_seed",
        "stage_seed",
        "step_seed",
        "tensor_seed",
        "tensor_step_seed",
        "train_seed",
        "uplink_codec_seed",
        "vote_tie_seed",
    }
