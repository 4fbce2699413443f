"""The time model of a GPU rollout: an episode's turns, pages and tokens, refusals of nonsense, determinism."""

from __future__ import annotations

import math

import pytest

from shopsimrl.rollout.gputime import EpisodeTime, SharedThroughput, TimeModel, makespan


def test_a_turn_reads_its_page_writes_its_reply_and_waits_for_the_env():
    model = TimeModel(reply_tokens=100.0, verbosity_sigma=0.0, decode_tokens_per_s=50.0, prefill_tokens_per_s=1000.0,
                      chars_per_token=4.0, env_latency_s=0.5)
    time = model.episode(seed=1, turns=3, page_chars=[4000, 8000])
    # turn 1: 1000 page tokens (1 s) + 100 reply tokens (2 s) + 0.5 s env; turn 2: 2 s + 2 s + 0.5 s; turn 3: no page
    assert time.turn_ends == pytest.approx([3.5, 8.0, 10.5])
    assert time.tokens == 300.0
    assert [time.turns_by(s) for s in (0.0, 3.5, 7.9, 100.0)] == [0, 1, 1, 3]


def test_a_policy_that_counts_its_tokens_is_timed_by_them():
    model = TimeModel(verbosity_sigma=0.0, decode_tokens_per_s=10.0, env_latency_s=0.0)
    time = model.episode(seed=1, turns=2, page_chars=[], completion_tokens=60)
    assert time.tokens == 60.0 and time.solo_seconds == pytest.approx(6.0)


def test_verbosity_is_drawn_from_the_episode_seed_alone_with_median_one():
    model = TimeModel(verbosity_sigma=0.6)
    assert model.verbosity(7) == model.verbosity(7) == TimeModel(verbosity_sigma=0.6).verbosity(7)
    draws = sorted(model.verbosity(seed) for seed in range(2001))
    assert 0.93 < draws[1000] < 1.07
    assert math.log(draws[1682]) == pytest.approx(0.6, abs=0.06)  # the 84th percentile: one sigma
    assert TimeModel(verbosity_sigma=0.0).verbosity(7) == 1.0


@pytest.mark.parametrize(("field", "value"), [("decode_tokens_per_s", -1.0), ("decode_tokens_per_s", 0.0),
                                              ("capacity", 0.0), ("reply_tokens", math.nan),
                                              ("env_latency_s", -0.1), ("train_s_per_token", math.inf)])
def test_nonsense_constants_are_refused_naming_the_constant(field, value):
    with pytest.raises(ValueError, match=field.split("_")[0]):
        TimeModel(**{field: value})


def test_throughput_falls_as_more_episodes_are_in_flight():
    alone = makespan([10.0], capacity=4.0)
    crowded = makespan([10.0] * 8, capacity=4.0)  # twice the capacity: each at half speed
    assert alone == pytest.approx(10.0) and crowded == pytest.approx(20.0)
    clock = SharedThroughput(4.0)
    for i in range(8):
        clock.start(i, 10.0)
    clock.cancel(list(range(4, 8)))  # aborted: they free the throughput at once
    now, done = clock.next()
    assert now == pytest.approx(10.0) and sorted(done) == [0, 1, 2, 3]
    assert clock.virtual == pytest.approx(10.0)


def test_an_empty_episode_takes_no_time():
    assert EpisodeTime().solo_seconds == 0.0 and EpisodeTime().turns_by(5.0) == 0
