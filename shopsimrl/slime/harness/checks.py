"""What slime's real train loop did, for one launcher configuration, as named checks.

The legs of :mod:`.loop` record what slime did; :func:`checks` turns that into named
checks, each an :class:`~.outcome.Outcome`: PASS or FAIL (with the mismatches) on
evidence, NOT RUN when what it compares is missing (its leg failed, no step was trained),
N/A where it does not apply:

- ``loop``: the run trained every step, and the crash and resume happened as slime does them; in
  ``train_async.py`` legs, every rollout k+1 began drawing before step k trained (else the loop ran is not
  the asynchronous one);
- ``batch``: every step trained ``rollout_batch_size`` groups of ``n_samples_per_prompt``;
- ``distinct``: no prompt handed out twice in a step;
- ``weight``: every trained sample's advantage, as slime's training actor received it, is the GRPO
  advantage of its group's raw rewards times the importance weight its samples were drawn with
  (1 without one); with ``SELECTION=skip`` at least one trained group must carry a weight
  above 1 (else NOT RUN: the weight went untested);
- ``replay``: the keep/drop decisions equal our own replay (``sampling.recorded.replay_recorded``)
  of the completions slime processed, in its order and batches, and the drop counts slime logged
  equal the replay's;
- ``selector``: our data source has nothing in flight between steps and recorded every
  completed group (configurations with our data source);
- ``in_flight``: a prompt the data source has in flight in a step is never handed out again in that step
  (the selector's own in-flight set at each draw; with slime's data source, the step's draws);
- ``feedback``: the selector's feedback from step k arrives before step k + 2's first pick
  (what ``train_async.py``, which generates step k + 1 while step k trains, must still give); the PASS
  says whether it also arrived before step k + 1's;
- ``metrics``: every documented key reaches the dict slime logs, for rollout and for eval;
- ``resume``: the resumed run completes the same groups with the same outcomes each step and
  trains the same ones (up to slime's own choice among groups that finished in the same
  event-loop turn, which it takes in asyncio's set order), and its data-source state ends
  equal (the state round-trips through slime's save/load).
"""

from __future__ import annotations

import json
import pickle
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from shopsimrl.sampling import (
    DROP_REASONS,
    ConsecutiveFailureGuard,
    ControllerStateError,
    TooManyTechnicalFailures,
    dynamic_filter_drop_key,
)
from shopsimrl.sampling import metrics as m
from shopsimrl.sampling.modes import WaveMode
from shopsimrl.sampling.recorded import Finished, Opened, replay_recorded
from shopsimrl.sampling.selection_metrics import SELECTOR_PREFIX
from shopsimrl.slime.harness.outcome import Outcome, Status
from shopsimrl.slime.harness.recorded_leg import finished, group_size, nothing_to_compare, trained_groups
from shopsimrl.slime.harness.weight_check import check_weights
from shopsimrl.slime.harness.workspace import EVAL_DATASET
from shopsimrl.slime.settings import slime_settings

if TYPE_CHECKING:
    from shopsimrl.slime.harness.loop import LoopSettings

#: The checks of one configuration, in the order they are reported.
CHECKS = ("loop", "batch", "distinct", "weight", "replay", "selector", "in_flight", "feedback", "metrics", "resume")


def check_loop(legs: dict[str, dict[str, Any]], settings: LoopSettings) -> Outcome:
    if not legs:
        return Outcome.not_run("no leg was run")
    problems = []
    full = legs.get("full")
    if full is not None:
        if not finished(full):
            problems.append(f"the run failed: {(full.get('error') or '').strip()[-1500:]}")
        elif sorted(map(int, full["trained"])) != list(range(settings.steps)):
            problems.append(f"trained steps {sorted(map(int, full['trained']))[:5]}... != 0..{settings.steps - 1}")
        elif settings.is_async:
            problems += _not_overlapped(full, settings.steps)
    crash, resume = legs.get("crash"), legs.get("resume")
    if crash is not None:
        if crash.get("status") != 3:
            problems.append(f"the crash leg did not stop at the injected crash (status {crash.get('status')}): "
                            f"{(crash.get('error') or '').strip()[-800:]}")
    if resume is not None:
        if not finished(resume):
            problems.append(f"the resumed run failed: {(resume.get('error') or '').strip()[-1500:]}")
        else:
            steps = sorted(map(int, resume["trained"]))
            if not steps or steps[0] != settings.resume_from:
                problems.append(f"slime's load resumed at step {steps[:1]}, expected {settings.resume_from} "
                                f"(one past the checkpoint at {settings.resume_from - 1})")
    return Outcome.of(problems)


