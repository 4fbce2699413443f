"""slime's real train loop for one launcher configuration: three legs (uninterrupted, crashed, resumed) and what they must show.

For a ``SELECTION`` x ``WAVES`` configuration, :func:`run_configuration` runs, each in its
own process (:mod:`.leg`): the whole run (``NUM_ROLLOUT`` steps, evals every
``eval_interval``), the same run crashed by its training actor at ``crash_at``, and the
resume of the crashed run through slime's own ``load`` path.  :func:`checks` turns what
they recorded into named checks, each a list of mismatches (empty: the check holds):

- ``loop``: the run trained every step, and the crash and resume happened as slime does them;
- ``batch``: every step trained ``rollout_batch_size`` groups of ``n_samples_per_prompt``;
- ``distinct``: no prompt handed out twice in a step;
- ``replay``: the keep/drop decisions equal our own replay (``sampling.recorded.replay_recorded``)
  of the completions slime processed, in its order and batches, and the drop counts slime logged
  equal the replay's;
- ``selector``: our data source has nothing in flight between steps and recorded every
  completed group (configurations with our data source);
- ``metrics``: every documented key reaches the dict slime logs, for rollout and for eval;
- ``resume``: the resumed run completes the same groups with the same outcomes each step and
  trains the same ones (up to slime's own choice among groups that finished in the same
  event-loop turn, which it takes in asyncio's set order), and its data-source state ends
  equal (the state round-trips through slime's save/load).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shopsimrl.sampling.modes import STRATEGIES, WAVE_MODES, WaveMode
from shopsimrl.slime.harness import workspace

SELECTIONS = STRATEGIES
WAVES = WAVE_MODES
CONFIGURATIONS = tuple((s, w) for s in SELECTIONS for w in WAVES)
LEG_TIMEOUT_SECONDS = 600.0
EVAL_DATASET = "shopsim_val"


@dataclass(frozen=True)
class LoopSettings:
    """The loop legs' sizes: the launcher's defaults for the sampling knobs; prompts as in the issue's runs."""

    steps: int = 80
    eval_interval: int = 10
    save_interval: int = 20
    crash_at: int = 45
    tasks: int = 800
    eval_tasks: int = 16
    #: extra launcher variables; by default a smaller step than the launcher's (8 groups of 4, not 16 of 8) so the
    #: four configurations' twelve legs run in CI in minutes; :data:`FULL_SIZE` keeps the launcher's own sizes
    env: dict[str, str] = field(default_factory=lambda: {"ROLLOUT_BATCH_SIZE": "8", "N_SAMPLES_PER_PROMPT": "4"})
    extra: tuple[str, ...] = ()  # extra train.py arguments (e.g. --partial-rollout)

    @classmethod
    def full_size(cls) -> LoopSettings:
        """The launcher's own step (16 groups of 8, one wave of 16) over 1,600 prompts: for the figures."""
        return cls(tasks=1600, env={})

    @property
    def resume_from(self) -> int:
        """The last checkpoint before the crash: slime resumes one past it."""
        return (self.crash_at // self.save_interval) * self.save_interval


@dataclass
class ConfigurationResult:
    selection: str
    waves: str
    legs: dict[str, dict[str, Any]]
    checks: dict[str, list[str]]
    figures: dict[str, float]

    @property
    def name(self) -> str:
        return f"SELECTION={self.selection} WAVES={self.waves}"

    @property
    def passed(self) -> bool:
        return not any(self.checks.values())


def prepare(root: Path, settings: LoopSettings) -> dict[str, Path]:
    """The prompt file, the eval file and the checkpoint directory, shared by every leg.

    Call it once before running configurations in threads (they then find the files); the
    prompt file is written last, so its presence means the rest is there.
    """
    paths = {"train": root / "data" / "train.jsonl", "eval": root / "data" / "eval.jsonl", "hf": root / "hf"}
    if not paths["train"].exists():
        workspace.write_checkpoint_dir(paths["hf"])
        workspace.write_prompts(paths["eval"], workspace.task_ids(settings.eval_tasks, "eval"))
        workspace.write_prompts(paths["train"], workspace.task_ids(settings.tasks))
    return paths


def run_leg(slime_src: Path, directory: Path, env: dict[str, str], extra: list[str],
            crash_at: int | None = None, generate: str = "shopsimrl.slime.harness.world.generate") -> dict[str, Any]:
    """One slime run in a child process; returns what it recorded (``status`` 0 done, 3 crashed as injected)."""
    directory.mkdir(parents=True, exist_ok=True)
    spec = {"slime_src": str(slime_src), "out": str(directory / "leg.json"), "crash_at": crash_at, "env": env,
            "extra": [*extra, "--custom-generate-function-path", generate]}
    (directory / "spec.json").write_text(json.dumps(spec))
    with open(directory / "leg.log", "wb") as log:
        process = subprocess.run([sys.executable, "-m", "shopsimrl.slime.harness.leg", str(directory / "spec.json")],
                                 stdout=log, stderr=subprocess.STDOUT, timeout=LEG_TIMEOUT_SECONDS,
                                 env={**os.environ, "PYTHONUNBUFFERED": "1"}, check=False)
    out = directory / "leg.json"
    if not out.exists():
        tail = (directory / "leg.log").read_text(errors="replace")[-3000:]
        return {"status": process.returncode, "error": f"the leg wrote no result (exit {process.returncode}):\n{tail}"}
    return json.loads(out.read_text())


def launcher_env(selection: str, waves: str, paths: dict[str, Path], directory: Path, settings: LoopSettings) -> dict[str, str]:
    """The launcher's variables for this leg, as a user sets them for ``shopsimrl train``."""
    return {
        "SELECTION": selection, "WAVES": waves, "NUM_ROLLOUT": str(settings.steps),
        "SAVE_INTERVAL": str(settings.save_interval), "HF_CHECKPOINT": str(paths["hf"]),
        "REF_LOAD": str(directory / "ref"), "SAVE_DIR": str(directory / "checkpoints"), "RUN_DIR": str(directory),
        "PROMPT_DATA": str(paths["train"]), **settings.env,
    }


def harness_args(paths: dict[str, Path], settings: LoopSettings) -> list[str]:
    """What a CPU run adds to the launcher's argv, as a user adds MODEL_ARGS: the model's shape and the eval set."""
    return [*workspace.MODEL_ARGS, "--eval-interval", str(settings.eval_interval),
            "--eval-prompt-data", EVAL_DATASET, str(paths["eval"]), "--n-samples-per-eval-prompt", "2",
            *settings.extra]


def run_configuration(slime_src: Path, root: Path, selection: str, waves: str,
                      settings: LoopSettings | None = None, legs: tuple[str, ...] = ("full", "crash", "resume")) -> ConfigurationResult:
    settings = settings or LoopSettings()
    paths = prepare(root, settings)
    base = root / f"{selection}-{waves}"
    extra = harness_args(paths, settings)
    results: dict[str, dict[str, Any]] = {}
    if "full" in legs:
        results["full"] = run_leg(slime_src, base / "full", launcher_env(selection, waves, paths, base / "full", settings), extra)
    if "crash" in legs:
        env = launcher_env(selection, waves, paths, base / "crashed", settings)
        results["crash"] = run_leg(slime_src, base / "crashed", env, extra, crash_at=settings.crash_at)
        if "resume" in legs:
            results["resume"] = run_leg(slime_src, base / "crashed", env, extra)
    result = ConfigurationResult(selection, waves, results, {}, {})
    result.checks = checks(result, settings, base)
    result.figures = figures(results.get("full", {}))
    return result


# -- checks -------------------------------------------------------------------------------------


def _n(leg: dict[str, Any]) -> int:
    return int(leg["args"]["n_samples_per_prompt"])


def _trained_groups(leg: dict[str, Any], step: str) -> dict[int, list[int]]:
    n = _n(leg)
    groups: dict[int, list[int]] = defaultdict(list)
    for index in leg["trained"][step]["sample_indices"]:
        groups[index // n].append(index)
    return groups


def check_loop(result: ConfigurationResult, settings: LoopSettings) -> list[str]:
    problems = []
    full = result.legs.get("full")
    if full is not None:
        if full.get("status") != 0:
            problems.append(f"the run failed: {(full.get('error') or '').strip()[-1500:]}")
        elif sorted(map(int, full["trained"])) != list(range(settings.steps)):
            problems.append(f"trained steps {sorted(map(int, full['trained']))[:5]}... != 0..{settings.steps - 1}")
    crash, resume = result.legs.get("crash"), result.legs.get("resume")
    if crash is not None:
        if crash.get("status") != 3:
            problems.append(f"the crash leg did not stop at the injected crash (status {crash.get('status')}): "
                            f"{(crash.get('error') or '').strip()[-800:]}")
    if resume is not None:
        if resume.get("status") != 0:
            problems.append(f"the resumed run failed: {(resume.get('error') or '').strip()[-1500:]}")
        else:
            steps = sorted(map(int, resume["trained"]))
            if not steps or steps[0] != settings.resume_from:
                problems.append(f"slime's load resumed at step {steps[:1]}, expected {settings.resume_from} "
                                f"(one past the checkpoint at {settings.resume_from - 1})")
    return problems


def check_batches(leg: dict[str, Any]) -> list[str]:
    if leg.get("status") != 0:
        return []
    problems = []
    target, n = int(leg["args"]["rollout_batch_size"]), _n(leg)
    for step in sorted(leg["trained"], key=int):
        groups = _trained_groups(leg, step)
        sizes = sorted({len(g) for g in groups.values()})
        if len(groups) != target or sizes != [n]:
            problems.append(f"step {step}: {len(groups)} groups of sizes {sizes}, expected {target} of {n}")
    return problems


def check_distinct(leg: dict[str, Any]) -> list[str]:
    problems = []
    for step, rows in sorted(leg.get("filtered", {}).items(), key=lambda kv: int(kv[0])):
        if int(step) < 0:
            continue
        handed = leg.get("handed_out", {}).get(step)
        tasks = [task for _, task in handed] if handed is not None else [task for _, _, task, _ in rows]
        twice = sorted({t for t in tasks if tasks.count(t) > 1})
        if twice:
            problems.append(f"step {step}: {len(twice)} prompt(s) handed out twice, e.g. {twice[0]}")
    return problems


def check_replay(leg: dict[str, Any], waves: str) -> list[str]:
    """Our replay of the recorded step (``replay_recorded``: the completions slime filtered, in its order and
    batches) must keep the groups slime trained and count the drops slime logged."""
    from shopsimrl.sampling import ConsecutiveFailureGuard, ControllerStateError
    from shopsimrl.sampling.metrics import dynamic_filter_drop_key
    from shopsimrl.sampling.recorded import replay_recorded

    if leg.get("status") != 0:
        return []
    problems = []
    mode = WaveMode.parse(waves)
    target, wave = int(leg["args"]["rollout_batch_size"]), int(leg["args"]["over_sampling_batch_size"])
    logged = [entry["metrics"] for entry in leg["logged"] if entry["step_key"] == "rollout/step"]
    base = 0  # slime's group index of the step's first group: fixed, what earlier steps submitted; adaptive, handed
    for step in sorted(leg["trained"], key=int):
        events = leg.get("events", {}).get(step, [])
        if mode is WaveMode.ADAPTIVE:
            handed = [e[1] for e in events if e[0] == "hand"]
            base = handed[0] if handed else base
        try:
            # the filter hook raises the consecutive-failure stop on slime's path: the replay does not
            done = replay_recorded(_record(events, base, mode), rollout_batch_size=target,
                                   over_sampling_batch_size=wave, waves=mode,
                                   guard=ConsecutiveFailureGuard(sys.maxsize))
        except ControllerStateError as exc:
            problems.append(f"step {step}: the recorded completions break the wave loop's protocol: {exc}")
            break
        kept = sorted(base + i for i in done.kept)
        trained = sorted(_trained_groups(leg, step))
        if kept != trained:
            problems.append(f"step {step}: slime trained groups {trained[:6]}..., the replay keeps {kept[:6]}...")
        metrics = logged[int(step)] if int(step) < len(logged) else {}
        for reason, indices in done.dropped.items():
            got = metrics.get(dynamic_filter_drop_key(reason), 0)
            if int(got) != len(indices):
                problems.append(f"step {step}: slime logged {got} {reason} drops, the replay drops {len(indices)}")
        if mode is WaveMode.FIXED:
            base += done.submitted
        if len(problems) > 10:
            problems.append("... (further steps not compared)")
            break
    return problems


def _record(events: list[list[Any]], base: int, mode: WaveMode) -> list[Any]:
    """The leg's events of one step as ``replay_recorded``'s record, in step-local submission indices.

    Fixed waves are slime's own loop: its waves open by the controller's rule, so only its batches are read
    (what our data source handed out there is those waves).  Adaptive: each run of hand-outs opened that many
    groups.
    """
    from shopsimrl.sampling.recorded import Finished, Opened

    if mode is WaveMode.FIXED:
        events = [e for e in events if e[0] == "filter"]
    return [Opened(len(run)) if kind == "hand" else Finished([(gi - base, verdict) for _, _, gi, verdict in run])
            for kind, run in _event_runs(events)]


def _event_runs(events: list[list[Any]]) -> list[tuple[str, list[list[Any]]]]:
    """Consecutive hand events as one run; filter events as one run per batch."""
    runs: list[tuple[str, list[list[Any]]]] = []
    for event in events:
        kind = event[0]
        same = runs and runs[-1][0] == kind and (kind == "hand" or runs[-1][1][0][1] == event[1])
        if same:
            runs[-1][1].append(event)
        else:
            runs.append((kind, [event]))
    return runs


def check_selector(leg: dict[str, Any]) -> list[str]:
    if "trained" not in leg or leg["args"].get("data_source_path") != "shopsimrl.slime.data_source.SelectorDataSource":
        return []
    problems = []
    for step in sorted(leg["trained"], key=int):
        flying = leg["in_flight_after"].get(step)
        if flying:
            problems.append(f"after step {step}: {flying} prompts still in flight in the selector")
        completed = len(leg["filtered"].get(step, []))
        recorded = leg["recorded"].get(step, 0)
        if recorded != completed:
            problems.append(f"step {step}: {completed} completed groups, the selector recorded {recorded}")
        if len(problems) > 10:
            problems.append("... (further steps not compared)")
            break
    return problems


def documented_rollout_keys(selector: bool) -> set[str]:
    from shopsimrl.sampling import DROP_REASONS, dynamic_filter_drop_key
    from shopsimrl.sampling import metrics as m
    from shopsimrl.sampling.selector import SELECTOR_PREFIX

    keys = {m.TRAJECTORY_COUNT, m.GROUP_COUNT, m.TRAIN_TRAJECTORY_COUNT, m.TRAIN_GROUP_COUNT, m.SCORED_RATE,
            m.TECHNICAL_GROUP_DROP_COUNT, m.ZERO_STD_GROUP_DROP_COUNT, m.TECHNICAL_GROUP_DROP_RATE,
            m.ZERO_STD_GROUP_DROP_RATE, *(dynamic_filter_drop_key(r) for r in DROP_REASONS)}
    if selector:
        keys |= {SELECTOR_PREFIX + k for k in ("prompts_chosen", "prompts_explored", "prompts_skipped",
                                               "prompts_rechecked", "prompts_released", "coverage",
                                               "informative_per_1k_episodes")}
    return keys


def documented_eval_keys(dataset: str) -> set[str]:
    return {f"eval/{dataset}/shopsim_unscored_count", f"eval/{dataset}/shopsim_scored_rate"}


def check_metrics(leg: dict[str, Any]) -> list[str]:
    if leg.get("status") != 0:
        return []
    problems = []
    selector = leg["args"].get("data_source_path") == "shopsimrl.slime.data_source.SelectorDataSource"
    rollout = [e["metrics"] for e in leg["logged"] if e["step_key"] == "rollout/step"]
    evals = [e["metrics"] for e in leg["logged"] if e["step_key"] == "eval/step"]
    want = documented_rollout_keys(selector)
    missing = [(i, sorted(want - m.keys())) for i, m in enumerate(rollout) if want - m.keys()]
    if missing:
        problems.append(f"rollout: {len(missing)} of {len(rollout)} logged dicts miss documented keys, "
                        f"e.g. step {missing[0][0]}: {missing[0][1]}")
    if not evals:
        problems.append("eval: slime logged no eval")
    want_eval = documented_eval_keys(EVAL_DATASET)
    missing_eval = [sorted(want_eval - m.keys()) for m in evals if want_eval - m.keys()]
    if missing_eval:
        problems.append(f"eval: {len(missing_eval)} of {len(evals)} evals miss {missing_eval[0]}")
    return problems


def check_resume(result: ConfigurationResult, settings: LoopSettings, base: Path) -> list[str]:
    full, resume = result.legs.get("full"), result.legs.get("resume")
    if not full or not resume or full.get("status") != 0 or resume.get("status") != 0:
        return []
    problems = []
    for step in range(settings.resume_from, settings.steps):
        key = str(step)
        if key not in resume["trained"]:
            problems.append(f"step {step}: the resumed run did not train it")
            break
        completed = {tuple(row[1:]) for row in full["filtered"].get(key, [])}
        again = {tuple(row[1:]) for row in resume["filtered"].get(key, [])}
        if completed != again:
            problems.append(f"step {step}: the resumed run completed other groups ({len(again - completed)} new, "
                            f"{len(completed - again)} missing, e.g. {sorted(again ^ completed)[:1]})")
            break
        a, b = set(_trained_groups(full, key)), set(_trained_groups(resume, key))
        # slime filters the groups that finished in one event-loop turn in the order of asyncio's done *set*, which
        # differs between processes: when such a batch fills the step, which of its groups are kept can differ
        tied = _in_shared_batches(full, key) & _in_shared_batches(resume, key)
        if (a ^ b) - tied:
            problems.append(f"step {step}: the resumed run trained other groups: {sorted(b - a)[:4]} instead of "
                            f"{sorted(a - b)[:4]}")
            break
    last = settings.steps - 1
    for name in (f"shopsim_selector_{last}.json", f"global_dataset_state_dict_{last}.pt"):
        ours, theirs = base / "full" / "checkpoints" / "rollout" / name, base / "crashed" / "checkpoints" / "rollout" / name
        if ours.exists() != theirs.exists():
            problems.append(f"{name}: written by one run only")
        elif ours.exists() and not _same_state(ours, theirs):
            problems.append(f"{name}: the data source's state differs between the resumed and the uninterrupted run")
    return problems


def _in_shared_batches(leg: dict[str, Any], step: str) -> set[int]:
    """Groups of ``step`` that finished in the same event-loop turn as another group."""
    batches: dict[int, list[int]] = defaultdict(list)
    for batch, gi, _task, _verdict in leg["filtered"].get(step, []):
        batches[batch].append(gi)
    return {gi for members in batches.values() if len(members) > 1 for gi in members}


def _same_state(a: Path, b: Path) -> bool:
    if a.suffix == ".json":
        return _comparable(json.loads(a.read_text())) == _comparable(json.loads(b.read_text()))
    import pickle

    with open(a, "rb") as fa, open(b, "rb") as fb:
        return pickle.load(fa) == pickle.load(fb)


def _comparable(state: dict[str, Any]) -> dict[str, Any]:
    """The data source's state with its concentration counts as totals: they follow the trained groups, and which
    groups of a tied batch slime keeps differs between processes (``check_resume`` allows it)."""
    counts = (state.get("selector") or {}).get("concentration")
    if counts:
        counts["counts"] = sum(n for _, n in counts["counts"])
        del counts["epoch_prompts"]
    return state


def checks(result: ConfigurationResult, settings: LoopSettings, base: Path) -> dict[str, list[str]]:
    full = result.legs.get("full", {})
    return {
        "loop": check_loop(result, settings),
        "batch": check_batches(full) if full else [],
        "distinct": check_distinct(full) if full else [],
        "replay": check_replay(full, result.waves) if full else [],
        "selector": check_selector(full) if full else [],
        "metrics": check_metrics(full) if full else [],
        "resume": check_resume(result, settings, base),
    }


def figures(leg: dict[str, Any]) -> dict[str, float]:
    """Informative groups per 1,000 generated episodes, and generated per trained episode, over the whole run."""
    from shopsimrl.sampling.verdict import Verdict, reward_spread_verdict

    if leg.get("status") != 0:
        return {}
    generated = sum(1 for row in leg["episodes"] if not row[1])
    trained = informative = 0
    for step in leg["trained"]:
        rewards = dict(zip(leg["trained"][step]["sample_indices"], leg["trained"][step]["raw_reward"]))
        for members in _trained_groups(leg, step).values():
            values = [rewards[i] for i in members]
            trained += len(values)
            informative += reward_spread_verdict(values) is Verdict.VARIED
    return {
        "informative_per_1k_generated": 1000.0 * informative / generated if generated else 0.0,
        "generated_per_trained": generated / trained if trained else 0.0,
        "generated_episodes": float(generated),
        "trained_episodes": float(trained),
        "seconds": float(leg.get("seconds", 0.0)),
    }
