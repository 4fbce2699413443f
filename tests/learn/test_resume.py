"""--resume: one order of writes per step, the marker last; a crash between any two writes resumes to the
uninterrupted run; every selection selection and wave mode resumes; gaps, strays and changed options are refused.

The runs here are synthetic (no env: ``synthetic_runner``, one episode at a time, so two runs decide alike) with a
toy learner that saves ``policy.npz`` each step as the GRPO learner does; ``test_cli_resume.py`` drives the real
command.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
from pathlib import Path

import numpy as np
import pytest

import shopsimrl.io as io_module
from shopsimrl.defaults import STATE_FILE
from shopsimrl.io import read_jsonl
from shopsimrl.learn import resume
from shopsimrl.learn.grpo import Adam
from shopsimrl.learn.learner import load_state, save_state
from shopsimrl.learn.policy import LinearPolicy
from shopsimrl.rollout import RolloutConfig, run_rollout
from shopsimrl.rollout.journal import MARKER
from shopsimrl.rollout.outputs import prepare_run_dir
from shopsimrl.rollout.run import run_record
from shopsimrl.rollout.synthetic import synthetic_runner, task_difficulty_outcome
from shopsimrl.sampling import SamplingKnobs
from shopsimrl.sampling.modes import Selection, WaveMode

KNOBS = SamplingKnobs(rollout_batch_size=4, n_samples_per_prompt=4, over_sampling_batch_size=8,
                      global_batch_size=8, max_consecutive_failed_groups=4)
TASKS = [f"t{i:03d}" for i in range(40)]
CLUSTERS = {t: f"c{i % 4}" for i, t in enumerate(TASKS)}
#: Metrics that measure time: they differ between any two runs.
TIMED = ("seconds", "per_second")


def outcome(spec):
    """Every third task is never solved (its groups go to the failure queue); the others by their difficulty."""
    return (True, 0.0) if int(spec.task_id[1:]) % 3 == 0 else task_difficulty_outcome(spec)


class ToyLearner:
    """Trains nothing real: moves the parameters by the batch's advantages and saves them as the GRPO learner does."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.policy = LinearPolicy(record=False)
        self.adam = Adam()

    async def after_batch(self, step: int, rows: list[dict]) -> dict[str, float]:
        theta = np.asarray(self.policy.theta) + 0.01 * sum(r["reward"] for r in rows) + 0.001 * step
        self.adam.t += 1
        self.policy.set_theta(theta.tolist(), updates=self.adam.t)
        save_state(self.root / f"step-{step}" / STATE_FILE, self.policy, self.adam)
        return {"train/theta_sum": float(theta.sum())}

    def restore(self, step_root: Path) -> None:
        theta, self.adam = load_state(step_root / STATE_FILE)
        self.policy.set_theta(theta, updates=self.adam.t)


def config(out: Path, name: str, steps: int, selection: Selection | str = Selection.SEED,
           waves: WaveMode | str = WaveMode.FIXED) -> RolloutConfig:
    return RolloutConfig(knobs=KNOBS, steps=steps, seed=5, out=out, name=name, episode_concurrency=1,
                         selection=Selection.parse(selection), waves=WaveMode.parse(waves))


def run(out: Path, name: str, steps: int, *, resuming: bool = False, **modes: Selection | WaveMode) -> Path:
    """A run of ``steps`` steps (``resuming``: continue the folder as ``--resume`` does)."""
    cfg = config(out, name, steps, **modes)
    clusters = None if cfg.selection is Selection.SEED and cfg.waves is WaveMode.FIXED else CLUSTERS
    paths = prepare_run_dir(out, name, resume=resuming)
    learner = ToyLearner(paths.root)
    try:
        point = None
        if resuming:
            point = resume.prepare(paths, run_record(cfg, len(TASKS)), TASKS, restore_learner=learner.restore)
        asyncio.run(run_rollout(cfg, synthetic_runner(outcome), TASKS, paths=paths, after_batch=learner.after_batch,
                                clusters=clusters, resume=point))
    finally:
        paths.unlock()
    return paths.root


def untimed(row: dict) -> dict:
    return {k: v for k, v in row.items() if not any(t in k for t in TIMED)}