def _not_overlapped(leg: dict[str, Any], steps: int) -> list[str]:
    """``train_async.py``: rollout k + 1 draws its first prompts before step k trains (slime's order)."""
    first_draw: dict[int, int] = {}
    trained_at: dict[int, int] = {}
    for position, (kind, step) in enumerate(leg.get("feedback", [])):
        if kind == "hand":
            first_draw.setdefault(int(step), position)
        elif kind == "train":
            trained_at.setdefault(int(step), position)
    late = [k for k in range(steps - 1) if first_draw.get(k + 1, len(leg.get("feedback", []))) > trained_at.get(k, -1)]
    return [f"rollout {late[0] + 1} began after step {late[0]} trained ({len(late)} such steps): not slime's "
            f"asynchronous order"] if late else []


def check_batches(leg: dict[str, Any]) -> Outcome:
    if missing := nothing_to_compare(leg):
        return missing
    problems = []
    target, n = int(leg["args"]["rollout_batch_size"]), group_size(leg)
    for step in sorted(leg["trained"], key=int):
        groups = trained_groups(leg, step)
        sizes = sorted({len(g) for g in groups.values()})
        if len(groups) != target or sizes != [n]:
            problems.append(f"step {step}: {len(groups)} groups of sizes {sizes}, expected {target} of {n}")
    return Outcome.of(problems)


def check_distinct(leg: dict[str, Any]) -> Outcome:
    if missing := nothing_to_compare(leg):
        return missing
    problems = []
    steps = [(step, rows) for step, rows in leg.get("filtered", {}).items() if int(step) >= 0]
    if not steps:
        return Outcome.not_run("slime filtered no group of a training step")
    for step, rows in sorted(steps, key=lambda kv: int(kv[0])):
        handed = leg.get("handed_out", {}).get(step)
        tasks = [task for _, task in handed] if handed is not None else [task for _, _, task, _ in rows]
        twice = sorted({t for t in tasks if tasks.count(t) > 1})
        if twice:
            problems.append(f"step {step}: {len(twice)} prompt(s) handed out twice, e.g. {twice[0]}")
    return Outcome.of(problems)


def check_replay(leg: dict[str, Any], waves: str) -> Outcome:
    """Our replay of the recorded step (``replay_recorded``: the completions slime filtered, in its order and
    batches) must keep the groups slime trained and count the drops slime logged."""
    if missing := nothing_to_compare(leg):
        return missing
    problems: list[str] = []
    mode = WaveMode.parse(waves)
    target, wave = int(leg["args"]["rollout_batch_size"]), int(leg["args"]["over_sampling_batch_size"])
    logged = [entry["metrics"] for entry in leg["logged"] if entry["step_key"] == "rollout/step"]
    base = 0  # slime's group index of the step's first group: fixed, what earlier steps submitted; adaptive, handed
    guard = ConsecutiveFailureGuard(slime_settings(SimpleNamespace(**leg["args"])).max_consecutive_failed_groups)  # the run's
    for step in sorted(leg["trained"], key=int):
        events = leg.get("events", {}).get(step, [])
        if mode is WaveMode.ADAPTIVE:
            handed = [e[1] for e in events if e[0] == "hand"]
            base = handed[0] if handed else base
        try:
            done = replay_recorded(_record(events, base, mode), rollout_batch_size=target,
                                   over_sampling_batch_size=wave, waves=mode, guard=guard)
        except ControllerStateError as exc:
            problems.append(f"step {step}: the recorded completions break the wave loop's protocol: {exc}")
            break
        except TooManyTechnicalFailures as exc:
            problems.append(f"step {step}: the replay stops on technical groups where the run went on: {exc}")
            break
        kept = sorted(base + i for i in done.kept)
        trained = sorted(trained_groups(leg, step))
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
    return Outcome.of(problems)


