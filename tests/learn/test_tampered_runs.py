"""Tampered run folders: ``--resume`` refuses each in one line (a ValueError the command turns into exit 2) and
changes nothing, or, where a crash could have left it so, rebuilds it; never a traceback, never a step re-run.

One real run (``--learner grpo``, three steps) is copied and damaged per case.  ``resealed`` cases also rewrite
the step's marker over the damage, as if the damage had been written by the step itself: then the files'
own checks (``policy.npz`` whole, finite, of this policy; ``state.json`` of this run) must catch it.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from shopsimrl.commands import rollout as cli
from shopsimrl.defaults import STATE_FILE
from shopsimrl.env.build import build_catalog
from shopsimrl.io import read_jsonl
from shopsimrl.learn import resume
from shopsimrl.learn.learner import GrpoLearner, StateFileError, load_state, restore
from shopsimrl.learn.policy import LinearPolicy
from shopsimrl.rollout.journal import MARKER, step_contents
from shopsimrl.rollout.outputs import prepare_run_dir

PRODUCTS = 2_000
COMMON = ["--products", str(PRODUCTS), "--view", "plain", "--no-timeline", "--learner", "grpo", "--seed", "3",
          "--episode-concurrency", "4", "--rollout-batch-size", "4", "--over-sampling-batch-size", "8",
          "--n-samples-per-prompt", "4", "--global-batch-size", "8"]


@pytest.fixture(scope="module")
def base(tmp_path_factory, catalog_cache) -> Path:
    """A whole three-step run."""
    build_catalog(PRODUCTS, 0, catalog_cache)
    out = tmp_path_factory.mktemp("base")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SHOPSIMRL_CACHE", str(catalog_cache))
        assert cli.main([*COMMON, "--out", str(out), "--name", "base", "--steps", "3"]) == 0
    (out / "base" / ".lock").unlink()
    return out / "base"


def reseal(step: Path) -> None:
    """Rewrite the step's marker over what the folder now holds (the last step: no later marker chains to it)."""
    marker = json.loads((step / MARKER).read_text())
    marker["files"], marker["folders"] = step_contents(step)
    (step / MARKER).write_text(json.dumps(marker))


def save_npz(path: Path, **changes: object) -> None:
    with np.load(path) as data:
        arrays = {k: data[k] for k in data.files}
    for key, value in changes.items():
        if value is None:
            del arrays[key]
        else:
            arrays[key] = np.asarray(value)
    path.unlink()
    with open(path, "wb") as handle:
        np.savez(handle, **arrays)


def theta_with(value: float) -> Callable[[Path], None]:
    def tamper(root: Path) -> None:
        with np.load(root / "step-3" / STATE_FILE) as data:
            theta = data["theta"].copy()
        theta[2] = value
        save_npz(root / "step-3" / STATE_FILE, theta=theta)
    return tamper


def edit_json(relative: str, change: Callable[[dict], object]) -> Callable[[Path], None]:
    def tamper(root: Path) -> None:
        path = root / relative
        value = json.loads(path.read_text())
        path.write_text(json.dumps(change(value), allow_nan=True))
    return tamper


def rewrite_lines(relative: str, keep: Callable[[dict], bool], change: Callable[[dict], dict] = lambda e: e):
    def tamper(root: Path) -> None:
        path = root / relative
        rows = [change(r) for r in read_jsonl(path) if keep(r)]
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tamper


def without(key: str) -> Callable[[dict], dict]:
    return lambda d: {k: v for k, v in d.items() if k != key}


def swap_first_prompt(saved: dict) -> dict:
    """The saved selector with its first prompt id renamed, wherever the source keeps its ids."""
    text = json.dumps(saved)
    first = json.loads((text.split('"prompt_ids": ', 1)[1]).split("]", 1)[0] + "]")[0]
    return json.loads(text.replace(json.dumps(first), json.dumps(first + "-other")))


def npz(**changes: object) -> Callable[[Path], None]:
    return lambda root: save_npz(root / "step-3" / STATE_FILE, **changes)


def write(relative: str, data: bytes) -> Callable[[Path], None]:
    return lambda root: (root / relative).write_bytes(data)