def same_run(a: Path, b: Path, steps: int) -> None:
    """Two run folders hold the same steps: metrics (timings masked), batches, run state, parameters."""
    assert [untimed(r) for r in read_jsonl(a / "metrics.jsonl")] == [untimed(r) for r in read_jsonl(b / "metrics.jsonl")]
    assert [r["step"] for r in read_jsonl(b / "metrics.jsonl")] == list(range(1, steps + 1))
    for k in range(1, steps + 1):
        assert list(read_jsonl(a / f"step-{k}" / "batch.jsonl")) == list(read_jsonl(b / f"step-{k}" / "batch.jsonl"))
        assert (a / f"step-{k}" / "state.json").read_bytes() == (b / f"step-{k}" / "state.json").read_bytes()
        assert load_state(a / f"step-{k}" / STATE_FILE)[0] == load_state(b / f"step-{k}" / STATE_FILE)[0]
        assert (b / f"step-{k}" / MARKER).exists()
    assert failures(a) == failures(b) and failures(b)


def failures(root: Path) -> list[tuple]:
    """The failure queue without the run's name and paths."""
    return [(r["step"], r["group_index"], r["task_id"], r["rewards"]) for r in read_jsonl(root / "failure_queue.jsonl")]


@pytest.fixture(scope="module")
def whole(tmp_path_factory) -> Path:
    return run(tmp_path_factory.mktemp("whole"), "whole", 3)