def _record(events: list[list[Any]], base: int, mode: WaveMode) -> list[Any]:
    """The leg's events of one step as ``replay_recorded``'s record, in step-local submission indices.

    Fixed waves are slime's own loop: its waves open by the controller's rule, so only its batches are read
    (what our data source handed out there is those waves).  Adaptive: each run of hand-outs opened that many
    groups.
    """
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


def check_selector(leg: dict[str, Any]) -> Outcome:
    if missing := nothing_to_compare(leg):
        return missing
    if leg["args"].get("data_source_path") != "shopsimrl.slime.data_source.SelectorDataSource":
        return Outcome.not_applicable("slime's own data source in this configuration: no selector of ours")
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
    return Outcome.of(problems)


def check_feedback(leg: dict[str, Any]) -> Outcome:
    """The selector's feedback from step k (every group it recorded) arrives before step k + 2's first pick.

    In ``train_async.py`` step k + 1 is generated while step k trains; step k's groups are recorded when its
    rollout ends, so step k + 2 must already pick with them (``train.py``: step k + 1 does too).
    """
    if missing := nothing_to_compare(leg):
        return missing
    if leg["args"].get("data_source_path") != "shopsimrl.slime.data_source.SelectorDataSource":
        return Outcome.not_applicable("slime's own data source in this configuration: no selector of ours")
    order = leg.get("feedback", [])
    if not order:
        return Outcome.not_run("the run recorded no hand-out or feedback order")
    last_record: dict[int, int] = {}
    first_hand: dict[int, int] = {}
    for position, (kind, step) in enumerate(order):
        if kind == "record":
            last_record[step] = position
        elif kind == "hand":
            first_hand.setdefault(step, position)
    problems = [f"step {step}: feedback recorded after step {step + 2} began picking" for step, position in
                sorted(last_record.items()) if step >= 0 and first_hand.get(step + 2, len(order)) < position]
    unrecorded = sorted(int(step) for step in leg["trained"] if int(step) not in last_record)
    if unrecorded:  # a trained step's groups completed: no feedback at all is late feedback
        problems.append(f"{len(unrecorded)} trained step(s) fed the selector nothing, e.g. step {unrecorded[0]}")
    if problems:
        return Outcome.of(problems[:10])
    later = [step for step, position in sorted(last_record.items())
             if step >= 0 and first_hand.get(step + 1, len(order)) < position]
    return Outcome(Status.PASS, note="step k's feedback reached step k+1's picks in every step" if not later else
                   f"step k's feedback reached step k+2's picks; step k+1 picked before it in {len(later)} step(s), "
                   f"e.g. step {later[0] + 1}")


def check_in_flight(leg: dict[str, Any]) -> Outcome:
    """No prompt in flight in a step is handed out again in that step.

    In ``train_async.py`` rollout k + 1 draws while step k trains: each draw must miss what the data source
    still has in flight (the selector's own set, read before the draw) and what that step already handed out.
    """
    if missing := nothing_to_compare(leg):
        return missing
    draws = [d for d in leg.get("draws", []) if int(d[0]) >= 0]
    if not draws:
        return Outcome.not_run("the run recorded no draw from its data source")
    problems: list[str] = []
    handed: dict[int, set[str]] = defaultdict(set)
    for rid, tasks, flying in draws:
        again = sorted((set(tasks) & set(flying)) | (set(tasks) & handed[rid]) | {t for t in tasks if tasks.count(t) > 1})
        if again:
            problems.append(f"step {rid}: {len(again)} prompt(s) in flight handed out again in the step, e.g. {again[0]}")
        handed[rid].update(tasks)
        if len(problems) > 10:
            problems.append("... (further draws not compared)")
            break
    return Outcome.of(problems)


