"""The step's event log: times since the step began, the stop's reason, the trigger, the seed order's position."""

from __future__ import annotations

import asyncio
import errno

import pytest

from shopsimrl.rollout.events import EventLog
from shopsimrl.rollout.group import GroupRun
from shopsimrl.sampling import (
    REASON_TECHNICAL,
    Decision,
    GroupDecision,
    SamplingKnobs,
    TooManyTechnicalFailures,
    Verdict,
)
from shopsimrl.sampling.source import new_selector


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def group(index: int) -> GroupRun:
    return GroupRun(index=index, wave=1, task_id=f"task-{index}", specs=[])


def decision(index: int) -> GroupDecision:
    return GroupDecision(index, 1, Verdict.TECHNICAL, Decision.DROPPED, REASON_TECHNICAL, 7 - index, 0)


def test_times_are_seconds_since_the_step_began_rounded_to_the_microsecond():
    clock = Clock(100.0)
    log = EventLog(clock)
    log.begin(1, SamplingKnobs(), new_selector("seed", ["a", "b"], 8))
    clock.t = 100.12345678
    assert log.now() == pytest.approx(0.12345678)
    log.event(log.now(), "x")
    assert [e["t"] for e in log.events] == [0.0, 0.123457]


def test_step_start_carries_the_seed_orders_position_and_not_the_selectors():
    seed, informative = EventLog(Clock(0.0)), EventLog(Clock(0.0))
    seed.begin(3, SamplingKnobs(), new_selector("seed", ["a", "b"], 8))
    informative.begin(3, SamplingKnobs(), new_selector("skip", ["a", "b"], 8))
    assert seed.events[0]["event"] == "step_start" and seed.events[0]["step"] == 3
    assert "sampler" in seed.events[0] and "sampler" not in informative.events[0]
    assert seed.events[0]["knobs"] == SamplingKnobs().as_dict()


@pytest.mark.parametrize(("exc", "fields"), [
    (TooManyTechnicalFailures("8 in a row", count=8, groups=["3", "5"], trace_dir=None),
     {"reason": "too_many_technical_failures", "message": "8 in a row", "groups": [3, 5]}),
    (asyncio.CancelledError("SIGTERM"), {"reason": "interrupted", "signal": "SIGTERM"}),
    (asyncio.CancelledError(), {"reason": "interrupted", "signal": None}),
    (OSError(errno.ENOSPC, "No space left on device"),
     {"reason": "write_failed", "errno": errno.ENOSPC, "message": "OSError: [Errno 28] No space left on device"}),
])
def test_a_step_cut_short_logs_why(exc, fields):
    log = EventLog(Clock(5.0))
    log.stopped(exc)
    (event,) = log.events
    assert {k: event[k] for k in fields} == fields and event["event"] == "stopped"


def test_the_stop_trigger_is_the_last_decision_logged_and_every_decision_is_kept_for_the_batch_rows():
    log = EventLog(Clock(0.0))
    log.batches = 2
    for i in (0, 1):
        log.decision(0.5, group(i), decision(i))
    log.stop_trigger()
    first, trigger = log.events
    assert "stopped_run" not in first and trigger["stopped_run"] is True
    assert trigger["index"] == 1 and trigger["batch"] == 2 and trigger["task_id"] == "task-1"
    assert log.decisions == {0: "dropped", 1: "dropped"}


def test_the_abort_ends_the_steps_wall_time():
    clock = Clock(10.0)
    log = EventLog(clock)
    log.begin(1, SamplingKnobs(), new_selector("seed", ["a"], 8))
    clock.t = 12.0
    cancelling_from = log.now()
    clock.t = 12.25  # the cancelled groups took 0.25 s to unwind
    log.abort(cancelling_from, [4, 5], finished_not_judged=[6], cancelled=2)
    assert log.wall_seconds == 2.25
    assert log.events[-1] == {"t": 2.0, "event": "abort", "aborted": [4, 5], "finished_not_judged": [6],
                              "cancelled": 2, "seconds": 0.25}
