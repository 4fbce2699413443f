"""Spread selection with cluster labels (and every rule's evidence): exploration by cluster, the cluster's prior, coverage per cluster."""

from __future__ import annotations

import json
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sampling.selector_script import drive

from shopsimrl.sampling.clusters import ClusterBook, cluster_indices
from shopsimrl.sampling.estimate import SkillModel
from shopsimrl.sampling.selection_metrics import SELECTOR_PREFIX, selector_step_metrics
from shopsimrl.sampling.selector import RuleSelector
from shopsimrl.sampling.source import new_selector, selector_from_state
from shopsimrl.sampling.spread import EXPLORE_HORIZON_EPOCHS, SpreadSelector

SELECTION = st.sampled_from(["seed", "skip", "spread"])
# one script step: (k to ask for, how to finish each prompt in flight: record all-same / varied / release / keep)
ACTIONS = st.lists(
    st.tuples(st.integers(0, 6), st.lists(st.sampled_from(["same", "varied", "release", "keep"]), max_size=6)),
    min_size=1,
    max_size=25,
)


def labelled(size: int, k: int, seed: int = 0, selection: str = "spread", **kw) -> RuleSelector:
    ids = [f"p{i}" for i in range(size)]
    rng = random.Random(seed)
    labels = {pid: f"c{rng.randrange(k)}" for pid in ids}
    return new_selector(selection, ids, 8, seed, clusters=labels, **kw)


@settings(max_examples=40, deadline=None)
@given(selection=SELECTION, size=st.integers(1, 12), k=st.integers(1, 4), seed=st.integers(0, 3), actions=ACTIONS)
def test_labelled_selector_keeps_the_contract(selection, size, k, seed, actions):
    """k distinct prompts, never one in flight, determinism, and a state that round-trips through JSON."""
    a, b = labelled(size, k, seed, selection), labelled(size, k, seed, selection)
    trace_a, trace_b = [], []
    drive(a, actions, trace_a)
    drive(b, actions, trace_b)
    assert trace_a == trace_b
    restored = selector_from_state(json.loads(json.dumps(a.state_dict())))
    assert restored.state_dict() == a.state_dict()
    after_a, after_b = [], []
    drive(a, actions, after_a)
    drive(restored, actions, after_b)
    assert after_a == after_b


@settings(max_examples=60, deadline=None)
@given(size=st.integers(2, 60), k=st.integers(1, 12), seed=st.integers(0, 5), batch=st.integers(1, 8),
       horizon=st.sampled_from([EXPLORE_HORIZON_EPOCHS, 8.0]), data=st.data())
def test_every_cluster_is_tried_within_its_share_of_the_horizon(size, k, seed, batch, horizon, data):
    """Whatever the outcomes (solved, failed, varied, aborted): with ``K`` clusters of ``N`` prompts and a horizon
    of ``H`` picks, every cluster is handed out within ``K·H/N`` picks (plus one batch) — never-tried clusters
    come first when a pick explores, and the pacing explores ``N/H`` of the picks at least.  Every prompt is
    still tried within the horizon (plus re-tries of aborted never-seen prompts)."""
    k = min(k, size)
    ids = [f"p{i}" for i in range(size)]
    labels = [i % k for i in range(size)]  # every cluster has a prompt
    data.draw(st.randoms()).shuffle(labels)
    sel = SpreadSelector(ids, 8, seed=seed, explore_horizon_epochs=horizon,
                         clusters=dict(zip(ids, labels)))
    rng = random.Random(data.draw(st.integers(0, 1000)))
    horizon_picks = max(1, round(horizon * size))
    cluster_bound = math.ceil(k * horizon_picks / size) + batch
    picks, released_unseen, clusters_done_at = 0, 0, None
    while sel.coverage() < 1.0 and picks < horizon_picks + batch + released_unseen:
        got = sel.next_prompts(min(batch, len(sel) - len(sel.in_flight)))
        picks += len(got)
        if clusters_done_at is None and sel.clusters_tried() == k:
            clusters_done_at = picks
        for pid in got:
            r = rng.random()
            if r < 0.1:
                released_unseen += sel.predicted_pass_rate(pid) is None
                sel.release(pid)
            else:
                sel.record(pid, [1.0] * 8 if r < 0.5 else [0.0] * 8 if r < 0.8 else [1.0, 0.0] * 4)
    assert clusters_done_at is not None and clusters_done_at <= cluster_bound
    assert sel.coverage() == 1.0


def test_explorations_take_a_never_tried_cluster_first():
    """Three clusters of very unequal size: the first three explorations hit all three (without labels the
    biggest cluster would get most of them)."""
    ids = [f"p{i}" for i in range(40)]
    labels = {pid: "big" for pid in ids[:36]} | {ids[36]: "a", ids[37]: "a", ids[38]: "b", ids[39]: "b"}
    sel = SpreadSelector(ids, 8, seed=0, clusters=labels)
    first = sel.next_prompts(3)
    assert {labels[p] for p in first} == {"big", "a", "b"}
    assert sel.clusters_tried() == 3