def documented_rollout_keys(selector: bool) -> set[str]:
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


def check_metrics(leg: dict[str, Any]) -> Outcome:
    if missing := nothing_to_compare(leg):
        return missing
    problems = []
    selector = leg["args"].get("data_source_path") == "shopsimrl.slime.data_source.SelectorDataSource"
    rollout = [e["metrics"] for e in leg["logged"] if e["step_key"] == "rollout/step"]
    evals = [e["metrics"] for e in leg["logged"] if e["step_key"] == "eval/step"]
    if not rollout:
        problems.append(f"rollout: slime logged no rollout metrics in {len(leg['trained'])} trained steps")
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
    return Outcome.of(problems)


def check_resume(legs: dict[str, dict[str, Any]], settings: LoopSettings, base: Path) -> Outcome:
    full, resume = legs.get("full"), legs.get("resume")
    if missing := nothing_to_compare(full) or nothing_to_compare(resume, "the resumed run"):
        return missing
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
                            f"{len(completed - again)} missing, e.g. {sorted(again ^ completed)[:1]})"
                            + _one_step_ahead(full, resume, step))
            break
        a, b = set(trained_groups(full, key)), set(trained_groups(resume, key))
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
    return Outcome.of(problems)


def _tasks(leg: dict[str, Any], step: int) -> set[str]:
    return {row[2] for row in leg["filtered"].get(str(step), [])}


def _one_step_ahead(full: dict[str, Any], resume: dict[str, Any], step: int) -> str:
    """Why, when the resumed run's step drew the prompts of the uninterrupted run's next step."""
    if _tasks(resume, step) and _tasks(resume, step) == _tasks(full, step + 1):
        return (f": it drew the prompts of the uninterrupted run's step {step + 1} (the data source's state saved "
                f"with the checkpoint before step {step} was one step ahead; slime's train_async.py saves it after "
                f"starting the next rollout), so step {step}'s prompts are skipped")
    return ""


def _in_shared_batches(leg: dict[str, Any], step: str) -> set[int]:
    """Groups of ``step`` that finished in the same event-loop turn as another group."""
    batches: dict[int, list[int]] = defaultdict(list)
    for batch, gi, _task, _verdict in leg["filtered"].get(step, []):
        batches[batch].append(gi)
    return {gi for members in batches.values() if len(members) > 1 for gi in members}


def _same_state(a: Path, b: Path) -> bool:
    if a.suffix == ".json":
        return _tie_free(json.loads(a.read_text())) == _tie_free(json.loads(b.read_text()))
    with open(a, "rb") as fa, open(b, "rb") as fb:
        return pickle.load(fa) == pickle.load(fb)


def _tie_free(state: Any) -> Any:
    """The data source's state without what follows slime's choice among groups that finished in one event-loop
    turn (see :func:`check_resume`): which prompts the trained-prompt counts (``Concentration``) name.  Their sum,
    the trained groups, stays; so does everything else, the selector's records of completed groups included."""
    if isinstance(state, dict):
        if {"counts", "epoch_prompts"} <= state.keys():
            return {**{k: _tie_free(v) for k, v in state.items() if k not in ("counts", "epoch_prompts")},
                    "trained_groups": sum(int(n) for _, n in state["counts"])}
        return {k: _tie_free(v) for k, v in state.items()}
    if isinstance(state, list):
        return [_tie_free(v) for v in state]
    return state


def checks(legs: dict[str, dict[str, Any]], waves: str, settings: LoopSettings, base: Path) -> dict[str, Outcome]:
    full = legs.get("full", {})
    return {
        "loop": check_loop(legs, settings),
        "batch": check_batches(full),
        "distinct": check_distinct(full),
        "weight": check_weights(full),
        "replay": check_replay(full, waves),
        "selector": check_selector(full),
        "in_flight": check_in_flight(full),
        "feedback": check_feedback(full),
        "metrics": check_metrics(full),
        "resume": check_resume(legs, settings, base),
    }
