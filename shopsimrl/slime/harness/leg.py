"""One leg: slime's real ``train()`` (its ``train.py``, or ``train_async.py`` with ``ASYNC=1``) run once, in this process, with the stand-ins; what it did goes to JSON.

``python -m shopsimrl.slime.harness.leg SPEC.json`` (the parent, :mod:`.loop`, writes the
spec and reads ``spec["out"]``).  The argv is our launcher's (:class:`TrainConfig` from the
spec's environment variables, custom config written as ``shopsimrl train`` writes it),
plus what a CPU run must add, as a user adds MODEL_ARGS: the scripted SGLang as an
external engine and router, the eval dataset, and the world's generate function.

What is observed (slime's call sites are wrapped only where slime hands something to us or to its
tracker; the one thing of slime's changed is the order in which it meets the groups that finished in one
event-loop turn, made the same in every process: :mod:`.tie_order`):

- every step slime trains: the train data the training actor receives (stand-in actor);
- every group our filter hook sees (slime's own loop) or our rollout function judges, in the order they are
  judged, with a batch number (one batch per ``asyncio.wait`` wake-up: a callback marks the loop's next turn);
- the groups our data source hands out (``get_samples``), and the selector's records;
- after each step: what the selector still has in flight;
- the dicts slime gives its tracker (``slime.observability.logging_utils.log``).

Exit status: 0 done, 3 the injected crash happened (results still written), 1 failed.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import runpy
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from shopsimrl.defaults import HOOKS
from shopsimrl.io import atomic_write_text
from shopsimrl.sampling import group_verdict
from shopsimrl.sampling.selector import RuleSelector
from shopsimrl.sampling.verdict import iter_samples
from shopsimrl.slime.batch import SlimeBatch
from shopsimrl.slime.data_source import SelectorDataSource
from shopsimrl.slime.harness.children import die_with_parent
from shopsimrl.slime.harness.double.training_actor import ACTOR, HarnessCrash
from shopsimrl.slime.harness.tie_order import in_creation_order
from shopsimrl.slime.harness.world import EPISODES
from shopsimrl.slime.launch import TrainConfig
from shopsimrl.slime.samples import reward_key, sample_weight

EXIT_CRASHED = 3
#: slime's parsed args the checks read (by prefix): our custom-config keys, the sampling knobs, the hook paths, the
#: reward normalization the ``weight`` check recomputes
RECORDED_ARGS = ("shopsim_", "partial_rollout", "rollout_batch", "n_samples", "over_sampling", "eval_interval",
                 "start_rollout_id", "num_rollout", "data_source_path", "rollout_function_path", "eval_function_path",
                 "rewards_normalization", "grpo_std_normalization", "advantage_estimator")


def _jsonable(value: Any) -> Any:
    try:
        import numpy as np  # slow to load, and only a value from slime's tensors needs it

        if isinstance(value, np.generic):
            return value.item()
    except ImportError:  # pragma: no cover
        pass
    if isinstance(value, float | int | str | bool) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return repr(value)


class Recorder:
    """Everything the leg saw, by rollout id."""

    def __init__(self) -> None:
        self.trained: dict[int, dict[str, Any]] = {}
        self.filtered: dict[int, list[list[Any]]] = {}  # rollout id -> [[batch, group_index, task, verdict], ...]
        self.handed_out: dict[int, list[list[Any]]] = {}  # rollout id -> [[group_index, task], ...] (our data source)
        self.weights: dict[int, float] = {}  # sample index -> the importance weight it was drawn with (our data source)
        self.events: dict[int, list[list[Any]]] = {}  # rollout id -> ["hand", gi] / ["filter", batch, gi, verdict], in order
        self.recorded: dict[int, int] = {}  # rollout id -> groups the selector recorded (or released)
        # ["hand", rollout id] / ["record", rollout id] / ["train", rollout id], in the order they happened
        self.feedback: list[list[Any]] = []
        self.draws: list[list[Any]] = []  # [rollout id, [task, ...], [task in flight before the draw, ...]] per draw
        self.in_flight_after: dict[int, int] = {}
        self.logged: list[dict[str, Any]] = []
        self.args: dict[str, Any] = {}
        self._batch = 0
        self._tick_pending = False

    def rollout_id(self) -> int:
        module = sys.modules.get("slime.rollout.sample_hooks")
        value = getattr(module, "_current_rollout_id", None)
        return -1 if value is None else int(value)

    def batch(self) -> int:
        """The number of the event-loop turn this call is in (filter calls of one ``asyncio.wait`` wake-up share it)."""
        if not self._tick_pending:
            self._tick_pending = True

            def tick() -> None:
                self._batch += 1
                self._tick_pending = False

            asyncio.get_running_loop().call_soon(tick)
        return self._batch

    def as_dict(self) -> dict[str, Any]:
        return {
            "trained": {str(k): v for k, v in self.trained.items()},
            "filtered": {str(k): v for k, v in self.filtered.items()},
            "handed_out": {str(k): v for k, v in self.handed_out.items()},
            "weights": {str(k): v for k, v in self.weights.items()},
            "events": {str(k): v for k, v in self.events.items()},
            "recorded": {str(k): v for k, v in self.recorded.items()},
            "feedback": self.feedback,
            "draws": self.draws,
            "in_flight_after": {str(k): v for k, v in self.in_flight_after.items()},
            "logged": self.logged,
            "episodes": [list(row) for row in EPISODES.rows],
            "args": self.args,
        }


def _task(sample: Any) -> str:
    return str((getattr(sample, "metadata", None) or {}).get("task_id", sample.prompt))


def _observe(recorder: Recorder) -> None:
    """Wrap the call sites where slime hands things to us or to its tracker (see the module docstring)."""
    # the filter as slime loads it: by the launcher's dotted path (the module slime's load_function imports)
    filter_module, _, filter_name = HOOKS["--dynamic-sampling-filter-path"].rpartition(".")
    runtime = importlib.import_module(filter_module)
    real_filter = getattr(runtime, filter_name)

    def judged(group: Any, verdict: Any) -> None:
        samples = list(iter_samples(group))
        rid, batch = recorder.rollout_id(), recorder.batch()
        recorder.filtered.setdefault(rid, []).append([batch, samples[0].group_index, _task(samples[0]), verdict.value])
        recorder.events.setdefault(rid, []).append(["filter", batch, samples[0].group_index, verdict.value])

    def observed_filter(args: Any, group: Any, **kwargs: Any) -> Any:  # slime's own loop
        judged(group, group_verdict(group, reward_key(args)))
        return real_filter(args, group, **kwargs)

    setattr(runtime, filter_name, observed_filter)

    real_judge = SlimeBatch.judge

    def observed_judge(self: Any, index: int, group: Any) -> Any:  # our rollout function judges without the filter
        verdict, rewards = real_judge(self, index, group)
        judged(group, verdict)
        return verdict, rewards

    SlimeBatch.judge = observed_judge  # type: ignore[method-assign]

    real_get = SelectorDataSource.get_samples

    def observed_get(self: Any, num_samples: int) -> Any:
        flying = sorted(map(str, self.selector.in_flight))  # the selector's own state, before the draw
        groups = real_get(self, num_samples)
        rid = recorder.rollout_id()
        recorder.handed_out.setdefault(rid, []).extend([group[0].group_index, _task(group[0])] for group in groups)
        recorder.events.setdefault(rid, []).extend(["hand", group[0].group_index] for group in groups)
        recorder.feedback.append(["hand", rid])
        recorder.draws.append([rid, [_task(group[0]) for group in groups], flying])
        recorder.weights.update((sample.index, sample_weight(sample)) for group in groups for sample in group)
        return groups

    SelectorDataSource.get_samples = observed_get

    # slime's own data source (and ASYNC=1's subclass of it): its draws, for the in-flight check and the loop's order
    from slime.rollout.data_source import RolloutDataSourceWithBuffer  # on sys.path once the stand-ins are in

    real_slime_get = RolloutDataSourceWithBuffer.get_samples

    def observed_slime_get(self: Any, num_samples: int) -> Any:
        groups = real_slime_get(self, num_samples)
        rid = recorder.rollout_id()
        recorder.feedback.append(["hand", rid])
        recorder.draws.append([rid, [_task(group[0]) for group in groups], []])
        return groups

    RolloutDataSourceWithBuffer.get_samples = observed_slime_get

    # every completed group is settled with the selector (recorded, or released: technical or surplus), by the step's
    # close() under our rollout function or by the all-samples hook on slime's own loop; the prompts released
    # without a result (aborted) are not counted
    real_settle = RuleSelector.settle

    def counted(self: Any, prompt_id: Any, *args: Any, **kwargs: Any) -> Any:
        if prompt_id in self.in_flight:
            rid = recorder.rollout_id()
            recorder.recorded[rid] = recorder.recorded.get(rid, 0) + 1
            recorder.feedback.append(["record", rid])
        return real_settle(self, prompt_id, *args, **kwargs)

    RuleSelector.settle = counted  # type: ignore[method-assign]

    def on_train(rollout_id: int, data: dict[str, Any]) -> None:
        parts = data["parts"]
        rewards = [float(r) for r in parts[0]["raw_reward"]]  # slime sends the whole step's raw rewards to every rank
        indices = [0] * len(rewards)
        advantages = [0.0] * len(rewards)  # slime's "rewards": the advantages our post-process returned
        for part in parts:  # each rank gets its partition (positions in the step) of the split keys
            for position, index, value in zip(part["partition"], part["sample_indices"], part["rewards"]):
                indices[int(position)] = int(index)
                advantages[int(position)] = float(value)
        order = sorted(range(len(indices)), key=indices.__getitem__)
        recorder.trained[rollout_id] = {"sample_indices": [indices[i] for i in order],
                                        "raw_reward": [rewards[i] for i in order],
                                        "advantages": [advantages[i] for i in order]}
        recorder.feedback.append(["train", rollout_id])
        manager = _rollout_manager()
        selector = getattr(getattr(manager, "data_source", None), "selector", None)
        if selector is not None:
            recorder.in_flight_after[rollout_id] = len(selector.in_flight)

    ACTOR.observers.append(on_train)

    # slime's own code: importable only once the stand-ins have put the checkout on sys.path
    from slime.observability import logging_utils

    real_log = logging_utils.log

    def observed_log(args: Any, metrics: dict[str, Any], step_key: str) -> Any:
        recorder.logged.append({"step_key": step_key, "metrics": _jsonable(dict(metrics))})
        return real_log(args, metrics, step_key)

    logging_utils.log = observed_log


#: The RolloutManager slime built (one per leg process; slime builds it, so it is caught at construction).
_MANAGER: list[Any] = []


def _rollout_manager() -> Any:
    return _MANAGER[0] if _MANAGER else None


def _capture_manager() -> None:
    """Keep the RolloutManager instance (the stand-in Ray builds it in this process) for the between-step checks."""
    from slime.ray import rollout  # slime's own code: on sys.path only once the stand-ins are installed

    actor_class = rollout.RolloutManager  # the stand-in's ActorClass around slime's class
    real_cls = actor_class._cls

    class Captured(real_cls):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            _MANAGER.append(self)

    Captured.__name__ = real_cls.__name__
    actor_class._cls = Captured


def launcher_argv(config: Any, sglang_port: int, extra: list[str]) -> list[str]:
    """``shopsimrl train``'s argv and custom config, with the scripted SGLang as slime's external engine and router."""
    config.write_custom_config()
    return config.train_args([
        "--rollout-external-engine-addrs", f"127.0.0.1:{sglang_port}",
        "--sglang-router-ip", "127.0.0.1", "--sglang-router-port", str(sglang_port),
        *extra,
    ])


def run(spec: dict[str, Any]) -> int:
    # the stand-ins belong in the child only, never in the check's own process
    from shopsimrl.slime.harness.double import stand_ins

    stand_ins.install(spec["slime_src"], Path(spec["out"]).parent / "stand_ins")
    os.environ.update({k: str(v) for k, v in spec.get("os_env", {}).items()})
    ACTOR.crash_at = spec.get("crash_at")

    from shopsimrl.slime.harness.scripted_sglang import ScriptedSGLang, serving  # loads fastapi: only in the child

    recorder = Recorder()
    out = Path(spec["out"])
    status = 1
    started = time.perf_counter()
    error = None
    config = TrainConfig.from_env(spec["env"])
    # a colocated engine runs with SGLang's memory saver (slime offloads it while training): slime checks that
    with serving(ScriptedSGLang(server_info={"enable_memory_saver": config.colocate})) as sglang:
        argv: list[str] = []
        try:
            argv = launcher_argv(config, sglang.port, spec.get("extra", []))
            namespace = runpy.run_path(str(Path(spec["slime_src"]) / config.train_script), run_name="slime_train")
            _observe(recorder)
            in_creation_order()
            _capture_manager()
            sys.argv = ["train.py", *argv]
            args = namespace["parse_args"]()
            recorder.args = {k: _jsonable(v) for k, v in vars(args).items() if k.startswith(RECORDED_ARGS)}
            namespace["train"](args)
            status = 0
        except HarnessCrash as exc:
            error = str(exc)
            status = EXIT_CRASHED
        except BaseException as exc:  # reported in the JSON, for the check's verdict
            error = "".join(traceback.format_exception(exc))
            status = 1
        result = recorder.as_dict()
        result.update(status=status, error=error, seconds=time.perf_counter() - started, argv=argv, script=config.train_script,
                      generate_after_abort=sglang.generate_after_abort, abort_calls=sglang.abort_calls)
    atomic_write_text(out, json.dumps(result))  # the parent reads a whole result or none
    return status


def main(argv: list[str] | None = None) -> int:
    die_with_parent()
    argv = sys.argv[1:] if argv is None else argv
    spec = json.loads(Path(argv[0]).read_text())
    status = run(spec)
    sys.stdout.flush()
    os._exit(status)  # slime's rollout loop thread is a daemon that never ends; leave without waiting on it


if __name__ == "__main__":
    main()
