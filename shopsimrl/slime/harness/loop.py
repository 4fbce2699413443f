"""slime's real train loop for one launcher configuration: three legs (uninterrupted, crashed, resumed) and what they must show.

For a ``SELECTION`` x ``WAVES`` configuration, :func:`run_configuration` runs, each in its
own process (:mod:`.leg`): the whole run (``NUM_ROLLOUT`` steps, evals every
``eval_interval``), the same run crashed by its training actor at ``crash_at``, and the
resume of the crashed run through slime's own ``load`` path.  :mod:`.checks` turns what
they recorded into named checks.  Each leg is a child process with a time limit
(:class:`~.children.Children`): one that blocks is killed, one that ends early without its
result is reported with its reason.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from shopsimrl.sampling.modes import SELECTIONS, WAVE_MODES, Selection
from shopsimrl.sampling.verdict import Verdict, reward_spread_verdict
from shopsimrl.slime.harness import workspace
from shopsimrl.slime.harness.checks import checks
from shopsimrl.slime.harness.children import Children, child_env, child_result
from shopsimrl.slime.harness.outcome import Outcome
from shopsimrl.slime.harness.recorded_leg import finished, trained_groups
from shopsimrl.slime.harness.weight_check import SKIPPING

WAVES = WAVE_MODES
CONFIGURATIONS = tuple((s, w) for s in SELECTIONS for w in WAVES)
#: The launcher's variables for slime's asynchronous loop (``train_async.py``, which refuses colocation).
ASYNC_ENV = {"ASYNC": "1", "COLOCATE": "0", "ROLLOUT_NUM_GPUS": "2"}


@dataclass(frozen=True)
class LoopSettings:
    """The loop legs' sizes: the launcher's defaults for the sampling knobs; prompts as in the issue's runs."""

    steps: int = 80
    eval_interval: int = 10
    save_interval: int = 20
    crash_at: int = 45
    tasks: int = 800
    #: the ``SELECTION=skip`` and ``forecast`` legs' prompts (the first of the 800): about 3.5 epoch passes in 80 steps, so
    #: the rule skips, re-tries and weighs (over 800 it never meets a prompt twice). The other legs keep 800:
    #: slime's own data source (``SELECTION=seed WAVES=fixed``) does not know what is in flight and, where an
    #: epoch pass ends inside a step, hands a prompt out a second time in that step (slime 624b824's behaviour)
    informative_tasks: int = 200
    eval_tasks: int = 16
    #: extra launcher variables; by default a smaller step than the launcher's (8 groups of 4, not 16 of 8) so the
    #: four configurations' twelve legs run in CI in minutes; :data:`FULL_SIZE` keeps the launcher's own sizes
    env: dict[str, str] = field(default_factory=lambda: {"ROLLOUT_BATCH_SIZE": "8", "N_SAMPLES_PER_PROMPT": "4"})
    extra: tuple[str, ...] = ()  # extra train.py arguments (e.g. --partial-rollout)

    @classmethod
    def full_size(cls) -> LoopSettings:
        """The launcher's own step (16 groups of 8, one wave of 16) over 1,600 prompts, every configuration: for the
        figures."""
        return cls(tasks=1600, informative_tasks=1600, env={})

    def asynchronous(self) -> LoopSettings:
        """The same legs through slime's ``train_async.py`` (``ASYNC=1``)."""
        return replace(self, env={**self.env, **ASYNC_ENV})

    @property
    def is_async(self) -> bool:
        return self.env.get("ASYNC") == "1"

    @property
    def suffix(self) -> str:
        """What a configuration's name says of its loop (``ConfigurationResult.name``)."""
        return " ASYNC=1" if self.is_async else ""

    @property
    def resume_from(self) -> int:
        """The last checkpoint before the crash: slime resumes one past it."""
        return (self.crash_at // self.save_interval) * self.save_interval


@dataclass
class ConfigurationResult:
    selection: str
    waves: str
    legs: dict[str, dict[str, Any]]
    checks: dict[str, Outcome]
    figures: dict[str, float]
    asynchronous: bool = False

    @property
    def name(self) -> str:
        return f"SELECTION={self.selection} WAVES={self.waves}" + (" ASYNC=1" if self.asynchronous else "")

    @property
    def passed(self) -> bool:
        return all(outcome.holds for outcome in self.checks.values())


def prepare(root: Path, settings: LoopSettings) -> dict[str, Path]:
    """The prompt file, the eval file and the checkpoint directory, shared by every leg.

    Call it once before running configurations in threads (they then find the files); the
    prompt file is written last, so its presence means the rest is there.
    """
    paths = {"train": root / "data" / "train.jsonl", "eval": root / "data" / "eval.jsonl", "hf": root / "hf",
             "train_informative": root / "data" / "train-informative.jsonl"}
    if not paths["train"].exists():
        workspace.write_checkpoint_dir(paths["hf"])
        workspace.write_prompts(paths["eval"], workspace.task_ids(settings.eval_tasks, "eval"))
        workspace.write_prompts(paths["train_informative"], workspace.task_ids(settings.informative_tasks))
        workspace.write_prompts(paths["train"], workspace.task_ids(settings.tasks))
    return paths


def run_leg(slime_src: Path, directory: Path, env: dict[str, str], extra: list[str],
            crash_at: int | None = None, generate: str = "shopsimrl.slime.harness.world.generate",
            children: Children | None = None) -> dict[str, Any]:
    """One slime run in a child process; returns what it recorded (``status`` 0 done, 3 crashed as injected).

    A child that ends without its result (slime exited early, or was killed at the time limit) gives
    ``status`` None and the reason in ``error``, with the end of its log.
    """
    directory.mkdir(parents=True, exist_ok=True)
    out = directory / "leg.json"
    out.unlink(missing_ok=True)  # the resume leg runs in the crashed leg's folder: never read the crash's result
    spec = {"slime_src": str(slime_src), "out": str(out), "crash_at": crash_at, "env": env,
            "extra": [*extra, "--custom-generate-function-path", generate]}
    (directory / "spec.json").write_text(json.dumps(spec))
    children = children or Children()
    ended = children.run([sys.executable, "-m", "shopsimrl.slime.harness.leg", str(directory / "spec.json")],
                         directory / "leg.log", env=child_env(directory))
    return child_result(out, directory / "leg.log", ended, children.timeout)


def launcher_env(selection: str, waves: str, paths: dict[str, Path], directory: Path, settings: LoopSettings) -> dict[str, str]:
    """The launcher's variables for this leg, as a user sets them for ``shopsimrl train``."""
    return {
        "SELECTION": selection, "WAVES": waves, "NUM_ROLLOUT": str(settings.steps),
        "SAVE_INTERVAL": str(settings.save_interval), "HF_CHECKPOINT": str(paths["hf"]),
        "REF_LOAD": str(directory / "ref"), "SAVE_DIR": str(directory / "checkpoints"), "RUN_DIR": str(directory),
        "PROMPT_DATA": str(paths["train_informative" if Selection.parse(selection) in SKIPPING else "train"]),
        **settings.env,
    }


def harness_args(paths: dict[str, Path], settings: LoopSettings) -> list[str]:
    """What a CPU run adds to the launcher's argv, as a user adds MODEL_ARGS: the model's shape and the eval set."""
    return [*workspace.MODEL_ARGS, "--eval-interval", str(settings.eval_interval),
            "--eval-prompt-data", workspace.EVAL_DATASET, str(paths["eval"]), "--n-samples-per-eval-prompt", "2",
            *settings.extra]


def run_configuration(slime_src: Path, root: Path, selection: str, waves: str,
                      settings: LoopSettings | None = None, legs: tuple[str, ...] = ("full", "crash", "resume"),
                      children: Children | None = None) -> ConfigurationResult:
    settings = settings or LoopSettings()
    children = children or Children()
    paths = prepare(root, settings)
    base = root / f"{selection}-{waves}{'-async' if settings.is_async else ''}"
    extra = harness_args(paths, settings)
    results: dict[str, dict[str, Any]] = {}
    if "full" in legs:
        results["full"] = run_leg(slime_src, base / "full", launcher_env(selection, waves, paths, base / "full", settings),
                                  extra, children=children)
    if "crash" in legs:
        env = launcher_env(selection, waves, paths, base / "crashed", settings)
        results["crash"] = run_leg(slime_src, base / "crashed", env, extra, crash_at=settings.crash_at, children=children)
        if "resume" in legs:
            results["resume"] = run_leg(slime_src, base / "crashed", env, extra, children=children)
    result = ConfigurationResult(selection, waves, results, {}, {}, settings.is_async)
    result.checks = checks(results, waves, settings, base)
    result.figures = figures(results.get("full", {}))
    return result


def figures(leg: dict[str, Any]) -> dict[str, float]:
    """Informative groups per 1,000 generated episodes, and generated per trained episode, over the whole run."""
    if not finished(leg):
        return {}
    generated = sum(1 for row in leg["episodes"] if not row[1])
    trained = informative = 0
    for step in leg["trained"]:
        rewards = dict(zip(leg["trained"][step]["sample_indices"], leg["trained"][step]["raw_reward"]))
        for members in trained_groups(leg, step).values():
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