def test_later_explorations_go_to_the_cluster_least_covered():
    book = ClusterBook([0, 0, 0, 0, 1, 1, 1, 1], order=range(8), seed=0)
    firsts = []
    for _ in range(2):  # one of each: never-tried first
        firsts.append(book.explore())
        book.chose(firsts[-1])
    assert {book.cluster_of[i] for i in firsts} == {0, 1}
    i = book.explore()
    book.chose(i)
    j = book.explore()  # the other cluster is now the less covered one
    assert book.cluster_of[i] != book.cluster_of[j]
    assert book.coverage() == (0.25, 0.375)  # j not handed out yet: 1/4 and 2/4


def test_a_never_seen_prompt_takes_its_cluster_s_estimate_and_a_new_cluster_is_worth_more():
    """Cluster "solved": every first group agreed; cluster "open": every first group had spread.  A never-seen
    prompt of each is predicted as its cluster's first groups went; a never-tried cluster gets the share of clusters
    whose first group had spread, here higher than the solved cluster's — and the adaptive sizer reads that q."""
    ids = [f"s{i}" for i in range(10)] + [f"o{i}" for i in range(10)] + [f"n{i}" for i in range(10)]
    labels = {pid: {"s": "solved", "o": "open", "n": "new"}[pid[0]] for pid in ids}
    sel = new_selector("seed", ids, 8, 0, clusters=labels)
    recorded = {"s": 0, "o": 0}  # the seed order: record the first six of "solved" and "open", release the rest
    for pid in sel.next_prompts(len(ids)):
        if pid[0] in recorded and recorded[pid[0]] < 6:
            recorded[pid[0]] += 1
            sel.record(pid, [1.0] * 8 if pid[0] == "s" else [1.0, 0.0] * 4)
        else:
            sel.release(pid)  # unobserved
    fresh = {c: next(p for p in ids if labels[p] == c and sel.predicted_pass_rate(p) is None)
             for c in ("solved", "open", "new")}
    q = {c: 1.0 - sel.predicted_zero_spread(p) for c, p in fresh.items()}
    assert q["open"] > q["new"] > q["solved"]
    assert q["solved"] < 0.4 and q["open"] > 0.6
    assert q["new"] == pytest.approx(1.0 - (1 + 1.0) / (2 + 2.0))  # one of two opened clusters agreed, prior 50% x 2


def test_learning_in_one_cluster_moves_that_cluster_s_term_more_than_the_others():
    """Two clusters, every prompt placed at 50%; then cluster 0's prompts 0 and 1 pass every time while cluster 1's
    stay at 50%.  Cluster 0's term rises and cluster 1's falls, so of the two prompts never observed again (4 in
    cluster 0, 5 in cluster 1, placed alike) the one in cluster 0 is now predicted to pass more; a first group
    moves no cluster term."""
    model = SkillModel(6, clusters=[0, 0, 1, 1, 0, 1])
    for i in range(6):
        model.observe(i, False, 4.0, 8)
    assert model.cluster_mean == [0.0, 0.0]
    assert model.logit(4, True)[0] == model.logit(5, True)[0]
    for _ in range(30):
        for i in (0, 1):
            model.observe(i, True, 8.0, 8)
        for i in (2, 3):
            model.observe(i, True, 4.0, 8)
    assert model.cluster_mean[0] > 0.0 > model.cluster_mean[1]
    assert model.cluster_skill(0) > model.cluster_skill(1)
    assert model.logit(4, True)[0] > model.logit(5, True)[0] + 0.05
    assert model.logit(2, True)[0] < model.logit(0, True)[0] - 1.0


def test_without_labels_there_is_no_cluster_term():
    plain = SkillModel(3)
    assert plain.cluster is None and "clusters" not in plain.state_dict()
    with pytest.raises(ValueError, match="loaded without"):
        SkillModel(3, clusters=[0, 1, 1]).load_state_dict(plain.state_dict())


def test_coverage_per_cluster_reaches_the_step_metrics():
    sel = labelled(30, 3, seed=1)
    got = sel.next_prompts(4)
    for pid in got:
        sel.record(pid, [1.0, 0.0] * 4)
    stats = sel.pop_stats()
    low, mid = sel.cluster_coverage()
    assert stats["cluster_coverage_min"] == low and stats["cluster_coverage_median"] == mid
    assert stats["clusters_tried"] == 3
    metrics = selector_step_metrics(stats, informative=4, generated_episodes=32, coverage=sel.coverage())
    assert metrics[SELECTOR_PREFIX + "cluster_coverage_min"] == low
    assert metrics[SELECTOR_PREFIX + "cluster_coverage_median"] == mid
    plain = SpreadSelector([f"p{i}" for i in range(30)], 8, seed=1)
    plain.next_prompts(4)
    plain_stats = plain.pop_stats()
    assert "cluster_coverage_min" not in plain_stats and plain.cluster_coverage() is None
    assert SELECTOR_PREFIX + "cluster_coverage_min" not in selector_step_metrics(
        plain_stats, informative=0, generated_episodes=32, coverage=plain.coverage())


def test_labels_as_a_mapping_or_a_sequence_and_prompts_without_one():
    names, index = cluster_indices(["a", "b", "c"], {"a": "x", "c": "y"})
    assert names == ["x", None, "y"] and index == [0, 1, 2]
    assert cluster_indices(["a", "b"], ["y", "y"]) == (["y"], [0, 0])
    with pytest.raises(ValueError, match="2 labels for 3"):
        cluster_indices(["a", "b", "c"], ["x", "y"])
