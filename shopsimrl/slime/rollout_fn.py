"""An optional ``--rollout-function-path`` for slime: adaptive waves, a shell around ``RolloutStep``.

slime calls ``generate_rollout(args, rollout_id, data_source, evaluation=False)``
(``slime/ray/rollout.py`` via ``call_rollout_fn``) and expects a
``RolloutFnTrainOutput(samples, metrics)`` with ``rollout_batch_size`` groups.  This
function is a shell of the shared pump (``sampling.pump.apump``, :class:`SlimeShell`) that does what
slime's ``generate_rollout_async`` does (same generation primitives: ``GenerateState``, ``generate_and_rm_group``, ``abort``; the same
drop rule and drop metrics, sample filter and all-samples hook), with one change:
instead of whole waves of ``over_sampling_batch_size`` it submits the groups the
:class:`~shopsimrl.sampling.adaptive.AdaptiveWaves` rule asks for, one prompt at a
time from the :class:`~shopsimrl.slime.data_source.SelectorDataSource`, and
:class:`~shopsimrl.sampling.step.RolloutStep` (its ``WaveController``) applies slime's drop
rule, the fallback and ``remaining``.  When the batch is full it calls slime's ``abort``
(servers aborted until idle, every pending group awaited); partial groups slime
hands back go to the data source, as slime's ``generate_rollout`` does.

Each group is judged once, from its samples (:meth:`SlimeBatch.judge`): the dynamic-sampling filter hook
is slime's own loop's, and is not called here (a filter path other than ours is refused, since the step
applies our rule).  The step's ``close()`` settles the data source: every group decided, surplus
included, and every group aborted (``DataSourceGroups``).  Evaluation is slime's own ``generate_rollout``.
The consecutive-failure stop is the step's, as in every shell: its controller feeds the hook state's guard
(``SlimeHookState.guard_for``: the same limit, trace folder and streak across steps, and the same error,
naming slime's ``group_index``).  Once the batch that fires it is decided, the groups in flight are aborted
(slime's ``abort``), the data source is settled, and the stop is raised.  Setting (custom config):
``shopsim_wave_cushion`` (default ``DEFAULT_CUSHION`` expected informative groups).  Requires ``--data-source-path
shopsimrl.slime.data_source.SelectorDataSource``.

Staged siblings (opt-in, docs/dynamic-sampling.md R29): ``shopsim_siblings: staged`` (and
``shopsim_stage_size``, default ``n_samples_per_prompt // 2``).  A staged group's siblings are
submitted one by one with slime's per-sample ``generate_and_rm`` (``K`` first, then the rest);
the step judges the whole group, or decides it as a zero-std drop after ``K`` (the
all-samples hook then hears its ``K`` samples).  The metrics carry
``rollout/shopsim/staged/groups_stopped_early`` and ``.../episodes_saved``.  Not with ``--group-rm``
(a group reward model needs the whole group at once).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from shopsimrl.defaults import DEFAULT_CUSHION, HOOKS
from shopsimrl.sampling import GroupDecision
from shopsimrl.sampling.modes import Siblings, WaveMode
from shopsimrl.sampling.pump import Hooks, apump
from shopsimrl.sampling.staged import StagedSiblings, staged_step_metrics
from shopsimrl.sampling.step import RolloutStep, Start, WaveOpened, new_step
from shopsimrl.sampling.verdict import Verdict, group_label
from shopsimrl.slime.batch import SlimeBatch
from shopsimrl.slime.group_tasks import GroupGeneration
from shopsimrl.slime.prompt_groups import DataSourceGroups
from shopsimrl.slime.settings import slime_settings
from shopsimrl.slime.state import hook_state

#: The filter paths the step's own judging stands for: the stable one the launcher writes, and the implementation.
OUR_FILTER_PATHS = frozenset({HOOKS["--dynamic-sampling-filter-path"], "shopsimrl.slime.filter.fully_scored_group_filter"})


def generate_rollout(args: Any, rollout_id: int, data_source: Any, evaluation: bool = False) -> Any:
    # slime: only inside slime's process, never at import
    from slime.rollout import sglang_rollout
    from slime.rollout.base_types import RolloutFnTrainOutput
    from slime.utils.async_utils import run

    if evaluation:
        return sglang_rollout.generate_rollout(args, rollout_id, data_source, evaluation=True)
    if getattr(data_source, "selector", None) is None:
        raise ValueError(
            "shopsimrl.slime.rollout_fn.generate_rollout sizes waves from the prompt selector's predictions: "
            "set --data-source-path shopsimrl.slime.data_source.SelectorDataSource"
        )
    path = getattr(args, "dynamic_sampling_filter_path", None)
    if path is not None and path not in OUR_FILTER_PATHS:
        raise ValueError(
            f"shopsimrl.slime.rollout_fn.generate_rollout judges groups with ShopSim's own rule; it cannot apply "
            f"--dynamic-sampling-filter-path {path}: set it to {HOOKS['--dynamic-sampling-filter-path']} or drop it"
        )
    samples, metrics, aborted = run(adaptive_rollout_async(args, rollout_id, data_source))
    if aborted:
        data_source.add_samples(aborted)
    return RolloutFnTrainOutput(samples=samples, metrics=metrics)


async def adaptive_rollout_async(args: Any, rollout_id: int, data_source: Any) -> tuple[list, dict, list]:
    """(kept groups sorted by sample index, slime's drop metrics, aborted partial groups).

    The shared pump (``sampling.pump.apump``) runs the step with :class:`SlimeShell`; then slime's state is reset
    and the batch assembled, as slime's ``generate_rollout_async`` ends."""
    step = rollout_step(args, data_source)
    shell = SlimeShell(args, rollout_id)
    await apump(step, shell)
    shell.generation.state.reset()
    data, metrics = shell.batch.finish(data_source)
    if step.staging is not None:
        metrics.update(staged_step_metrics(step.stage_counts))
    return data, metrics, shell.aborted


class SlimeShell(Hooks):
    """slime's generation as the pump's shell: groups run as tasks in slime's ``GenerateState``
    (:class:`GroupGeneration`), each judged once from its samples (:class:`SlimeBatch`), slime's ``remaining_batch_size``
    kept as the step says, and the groups left in flight cancelled by slime's ``abort`` (which aborts every one)."""

    def __init__(self, args: Any, rollout_id: int) -> None:
        self.args, self.rollout_id = args, rollout_id
        self.generation, self.batch = GroupGeneration(args), SlimeBatch(args)
        self.aborted: list[Any] = []  # the partial groups slime's abort hands back (partial rollouts)
        self._back: dict[int, list[Any]] = {}  # finished, not measured yet
        self._began = time.monotonic()

    def now(self) -> float:
        return time.monotonic() - self._began

    def start(self, start: Start, *, first_stage: bool, t: float) -> None:
        self.generation.start(start)

    async def next_finished(self) -> list[int] | None:
        back = await self.generation.finished()
        if back is None:
            return None
        self._back.update(back)
        return [index for index, _group in back]

    def measure(self, index: int) -> tuple[Verdict, Sequence[float] | None]:
        return self.batch.judge(index, self.generation.whole(index, self._back.pop(index)))

    def measure_first_k(self, index: int) -> Sequence[float | None]:
        head = self.generation.heads[index] = list(self._back.pop(index))
        return self.batch.first_stage_rewards(head)

    async def cancel(self, indices: tuple[int, ...]) -> None:
        # slime: only inside slime's process, never at import
        from slime.rollout import sglang_rollout

        self.aborted = await sglang_rollout.abort(self.args, self.rollout_id)

    def opened(self, wave: WaveOpened, t: float) -> None:
        self.generation.state.remaining_batch_size = wave.remaining

    def decided(self, decision: GroupDecision, t: float) -> None:
        self.batch.decided(decision)
        self.generation.state.remaining_batch_size = decision.remaining

    def stopped_early(self, index: int, t: float) -> None:
        self.batch.stopped_early(index, self.generation.heads.pop(index))


def rollout_step(args: Any, data_source: Any) -> RolloutStep:
    """The step slime's arguments configure: adaptive refills with the ``shopsim_wave_cushion``, prompts from the
    data source, staged siblings when asked for, and the hook state's consecutive-failure guard (module
    docstring)."""
    target, wave = int(args.rollout_batch_size), int(args.over_sampling_batch_size)
    settings = slime_settings(args)
    guard = hook_state().guard_for(settings.max_consecutive_failed_groups, settings.trace_dir)
    cushion = DEFAULT_CUSHION if settings.wave_cushion is None else settings.wave_cushion  # 0 is a valid cushion
    return new_step(target, wave, int(args.n_samples_per_prompt), source=DataSourceGroups(data_source),
                    waves=WaveMode.ADAPTIVE, cushion=cushion, staging=staging_of(args), guard=guard,
                    group_name=group_label)


def staging_of(args: Any) -> StagedSiblings | None:
    """``shopsim_siblings`` / ``shopsim_stage_size`` (custom config) as the step's staging, or ``None``."""
    settings = slime_settings(args)
    if Siblings.parse(settings.siblings or Siblings.ALL) is not Siblings.STAGED:
        return None
    if settings.group_rm:
        raise ValueError("shopsim_siblings: staged submits siblings one by one; a group reward model (--group-rm) "
                         "needs the whole group at once: drop one of the two")
    return StagedSiblings.of(int(args.n_samples_per_prompt), settings.stage_size)
