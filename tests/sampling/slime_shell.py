"""slime's rollout function run on a scripted supply, through its public entry point, for the conformance test.

``generate_rollout(args, rollout_id, data_source)`` runs against the slime double (installed for the run, then
taken away): slime's ``generate_and_rm_group`` / ``generate_and_rm`` call :func:`scripted_generate`, slime's
custom generate function, which takes the supply's reward and duration of each sibling; the double's ``abort``
asks the scripted SGLang (slime's router) to stop.  The double's ``run`` is given an event loop on a virtual
clock (:class:`VirtualClockLoop`) so that a sibling ends exactly at its start plus its duration, and groups
ending at one instant come back together, as the reference's do.

What slime sees of a step is what :func:`run_slime` reports: the trained groups (``kept``, sorted as slime sorts
its batch), the fallback among them, the drops per reason (slime's metrics), how many completed groups were
surplus, the groups still in flight at the abort, the staged early stops, or the consecutive-failure stop.
"""

from __future__ import annotations

import asyncio
import json
import selectors
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from shopsimrl.sampling.verdict import Verdict, rewards_verdict
from shopsimrl.slime.data_source import SelectorDataSource
from shopsimrl.slime.harness.double import rollout as slime_double
from shopsimrl.slime.harness.scripted_sglang import ScriptedSGLang, serving
from shopsimrl.slime.rollout_fn import generate_rollout
from shopsimrl.slime.state import reset_hook_state

#: play(index) -> (the group's rewards, None: technical; its siblings' durations)
Play = Callable[[int], tuple[list[float] | None, list[float]]]


#: The supply's siblings take at most a few seconds: a timer further away is real I/O's (an HTTP timeout), waited for
#: in real time
HORIZON_SECONDS = 10.0


class _JumpingSelector(selectors.DefaultSelector):
    """The clock jumps to the next timer of the supply when nothing is ready; real I/O (slime's abort asking the
    router, with its sockets open and its timeouts far away) is waited for in real time."""

    loop: VirtualClockLoop

    def select(self, timeout: float | None = None) -> list[Any]:
        ready = super().select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None or timeout > HORIZON_SECONDS or len(self.get_map()) > 1:
            return super().select(timeout)
        self.loop.now += timeout
        return []


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock moves only when nothing is ready: to the next timer, at once."""

    def __init__(self) -> None:
        selector = _JumpingSelector()
        super().__init__(selector)
        selector.loop = self
        self.now = 0.0

    def time(self) -> float:
        return self.now


def run_on_virtual_clock(coro: Coroutine[Any, Any, Any]) -> Any:
    """The double's ``run``, on a :class:`VirtualClockLoop`."""
    loop = VirtualClockLoop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


def record_all_samples(args: Any, all_samples: list[list[Any]], data_source: Any) -> None:
    """slime's ``--rollout-all-samples-process-path``: the groups the step completed (a staged group decided after
    its first K: those K)."""
    args.completed = {group[0].group_index for group in all_samples}


async def scripted_generate(args: Any, sample: Any, sampling_params: dict[str, Any], evaluation: bool = False) -> Any:
    """One sibling of the supply: it takes its duration, then comes back with its reward (unscored: technical)."""
    n = int(args.n_samples_per_prompt)
    rewards, durations = args.play(sample.group_index)
    sibling = sample.index - sample.group_index * n
    await asyncio.sleep(durations[sibling])
    if slime_double.GenerateState(args).aborted:
        sample.status = slime_double.Sample.Status.ABORTED
        return sample
    scored = rewards is not None
    reward = rewards[sibling] if rewards is not None else 0.0
    sample.rollout_id = sample.index
    sample.reward = {"reward": reward}
    sample.metadata = {**sample.metadata, "shopsim_scored": scored}
    sample.status = slime_double.Sample.Status.COMPLETED if scored else slime_double.Sample.Status.ABORTED
    return sample


def run_slime(play: Play, source: Any, prompts: list[str], tmp_path: Path, *, target: int, wave: int, n: int,
              limit: int, staged: bool) -> dict[str, Any]:
    """One step of slime's rollout function (module docstring); raises the consecutive-failure stop."""
    data = tmp_path / "slime-prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": p, "metadata": {"task_id": p}}) + "\n" for p in prompts))
    reset_hook_state()  # the streak is the process's: each run starts with none
    with slime_double.installed() as sglang_rollout, serving(ScriptedSGLang()) as router:
        sys.modules["slime.utils.async_utils"].run = run_on_virtual_clock
        args = slime_double.slime_args(
            prompt_data=str(data), input_key="prompt", metadata_key="metadata", n_samples_per_prompt=n,
            rollout_batch_size=target, over_sampling_batch_size=wave, sampling_params={}, save=None, load=None,
            shopsim_max_consecutive_failed_groups=limit, shopsim_trace_dir=str(tmp_path / "traces"),
            shopsim_siblings="staged" if staged else None, sglang_router_ip="127.0.0.1",
            sglang_router_port=router.port, custom_generate_function_path=f"{__name__}.scripted_generate",
            dynamic_sampling_filter_path=None, rollout_sample_filter_path=None,
            rollout_all_samples_process_path=f"{__name__}.record_all_samples", play=play, completed=set())
        data_source = SelectorDataSource(args, sample_cls=sglang_rollout.Sample)
        data_source.selector = source
        out = generate_rollout(args, 0, data_source)
        started = data_source.sample_group_index
    kept = sorted(group[0].group_index for group in out.samples)
    drops = {key.removeprefix("rollout/dynamic_filter/drop_"): count for key, count in out.metrics.items()
             if key.startswith("rollout/dynamic_filter/drop_") and count}
    completed = args.completed
    return {
        "kept": kept,
        "fallback": [i for i in kept if rewards_verdict(play(i)[0]) is not Verdict.VARIED],
        "dropped": drops,
        "surplus": len(completed) - len(kept) - sum(drops.values()),
        "aborted": sorted(set(range(started)) - completed),
        "stopped_early": int(out.metrics.get("rollout/shopsim/staged/groups_stopped_early", 0)),
    }

