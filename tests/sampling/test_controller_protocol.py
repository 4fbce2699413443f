"""The controller's protocol table (``TRANSITIONS``) is exactly what the methods enforce.

Random operation sequences check both directions: every call the table refuses raises
``ControllerStateError`` naming the state and what it allows, and changes nothing; every call it
allows lands in one of the states the table lists.  A fixed set of random walks must take every
arrow of the table, so the table (and the diagram drawn from it) lists no transition that cannot
happen.
"""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shopsimrl.sampling import (
    ALLOWED,
    TRANSITIONS,
    ConsecutiveFailureGuard,
    ControllerStateError,
    GroupDecision,
    State,
    TooManyTechnicalFailures,
    Verdict,
    WaveController,
    replay,
)
from shopsimrl.sampling.controller import INITIAL_STATE, OPERATIONS

VERDICTS = (Verdict.VARIED, Verdict.ZERO_STD, Verdict.TECHNICAL)


def apply(ctrl: WaveController, op: str, pick: random.Random) -> None:
    """Call ``op`` with valid arguments (only the state may make it illegal)."""
    in_flight = sorted(ctrl.in_flight)
    if op == "submit":
        ctrl.submit()
    elif op == "refill":
        ctrl.refill(pick.randint(1, 3))
    elif op == "complete":
        index = pick.choice(in_flight) if in_flight else ctrl.submitted  # never submitted: refused either way
        ctrl.complete(index, pick.choice(VERDICTS))
    elif op == "complete_batch":
        chosen = pick.sample(in_flight, pick.randint(0, min(4, len(in_flight))))
        ctrl.complete_batch([(i, pick.choice(VERDICTS)) for i in chosen])
    else:
        ctrl.abort()


def checked_step(ctrl: WaveController, op: str, pick: random.Random) -> tuple[State, State] | None:
    """Apply ``op`` and check it against the table; return the (before, after) arrow taken, if any."""
    before, snapshot = ctrl.state, ctrl.summary()
    assert ctrl.needs_wave == (before is State.NEEDS_WAVE)
    assert ctrl.allowed == ALLOWED[before]
    if op not in ALLOWED[before]:
        with pytest.raises(ControllerStateError) as refused:
            apply(ctrl, op, pick)
        message = str(refused.value)
        assert message.startswith(f"state {before}: {op}() is not allowed")
        assert message.endswith("allows: " + ", ".join(f"{o}()" for o in OPERATIONS if o in ALLOWED[before]))
        assert ctrl.summary() == snapshot  # a refused call changes nothing
        return None
    if op == "complete" and not ctrl.in_flight:  # an argument error, not a state one
        with pytest.raises(ControllerStateError, match="never submitted"):
            apply(ctrl, op, pick)
        return None
    try:
        apply(ctrl, op, pick)
    except TooManyTechnicalFailures:
        pass
    after = ctrl.state
    assert after in TRANSITIONS[before][op], f"{before} --{op}()--> {after} is not in the table"
    return before, after


def walk(seed: int, length: int = 40) -> set[tuple[State, str, State]]:
    pick = random.Random(seed)
    target = pick.randint(1, 3)
    ctrl = WaveController(target, pick.randint(target, 2 * target + 1), pick.randint(1, 3))
    assert ctrl.state is INITIAL_STATE
    taken = set()
    for _ in range(length):
        # mostly the ordinary loop, sometimes anything at all
        op = pick.choice(OPERATIONS) if pick.random() < 0.3 else pick.choice(("submit", "complete", "complete_batch"))
        arrow = checked_step(ctrl, op, pick)
        if arrow:
            taken.add((arrow[0], op, arrow[1]))
    return taken


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_every_call_is_refused_or_allowed_exactly_as_the_table_says(seed):
    walk(seed)


def test_every_arrow_of_the_table_is_taken_by_some_walk():
    declared = {(s, op, t) for s, ops in TRANSITIONS.items() for op, targets in ops.items() for t in targets}
    taken: set[tuple[State, str, State]] = set()
    for seed in range(400):
        taken |= walk(seed)
    assert taken <= declared
    assert declared - taken == set(), "arrows in the table that no walk takes: the table claims too much"


def test_the_table_covers_every_state_and_only_known_operations():
    assert set(TRANSITIONS) == set(State)
    assert all(set(ops) <= set(OPERATIONS) and ops for ops in TRANSITIONS.values())
    assert all(ALLOWED[s] == frozenset(TRANSITIONS[s]) for s in State)


def test_an_illegal_call_names_the_state_why_and_what_is_allowed():
    ctrl = WaveController(1, 2)
    ctrl.submit()
    ctrl.complete(0, Verdict.VARIED)
    with pytest.raises(ControllerStateError) as done:
        ctrl.complete(1, Verdict.VARIED)
    assert str(done.value) == (
        "state DONE: complete() is not allowed (the step already kept 1/1 groups; abort the 1 in-flight groups "
        "instead); state DONE allows: submit(), abort()"
    )
    ctrl.abort()
    with pytest.raises(ControllerStateError, match=r"^state ABORTED: refill\(\) .* allows: abort\(\)$"):
        ctrl.refill(1)


def test_state_prints_as_its_name_in_logs_json_and_format():
    assert str(State.WAITING) == "WAITING" == f"{State.WAITING}" == State.WAITING.value
    assert json.dumps({"state": State.NEEDS_WAVE}) == '{"state": "NEEDS_WAVE"}'
    assert State("DONE") is State.DONE and State.DONE == "DONE"


def test_needs_wave_is_the_inner_loop_condition_and_false_once_the_step_is_over():
    ctrl = WaveController(2, 4)
    assert ctrl.needs_wave and ctrl.submit() == range(4) and not ctrl.needs_wave
    ctrl.complete_batch([(0, Verdict.TECHNICAL), (1, Verdict.TECHNICAL), (2, Verdict.TECHNICAL)])
    assert ctrl.remaining == 1 < ctrl.target and ctrl.needs_wave
    ctrl.abort()
    assert ctrl.remaining < ctrl.target and not ctrl.needs_wave  # aborted: no wave whatever remaining says


def test_a_guard_or_a_limit_not_both():
    guard = ConsecutiveFailureGuard(3)
    with pytest.raises(ValueError, match="not both"):
        WaveController(2, 4, 5, guard=guard)
    with pytest.raises(ValueError, match="not both"):
        replay([("varied", 1.0)] * 4, rollout_batch_size=2, over_sampling_batch_size=4,
               max_consecutive_failed_groups=5, guard=guard)
    assert WaveController(2, 4, guard=guard).guard is guard
    assert WaveController(2, 4, 5).guard.limit == 5
    assert WaveController(2, 4).guard.limit == 8


def test_replay_events_carry_the_controllers_own_decisions():
    r = replay([("varied", 2.0), ("zero_std", 1.0)], rollout_batch_size=1, over_sampling_batch_size=2)
    assert all(type(e.group) is GroupDecision for e in r.events)
    assert [e.as_dict() for e in r.events] == [{"time": e.time, **e.group.as_dict()} for e in r.events]
    assert [(e.time, e.group.index, e.group.decision.value) for e in r.events] == [(1.0, 1, "dropped"),
                                                                                   (2.0, 0, "accepted")]
