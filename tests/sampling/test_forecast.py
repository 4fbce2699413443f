"""The spread forecast (``SpreadForecast``) and the ``forecast`` rule (``ForecastOrder``) on synthetic worlds: where the
text predicts difficulty it learns it and skips on it; where the text carries nothing it stays at the base rate and
the rule is today's skip rule, pick for pick; weights, state and its refusal."""

from __future__ import annotations

import random

import pytest

from shopsimrl.sampling.forecast import (
    GATE_MIN_GROUPS,
    NUMERIC_BUCKETS,
    ForecastStateError,
    SpreadForecast,
    description_features,
    numeric_edges,
)
from shopsimrl.sampling.forecast_order import ForecastOrder
from shopsimrl.sampling.selection_metrics import FORECAST_PREFIX, selector_step_metrics
from shopsimrl.sampling.skip import RETRY_FLOOR
from shopsimrl.sampling.source import new_selector, selector_from_state

N = 8
WORDS = ("red", "blue", "green", "small", "large", "soft", "wooden", "steel", "round", "cotton")


def world(size: int, *, signal: bool, seed: int = 0) -> tuple[list[str], dict[str, dict[str, str]], dict[str, float]]:
    """Prompts with instructions; with ``signal`` the word ``hard`` makes a prompt fail every sibling and ``easy``
    solve every one (the rest spread half the time); without, the outcome ignores the text."""
    rng = random.Random(seed)
    ids, descriptions, spread = [], {}, {}
    for i in range(size):
        kind = rng.choice(("hard", "easy", "plain"))
        text = f"Find me {rng.choice(WORDS)} {rng.choice(WORDS)} {kind} shoes under ${rng.randint(5, 90)}"
        pid = f"p{i}"
        ids.append(pid)
        descriptions[pid] = {"instruction": text, "category": rng.choice(("shoes", "bags"))}
        spread[pid] = (0.05 if kind in ("hard", "easy") else 0.6) if signal else 0.3
    return ids, descriptions, spread