class Writes:
    """Every write of the run's files, in order (atomic writes at their rename, appends as a whole); one can fail."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, fail: str | None = None) -> None:
        self.seen: list[str] = []
        self.fail = fail
        replace, append = os.replace, io_module._append_whole

        def fails(target: object) -> None:
            name = Path(str(target)).parent.name + "/" + Path(str(target)).name
            self.seen.append(name)
            if self.fail is not None and (name == self.fail or (self.fail.endswith("/") and name.startswith(self.fail))):
                self.fail = None
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(target))  # as shopsimrl.io names it

        def spy_replace(src: str, dst: str) -> None:
            fails(dst)
            replace(src, dst)

        def spy_append(fd: int, data: bytes, path: Path) -> None:
            fails(path)
            append(fd, data, path)

        monkeypatch.setattr(io_module.os, "replace", spy_replace)
        monkeypatch.setattr(io_module, "_append_whole", spy_append)


def step_writes(seen: list[str], step: int, run_name: str) -> list[str]:
    """The kinds of writes of one step, in order, each kept at its first occurrence."""
    kinds: list[str] = []
    for name in seen:
        folder, file = name.split("/")
        if folder == "traces" or folder == "triage":
            kind = folder
        elif folder == f"step-{step}" or (folder == run_name and file != "run.json"):
            kind = file
        else:
            continue
        if kind not in kinds:
            kinds.append(kind)
    return kinds


def test_a_step_writes_its_records_in_one_order_and_its_marker_last(tmp_path, monkeypatch):
    writes = Writes(monkeypatch)
    run(tmp_path, "r", 1)
    order = step_writes(writes.seen, 1, "r")
    assert order[-5:] == [STATE_FILE, "state.json", "metrics.json", "metrics.jsonl", MARKER]
    assert order.index("triage") < order.index("events.jsonl") < order.index("batch.jsonl") < order.index(STATE_FILE)
    assert "failure_queue.jsonl" in order and order.index("failure_queue.jsonl") < order.index("events.jsonl")
    marker = json.loads((tmp_path / "r" / "step-1" / MARKER).read_text())
    assert marker["step"] == 1 and marker["previous"] is None
    assert set(marker["files"]) == {"batch.jsonl", "events.jsonl", "metrics.json", "state.json", STATE_FILE}
    assert marker["folders"]["triage"] == len(list((tmp_path / "r" / "step-1" / "triage").iterdir()))


#: Each write of a step, in its order: a disk that fills up at that write (every earlier one done).
POINTS = ["triage/", "failure_queue.jsonl", "events.jsonl", "batch.jsonl", STATE_FILE, "state.json", "metrics.json",
          "metrics.jsonl", MARKER]


@pytest.mark.parametrize("point", POINTS)
def test_a_full_disk_between_any_two_writes_of_a_step_resumes_to_the_uninterrupted_run(tmp_path, monkeypatch,
                                                                                        whole, point):
    run(tmp_path, "part", 1)
    target = {"triage/": "triage/", "failure_queue.jsonl": "part/failure_queue.jsonl",
              "metrics.jsonl": "part/metrics.jsonl"}.get(point, f"step-2/{point}")
    writes = Writes(monkeypatch, fail=target)
    with pytest.raises(OSError) as raised:
        run(tmp_path, "part", 3, resuming=True)
    assert writes.fail is None, f"{target} was never written"
    assert raised.value.errno == errno.ENOSPC and raised.value.filename  # the message names the file
    root = tmp_path / "part"
    assert not (root / "step-2" / MARKER).exists()  # the step is not complete, whatever it had written
    assert [r["step"] for r in read_jsonl(root / "metrics.jsonl")] in ([1], [1, 2])
    monkeypatch.undo()
    run(tmp_path, "part", 3, resuming=True)
    same_run(whole, root, 3)


@pytest.mark.parametrize("selection", list(Selection))
@pytest.mark.parametrize("waves", list(WaveMode))
def test_resuming_after_each_step_equals_the_uninterrupted_run(tmp_path, selection, waves):
    whole = run(tmp_path, "whole", 3, selection=selection, waves=waves)
    for steps in (1, 2, 3):
        part = run(tmp_path, "part", steps, resuming=steps > 1, selection=selection, waves=waves)
    same_run(whole, part, 3)  # the concentration figures included: they continue across each resume
    rows = list(read_jsonl(part / "metrics.jsonl"))
    concentration = [{k: v for k, v in row.items() if k.startswith("rollout/shopsim/concentration/")} for row in rows]
    assert all(concentration) and concentration[-1] != concentration[0]
    config = json.loads((part / "run.json").read_text())
    assert config["steps"] == 3 and [r["from_step"] for r in config["resumed"]] == [2, 3]


def test_a_missing_step_is_refused_and_nothing_is_deleted(tmp_path, whole):
    root = tmp_path / "gap"
    copy_run(whole, root)
    (root / "step-2").rename(tmp_path / "away")
    before = snapshot(root)
    paths = prepare_run_dir(tmp_path, "gap", resume=True)
    with pytest.raises(resume.ResumeError, match="step 2 is missing but step-3 exists: the run has a gap"):
        resume.prepare(paths, {**json.loads((root / "run.json").read_text()), "steps": 5}, TASKS)
    paths.unlock()
    assert snapshot(root) == before


def test_a_duplicated_step_folder_is_refused(tmp_path, whole):
    root = tmp_path / "dup"
    copy_run(whole, root)
    copy_tree(root / "step-2", root / "step-02")
    paths = prepare_run_dir(tmp_path, "dup", resume=True)
    with pytest.raises(resume.ResumeError, match="step-02 is not a step folder this run writes"):
        resume.prepare(paths, {**json.loads((root / "run.json").read_text()), "steps": 5}, TASKS)
    paths.unlock()


@pytest.mark.parametrize(("field", "value"), [
    ("siblings", "staged"), ("eval_samples", 8), ("fault_rate", 0.01), ("episode_concurrency", 64),
    ("seed", 9), ("knobs", {**KNOBS.as_dict(), "rollout_batch_size": 2}), ("max_turns", 5), ("policy_options", {}),
])
def test_an_option_that_shapes_results_is_refused_on_change_and_run_json_kept(tmp_path, whole, field, value):
    root = tmp_path / "opt"
    copy_run(whole, root)
    recorded = json.loads((root / "run.json").read_text())
    before = (root / "run.json").read_bytes()
    paths = prepare_run_dir(tmp_path, "opt", resume=True)
    with pytest.raises(resume.ResumeError, match=f"these differ \\({field}: "):
        resume.prepare(paths, {**recorded, field: value, "steps": 5}, TASKS)
    paths.unlock()
    assert (root / "run.json").read_bytes() == before


def test_run_json_edited_to_match_new_options_is_caught_by_the_markers(tmp_path, whole):
    root = tmp_path / "edit"
    copy_run(whole, root)
    recorded = {**json.loads((root / "run.json").read_text()), "fault_rate": 0.5}
    (root / "run.json").write_text(json.dumps(recorded))
    paths = prepare_run_dir(tmp_path, "edit", resume=True)
    with pytest.raises(resume.ResumeError, match="step 1 ran with other options than run.json records"):
        resume.prepare(paths, {**recorded, "steps": 5}, TASKS)
    paths.unlock()


def copy_tree(src: Path, dst: Path) -> None:
    import shutil

    shutil.copytree(src, dst, symlinks=True)


def copy_run(src: Path, dst: Path) -> None:
    copy_tree(src, dst)
    (dst / ".lock").unlink(missing_ok=True)


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
            and p.name != ".lock"}
