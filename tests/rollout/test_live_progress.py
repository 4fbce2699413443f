"""The live view's counters: one line per wave, fed from the step's decisions; snapshots only for an observer."""

from __future__ import annotations

from collections.abc import Callable

from shopsimrl.rollout.group import EpisodeSlots, GroupRun
from shopsimrl.rollout.progress import LiveProgress, StepProgress
from shopsimrl.rollout.report import StepReport
from shopsimrl.sampling import REASON_ZERO_STD, GroupDecision, Verdict
from shopsimrl.sampling.source import new_selector
from shopsimrl.sampling.step import RolloutStep, Start, new_step

N = 2


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def step_started(self, step: int, target: int) -> None:
        self.calls.append(("started", (step, target)))

    def progressed(self, snapshot: Callable[[], StepProgress]) -> None:
        self.calls.append(("progressed", snapshot()))

    def step_finished(self, report: StepReport | None, progress: StepProgress) -> None:
        self.calls.append(("finished", progress))


def started_step(observer: Recorder | None) -> tuple[RolloutStep, LiveProgress, dict[int, GroupRun]]:
    rollout = new_step(2, 4, N, source=new_selector("seed", [f"t{i}" for i in range(20)], N))
    groups: dict[int, GroupRun] = {}
    live = LiveProgress(7, rollout, groups, EpisodeSlots(4), lambda: 1.5, observer)
    starts = [a for a in rollout.start() if isinstance(a, Start)]
    for s in starts:
        groups[s.index] = GroupRun(index=s.index, wave=s.wave, task_id=str(s.prompt), specs=[])
    live.opened(1, len(starts))
    return rollout, live, groups


def test_each_decision_lands_on_its_waves_line_and_the_abort_counts_the_rest():
    rollout, live, groups = started_step(None)
    groups[3].started = True
    actions = rollout.finished([(0, Verdict.ZERO_STD, [1.0, 1.0]), (1, Verdict.VARIED, [0.0, 1.0]),
                                (2, Verdict.VARIED, [0.0, 1.0])])
    for d in actions:
        if isinstance(d, GroupDecision):
            live.decided(d)
    live.aborted(rollout.close().aborted)
    (wave,) = live.snapshot().waves
    assert (wave.submitted, wave.completed, wave.accepted, wave.fallback, wave.surplus) == (4, 3, 2, 0, 0)
    assert wave.dropped[REASON_ZERO_STD] == 1 and wave.kept == 2 and wave.aborted == 1


def test_groups_holding_a_slot_are_running_and_the_snapshot_reads_the_step():
    rollout, live, groups = started_step(None)
    groups[0].started = groups[2].started = True
    snap = live.snapshot()
    assert (snap.step, snap.elapsed, snap.target, snap.kept, snap.remaining) == (7, 1.5, 2, 0, 4)
    assert snap.waves[0].running == 2 and snap.episodes_running == 0 and snap.state is rollout.state


def test_the_observer_hears_start_progress_and_finish_and_no_snapshot_is_built_without_one(monkeypatch):
    recorder = Recorder()
    _rollout, live, _groups = started_step(recorder)
    live.started()
    live.changed()
    live.finished(None)
    assert [name for name, _ in recorder.calls] == ["started", "progressed", "finished"]
    assert recorder.calls[0][1] == (7, 2)
    _rollout, silent, _groups = started_step(None)

    def no_snapshot() -> StepProgress:
        raise AssertionError("a snapshot built for nobody")

    monkeypatch.setattr(silent, "snapshot", no_snapshot)
    silent.started()
    silent.changed()
    silent.finished(None)