def group(rng: random.Random, q: float, hard: bool) -> list[float]:
    """A group with spread with chance ``q``, else every sibling failed (``hard``) or solved."""
    if rng.random() < q:
        return [1.0, 0.0] * (N // 2)
    return [0.0] * N if hard else [1.0] * N


def run(source, ids, descriptions, spread, steps: int, k: int = 16, seed: int = 1) -> dict[str, float]:
    """``steps`` calls of ``next_prompts(k)`` recorded at once; the spread share of the groups handed out."""
    rng = random.Random(seed)
    handed = varied = 0
    for _ in range(steps):
        for pid in source.next_prompts(k):
            rewards = group(rng, spread[pid], "hard" in descriptions[pid]["instruction"])
            handed += 1
            varied += len(set(rewards)) > 1
            source.record(pid, rewards)
    return {"handed": handed, "spread_share": varied / handed}


def test_where_the_text_predicts_difficulty_it_learns_it():
    ids, descriptions, spread = world(600, signal=True)
    forecast = SpreadForecast(ids, descriptions)
    rng = random.Random(3)
    for i, pid in enumerate(ids[:400]):
        rewards = group(rng, spread[pid], "hard" in descriptions[pid]["instruction"])
        forecast.observe(i, "new", "spread" if len(set(rewards)) > 1 else "failed" if rewards[0] == 0 else "solved")
    assert forecast.ready() and forecast.skill() > 0.2
    plain = [forecast.predict(i, "new") for i, p in enumerate(ids) if i >= 400 and spread[p] > 0.5]
    marked = [forecast.predict(i, "new") for i, p in enumerate(ids) if i >= 400 and spread[p] < 0.5]
    assert max(plain) < min(marked)  # every never-seen prompt marked hard or easy predicted to agree more
    assert sum(marked) / len(marked) > 0.8 and sum(plain) / len(plain) < 0.65  # truth: 0.95 and 0.4


def test_a_numeric_label_is_read_by_its_decile_so_a_never_seen_value_is_predicted():
    """A pass rate measured earlier, one distinct value per prompt: the exact value is never seen twice, its decile is;
    and it counts in full beside a long instruction whose words carry nothing."""
    rng = random.Random(5)
    ids = [f"p{i}" for i in range(800)]
    rate = {pid: rng.random() for pid in ids}
    vocabulary = [f"word{k}" for k in range(300)]
    descriptions = {pid: {"instruction": " ".join(rng.choices(vocabulary, k=30)), "pass_rate": f"{rate[pid]:.4f}"}
                    for pid in ids}
    edges = numeric_edges(descriptions)
    assert len(edges["pass_rate"]) == NUMERIC_BUCKETS - 1
    assert description_features(descriptions["p0"], edges)[1] == [
        f"l:pass_rate~q{sum(rate['p0'] >= e for e in edges['pass_rate'])}"]
    forecast = SpreadForecast(ids, descriptions)
    middle = {pid: 0.2 < rate[pid] < 0.8 for pid in ids}  # spread likely only away from either end
    for i, pid in enumerate(ids[:600]):
        rewards = group(rng, 0.7 if middle[pid] else 0.05, rate[pid] < 0.5)
        forecast.observe(i, "new", "spread" if len(set(rewards)) > 1 else "failed" if rewards[0] == 0 else "solved")
    assert forecast.ready() and forecast.skill() > 0.2
    inner = [forecast.predict(i, "new") for i, p in enumerate(ids) if i >= 600 and middle[p]]
    outer = [forecast.predict(i, "new") for i, p in enumerate(ids) if i >= 600 and not middle[p]]
    assert sum(outer) / len(outer) > sum(inner) / len(inner) + 0.3  # truth: 0.95 against 0.3


def test_labels_that_are_not_all_numbers_or_have_few_values_stay_categories():
    descriptions = {"a": {"category": "shoes", "size": "9"}, "b": {"category": "bags", "size": "M"},
                    **{f"c{i}": {"category": "hats", "size": str(i), "stars": i % 3} for i in range(20)}}
    assert numeric_edges(descriptions) == {}  # size: "M" is not a number; stars: three values
    assert description_features(descriptions["c4"], numeric_edges(descriptions))[1] == [
        "l:category=hats", "l:size=4", "l:stars=1"]


def test_the_rule_skips_what_the_text_says_will_not_spread_and_weighs_what_it_hands_out():
    ids, descriptions, spread = world(2000, signal=True)
    forecast_rule = new_selector("forecast", ids, N, 5, waves="adaptive", descriptions=descriptions)
    informative = new_selector("skip", ids, N, 5, waves="adaptive")
    mine = run(forecast_rule, ids, descriptions, spread, 60)
    theirs = run(informative, ids, descriptions, spread, 60)
    assert forecast_rule.forecast.ready()
    assert informative.skipped_turns == 0  # within the first pass today's rule has nothing to skip
    assert forecast_rule.skipped_turns > 200
    assert mine["spread_share"] > 1.2 * theirs["spread_share"]  # the gate shut over the first groups included
    # a never-seen prompt marked hard, handed out at a turn where it could have been skipped, weighs 1 / (1 - p)
    i = next(j for j, p in enumerate(ids) if not forecast_rule.evidence.observed[j] and spread[p] < 0.5
             and j not in forecast_rule.evidence.in_flight)
    p = forecast_rule.skip_probability(i)
    assert 0.0 < p <= 1.0 - RETRY_FLOOR
    out: list[int] = []
    forecast_rule._skips_left = 10
    forecast_rule._rng.random = lambda: 1.0  # the draw says "hand out"
    assert forecast_rule._turn(i, out)
    assert forecast_rule.weight(ids[i]) == pytest.approx(1.0 / (1.0 - p))
    assert forecast_rule.weight(ids[i]) <= 1.0 / RETRY_FLOOR


@pytest.mark.parametrize("numeric", [False, True], ids=["text", "text-and-a-numeric-label"])
def test_where_the_text_carries_nothing_it_stays_at_the_base_rate_and_the_rule_is_todays(numeric):
    ids, descriptions, spread = world(2000, signal=False)
    if numeric:  # a pass rate that says nothing either, read at full weight
        rng = random.Random(8)
        descriptions = {pid: {**d, "pass_rate": round(rng.random(), 3)} for pid, d in descriptions.items()}
    forecast_rule = new_selector("forecast", ids, N, 9, waves="adaptive", descriptions=descriptions)
    informative = new_selector("skip", ids, N, 9, waves="adaptive")
    rng_a, rng_b = random.Random(4), random.Random(4)
    for _ in range(150):  # nearly two passes: today's rule skips solved runs in the second
        a, b = forecast_rule.next_prompts(24), informative.next_prompts(24)
        assert a == b  # the same prompts, in the same order, every call
        for pid in a:
            rewards = group(rng_a, spread[pid], False)
            assert rewards == group(rng_b, spread[pid], False)
            forecast_rule.record(pid, rewards)
            informative.record(pid, rewards)
    assert informative.skipped_turns > 0 and forecast_rule.skipped_turns == informative.skipped_turns
    forecast = forecast_rule.forecast
    assert forecast.scored > GATE_MIN_GROUPS and not forecast.ready()
    base = forecast.base_rate()
    new = [forecast.predict(i, "new") for i in range(len(ids)) if not forecast_rule.evidence.observed[i]]
    assert all(abs(p - base) < 0.12 for p in new)


def test_prompts_without_text_or_labels_are_forecast_from_history_alone():
    ids = [f"p{i}" for i in range(50)]
    source = new_selector("forecast", ids, N, 0, waves="adaptive")
    assert source.described == 0
    assert description_features(None) == ([], [])
    source.record(source.next_prompts(1)[0], [1.0] * N)
    assert 0.0 < source.forecast.predict(0, "solved") < 1.0


def test_the_step_figures_show_the_forecasts_calibration():
    ids, descriptions, spread = world(400, signal=True)
    source = new_selector("forecast", ids, N, 2, waves="adaptive", descriptions=descriptions)
    run(source, ids, descriptions, spread, 3)
    metrics = selector_step_metrics(source.pop_stats(), informative=10, generated_episodes=384, coverage=0.1)
    assert metrics[FORECAST_PREFIX + "groups"] == 48
    for key in ("predicted_zero_spread", "observed_zero_spread", "brier", "base_brier", "skill", "ready", "skipped"):
        assert FORECAST_PREFIX + key in metrics
    assert 0.0 <= metrics[FORECAST_PREFIX + "brier"] <= 1.0
    assert FORECAST_PREFIX + "groups" not in selector_step_metrics(
        new_selector("skip", ids, N, 2).pop_stats(), informative=0, generated_episodes=0, coverage=0.0)


def test_its_state_round_trips_and_is_refused_for_other_descriptions():
    ids, descriptions, spread = world(400, signal=True)
    source = new_selector("forecast", ids, N, 2, waves="adaptive", descriptions=descriptions)
    run(source, ids, descriptions, spread, 10)
    state = source.state_dict()
    again = selector_from_state(state)
    assert isinstance(again, ForecastOrder)
    again.describe(descriptions)  # a resumed source gets its descriptions back
    assert again.state_dict() == state
    assert [again.skip_probability(i) for i in range(50)] == [source.skip_probability(i) for i in range(50)]
    other = {pid: {**d, "instruction": d["instruction"] + " please"} for pid, d in descriptions.items()}
    with pytest.raises(ForecastStateError, match="other prompt texts and labels"):
        selector_from_state(state).describe(other)