def remove(relative: str) -> Callable[[Path], None]:
    def tamper(root: Path) -> None:
        path = root / relative
        shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    return tamper


def truncate(relative: str) -> Callable[[Path], None]:
    def tamper(root: Path) -> None:
        data = (root / relative).read_bytes()
        (root / relative).write_bytes(data[: len(data) // 2])
    return tamper


def to_directory(relative: str) -> Callable[[Path], None]:
    def tamper(root: Path) -> None:
        (root / relative).unlink()
        (root / relative).mkdir()
    return tamper


def to_symlink(relative: str, target: str) -> Callable[[Path], None]:
    def tamper(root: Path) -> None:
        (root / relative).unlink()
        (root / relative).symlink_to(root / target)
    return tamper


def symlinked_step(root: Path) -> None:
    elsewhere = root.parent / "elsewhere-step-3"
    (root / "step-3").rename(elsewhere)
    (root / "step-3").symlink_to(elsewhere, target_is_directory=True)


def copy_step(src: str, dst: str) -> Callable[[Path], None]:
    def tamper(root: Path) -> None:
        shutil.rmtree(root / dst, ignore_errors=True)
        shutil.copytree(root / src, root / dst)
    return tamper


def copy_file_of(src: str, dst: str) -> Callable[[Path], None]:
    def tamper(root: Path) -> None:
        (root / dst).unlink()
        shutil.copyfile(root / src, root / dst)
    return tamper


def make_folder(relative: str) -> Callable[[Path], None]:
    return lambda root: (root / relative / "traces").mkdir(parents=True)


def append_text(relative: str, text: str) -> Callable[[Path], None]:
    def tamper(root: Path) -> None:
        with open(root / relative, "a", encoding="utf-8") as handle:
            handle.write(text)
    return tamper


def run_json_to(value: object) -> Callable[[Path], None]:
    return lambda root: (root / "run.json").write_text(json.dumps(value))


REFUSED: list[tuple[str, Callable[[Path], None], str, bool]] = [
    # (case, tamper, what the one line says, resealed)
    # policy.npz, caught by the marker (its digest) and, resealed, by its own checks
    *[(f"policy.npz {name}{' resealed' if sealed else ''}", tamper, message if sealed else raw, sealed)
      for name, tamper, message, raw in [
          ("truncated", truncate("step-3/policy.npz"), "is not a saved policy", "differs from what step 3 wrote"),
          ("empty", write("step-3/policy.npz", b""), "is not a saved policy", "differs from what step 3 wrote"),
          ("garbage", write("step-3/policy.npz", os.urandom(300)), "is not a saved policy", "differs from"),
          ("missing", remove("step-3/policy.npz"), "policy.npz is missing", "policy.npz is missing"),
          ("a directory", to_directory("step-3/policy.npz"), "is not a regular file", "policy.npz is not a regular file"),
          ("a symlink", to_symlink("step-3/policy.npz", "step-2/policy.npz"), "a symbolic link", "is not a regular file"),
          ("of step 2", copy_file_of("step-2/policy.npz", "step-3/policy.npz"), "not by step 3", "differs from what step 3"),
          *[(f"without {key}", npz(**{key: None}), f"lacks {key}", "differs from") for key in
            ("theta", "names", "m", "v", "t", "lr")],
          ("theta of another shape", npz(theta=np.zeros(5)), "theta has shape (5,)", "differs from"),
          ("m two-dimensional", npz(m=np.zeros((17, 2))), "m has shape", "differs from"),
          ("other parameter names", npz(names=np.asarray(["a"] * 17)), "holds other parameters", "differs from"),
          ("NaN in theta", theta_with(math.nan), "theta holds NaN", "differs from"),
          ("infinity in theta", theta_with(math.inf), "theta holds NaN or an infinity", "differs from"),
          ("NaN in v", npz(v=np.full(17, np.nan)), "v holds NaN", "differs from"),
          ("a negative t", npz(t=np.asarray(-1)), "t (Adam's update count)", "differs from"),
          ("lr zero", npz(lr=np.asarray(0.0)), "lr must be one finite number", "differs from"),
      ] for sealed in (False, True)],
    # events.jsonl and its waves
    ("events.jsonl missing", remove("step-2/events.jsonl"), "events.jsonl is missing", False),
    ("events.jsonl truncated", truncate("step-3/events.jsonl"), "events.jsonl differs", False),
    ("wave events deleted", rewrite_lines("step-2/events.jsonl", lambda e: e["event"] != "wave"), "events.jsonl differs",
     False),
    ("task_ids deleted", rewrite_lines("step-3/events.jsonl", lambda e: True, without("task_ids")),
     "events.jsonl differs", False),
    # state.json: the selector and the failure streak
    ("state.json missing", remove("step-3/state.json"), "state.json is missing", False),
    ("state.json missing resealed", remove("step-3/state.json"), "state.json is missing", True),
    ("state.json not JSON resealed", write("step-3/state.json", b"{oops"), "is not valid JSON", True),
    ("state.json a list resealed", write("step-3/state.json", b"[]"), "holds a JSON list", True),
    ("state.json with NaN resealed", edit_json("step-3/state.json", lambda s: {**s, "x": math.nan}),
     "is not valid JSON", True),
    ("state.json of another selection resealed", edit_json("step-3/state.json", lambda s: {
        **s, "prompt_source": {**s["prompt_source"], "strategy": "skip"}}), "its selector is", True),
    ("state.json without prompt ids resealed", edit_json("step-3/state.json", lambda s: {
        **s, "prompt_source": {**s["prompt_source"], "evidence": without("prompt_ids")(s["prompt_source"]["evidence"])}}),
     "other train tasks", True),
    ("state.json with a negative streak resealed", edit_json("step-3/state.json", lambda s: {
        **s, "guard": {"count": -1, "recent": []}}), "a failure streak is a count", True),
    ("state.json without its selector model resealed", edit_json("step-3/state.json", lambda s: {
        **s, "prompt_source": {**s["prompt_source"], "evidence": without("model")(s["prompt_source"]["evidence"])}}),
     "state.json: 'model'", True),
    ("state.json of other prompts resealed", edit_json("step-3/state.json", lambda s: {
        **s, "prompt_source": swap_first_prompt(s["prompt_source"])}), "other train tasks", True),
    ("state.json of another version resealed", edit_json("step-3/state.json", lambda s: {
        **s, "prompt_source": {**s["prompt_source"], "version": 999}}), "version 999", True),
    # metrics.json and the markers
    ("metrics.json edited", edit_json("step-2/metrics.json", lambda m: {**m, "train/loss": 0.0}),
     "metrics.json differs", False),
    ("metrics.json missing", remove("step-1/metrics.json"), "metrics.json is missing", False),
    ("marker not JSON", write("step-3/complete.json", b"{"), "is not valid JSON", False),
    ("marker empty", write("step-3/complete.json", b""), "is not valid JSON", False),
    ("marker a list", write("step-3/complete.json", b"[1]"), "holds a JSON list", False),
    ("marker step null", edit_json("step-3/complete.json", lambda m: {**m, "step": None}),
     "is the marker of step None", False),
    ("marker of step 2", copy_file_of("step-2/complete.json", "step-3/complete.json"), "is the marker of step 2", False),
    ("marker of another run", edit_json("step-3/complete.json", lambda m: {**m, "run_id": "0" * 16}),
     "belongs to another run", False),
    ("marker of another format", edit_json("step-3/complete.json", lambda m: {**m, "format": 0}), "format 0", False),
    ("marker a directory", to_directory("step-3/complete.json"), "is not a regular file", False),
    ("marker a symlink", to_symlink("step-3/complete.json", "step-2/complete.json"), "a symbolic link", False),
    ("an earlier marker edited", edit_json("step-2/complete.json", lambda m: {**m, "extra": 1}),
     "step-3/complete.json does not follow step 2's marker", False),
    ("step 2 replaced by step 1", copy_step("step-1", "step-2"), "is the marker of step 1", False),
    # run.json
    ("run.json missing", remove("run.json"), "pass --overwrite instead of --resume", False),
    ("run.json not JSON", write("run.json", b"{"), "is not valid JSON", False),
    ("run.json a list", write("run.json", b"[]"), "holds a JSON list", False),
    ("run.json a directory", to_directory("run.json"), "is not a regular file", False),
    ("run.json without run_id", edit_json("run.json", without("run_id")), "written by an older shopsimrl", False),
    ("run.json of another run", edit_json("run.json", lambda r: {**r, "run_id": "1" * 16}), "belongs to another run",
     False),
    ("run.json option edited", edit_json("run.json", lambda r: {**r, "seed": 4}), "seed: 4 then, 3 now", False),
    ("run.json knobs null", edit_json("run.json", lambda r: {**r, "knobs": None}), "knobs: None then", False),
    # the step folders
    ("a symlinked step folder", symlinked_step, "step-3 is a symbolic link", False),
    ("step 2 missing", remove("step-2"), "step 2 is missing but step-3 exists", False),
    ("step 2 duplicated as step-02", copy_step("step-2", "step-02"), "step-02 is not a step folder", False),
    ("a step-0 folder", make_folder("step-0"), "step-0 is not a step folder", False),
    ("step 3 a file", lambda root: (remove("step-3")(root), (root / "step-3").write_text("x")), "step-3 is not a folder",
     False),
    ("a stray step beyond", make_folder("step-7"), "step 4 is missing but step-7 exists", False),
    ("two incomplete steps", lambda root: (make_folder("step-4")(root), make_folder("step-5")(root)),
     "step 4 is incomplete but step-5 exists", False),
    ("a trace deleted", lambda root: next((root / "step-2" / "traces").iterdir()).unlink(), "the files in traces",
     False),
    ("a file added to a step", write("step-1/notes.txt", b"hi"), "notes.txt was not written by step 1", False),
    # the failure queue
    ("failure queue step null", append_text("failure_queue.jsonl", '{"step": null}\n'), "has no step number", False),
    ("failure queue garbage", append_text("failure_queue.jsonl", "not json\n"), "is not JSON", False),
]


#: Damage a crash or a hand could leave in the logs that the steps' records rebuild: resumed, logs made whole.
REBUILT: list[tuple[str, Callable[[Path], None]]] = [
    ("metrics row with step null", append_text("metrics.jsonl", '{"step": null}\n')),
    ("metrics rows duplicated", lambda root: append_text("metrics.jsonl", (root / "metrics.jsonl").read_text())(root)),
    ("metrics row of step 2 missing", rewrite_lines("metrics.jsonl", lambda r: r["step"] != 2)),
    ("metrics torn last line", append_text("metrics.jsonl", '{"step": 4, "x"')),
    ("metrics.jsonl missing", remove("metrics.jsonl")),
    ("metrics garbage", append_text("metrics.jsonl", "garbage\n")),
    ("metrics row of an incomplete step 4", lambda root: (make_folder("step-4")(root),
                                                          append_text("metrics.jsonl", '{"step": 4}\n')(root))),
    ("failure queue torn last line", append_text("failure_queue.jsonl", '{"step": 3, "run"')),
    ("failure queue row of an incomplete step 4", append_text("failure_queue.jsonl", '{"step": 4}\n')),
]


def snapshot(root: Path) -> dict[str, bytes | str]:
    seen: dict[str, bytes | str] = {}
    for path in sorted(root.rglob("*")):
        key = str(path.relative_to(root))
        if path.is_symlink():
            seen[key] = "-> " + os.readlink(path)
        elif path.is_file() and path.name != ".lock":
            seen[key] = path.read_bytes()
    return seen


def prepare(root: Path, record: dict, tasks: list[str]) -> object:
    """``--resume``'s check and continuation of ``root``, with the real learner's restore."""
    paths = prepare_run_dir(root.parent, root.name, resume=True)
    policy = LinearPolicy()
    learner = GrpoLearner(policy, root, 8)
    try:
        return resume.prepare(paths, {**record, "steps": 5}, tasks,
                              restore_learner=lambda step: restore(policy, learner, step))
    finally:
        paths.unlock()


@pytest.fixture
def damaged(base, tmp_path) -> tuple[Path, dict, list[str]]:
    """A copy of the base run to damage, its run.json record and its train tasks (as the env lists them)."""
    record = json.loads((base / "run.json").read_text())
    tasks = json.loads((base / "step-1" / "state.json").read_text())["prompt_source"]["evidence"]["prompt_ids"]
    root = tmp_path / "run"
    shutil.copytree(base, root, symlinks=True)
    return root, record, tasks


@pytest.mark.parametrize(("tamper", "message", "sealed"), [case[1:] for case in REFUSED],
                         ids=[case[0] for case in REFUSED])
def test_a_tampered_run_folder_is_refused_in_one_line_and_left_as_it_was(damaged, tamper, message, sealed):
    root, record, tasks = damaged
    tamper(root)
    if sealed:
        reseal(root / "step-3")
    before = snapshot(root)
    with pytest.raises(resume.ResumeError) as refused:
        prepare(root, record, tasks)
    line = str(refused.value)
    assert "\n" not in line and (message is None or message in line), line
    assert snapshot(root) == before


@pytest.mark.parametrize("tamper", [case[1] for case in REBUILT], ids=[case[0] for case in REBUILT])
def test_damaged_logs_are_rebuilt_from_the_complete_steps(damaged, tamper):
    root, record, tasks = damaged
    steps_before = {k: snapshot(root / f"step-{k}") for k in (1, 2, 3)}
    tamper(root)
    point = prepare(root, record, tasks)
    assert point.first_step == 4
    rows = list(read_jsonl(root / "metrics.jsonl"))
    assert rows == [{"step": k, **json.loads((root / f"step-{k}" / "metrics.json").read_text())} for k in (1, 2, 3)]
    assert (root / "metrics.jsonl").read_text().endswith("\n")
    text = (root / "failure_queue.jsonl").read_text()
    assert all(r["step"] <= 3 for r in read_jsonl(root / "failure_queue.jsonl")) and (not text or text.endswith("\n"))
    assert not (root / "step-4").exists()
    assert {k: snapshot(root / f"step-{k}") for k in (1, 2, 3)} == steps_before  # no complete step touched


@pytest.mark.parametrize(("tamper", "message", "sealed"), [
    (theta_with(math.nan), "theta holds NaN", True),
    (symlinked_step, "step-3 is a symbolic link", False),
    (remove("step-2"), "step 2 is missing but step-3 exists", False),
    (npz(m=None), "differs from what step 3 wrote", False),
], ids=["NaN in theta", "a symlinked step", "step 2 missing", "policy.npz changed"])
def test_the_command_refuses_with_one_line_and_exit_2_before_any_step(damaged, tamper, message, sealed, catalog_cache,
                                                                       monkeypatch, capsys):
    root = damaged[0]
    tamper(root)
    if sealed:
        reseal(root / "step-3")
    monkeypatch.setenv("SHOPSIMRL_CACHE", str(catalog_cache))
    before = snapshot(root)
    code = cli.main([*COMMON, "--out", str(root.parent), "--name", root.name, "--steps", "5", "--resume"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert message in err
    assert snapshot(root) == before and not (root / "step-4").exists()


@pytest.mark.parametrize(("damage", "message"), [
    (lambda p: p.write_bytes(p.read_bytes()[:100]), "is not a saved policy"),
    (lambda p: p.write_bytes(b""), "is not a saved policy"),
    (lambda p: p.unlink(), "is missing"),
    (lambda p: (p.unlink(), p.mkdir()), "is not a regular file"),
    (lambda p: (p.unlink(), os.mkfifo(p)), "is not a regular file"),
    (lambda p: save_npz(p, theta=np.full(17, np.nan)), "theta holds NaN"),
    (lambda p: save_npz(p, theta=np.asarray(["x"] * 17)), "theta has shape (17,) (<U1)"),
    (lambda p: save_npz(p, t=np.asarray(1.5)), "t (Adam's update count)"),
    (lambda p: save_npz(p, lr=np.asarray(np.inf)), "lr must be one finite number"),
])
def test_a_damaged_policy_file_is_one_line(base, tmp_path, damage, message):
    path = tmp_path / STATE_FILE
    shutil.copyfile(base / "step-3" / STATE_FILE, path)
    load_state(path)  # whole: loads
    damage(path)
    with pytest.raises(StateFileError) as refused:
        load_state(path)
    assert message in str(refused.value) and "\n" not in str(refused.value)
