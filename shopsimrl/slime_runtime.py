"""slime's filter, reward post-process and generate hooks for ShopSim (thin translations).

Each hook turns slime's call into a call of the function the standalone runtime
uses, so every rule has one implementation:

===============================================  ========================================  =====================================
hook (this module)                               slime flag                                the rule lives in
===============================================  ========================================  =====================================
``fully_scored_group_filter(args, group)``       ``--dynamic-sampling-filter-path``        ``sampling.group_verdict``,
                                                                                           ``filter_output``, the guard
``normalize_grpo_by_prompt_and_rollout(args,     ``--custom-reward-post-process-path``     ``sampling.grpo_advantages``
samples)``
``generate(args, sample, sampling_params,        ``--custom-generate-function-path``       ``agent.run_episode`` +
evaluation=False)``                                                                        ``slime.policy.SGLangTokenPolicy``
===============================================  ========================================  =====================================

Importing this module loads none of torch, ray, sglang, slime or transformers;
slime's ``DynamicFilterOutput`` and the tokenizer are imported on first use.
"""

from __future__ import annotations

import importlib.util
import logging
import re
import sys
from collections.abc import Hashable, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from shopsimrl.sampling import FilterOutput, filter_output, group_verdict, grpo_advantages
from shopsimrl.sampling.verdict import group_label, iter_samples, rollout_key, sample_reward
from shopsimrl.slime.abort import AbortWatch, EpisodeAborted
from shopsimrl.slime.samples import (
    env_slots,
    env_url,
    max_consecutive_failed_groups,
    max_turns,
    reward_key,
    sample_status,
    trace_dir,
)
from shopsimrl.slime.state import hook_state

log = logging.getLogger(__name__)

# slime's RolloutManager._post_process_rewards (slime/ray/rollout.py): the estimators whose rewards it
# centers per prompt group, and those it also divides by the group's std (--advantage-estimator choices:
# grpo, gspo, cispo, reinforce_plus_plus, reinforce_plus_plus_baseline, ppo; the others get raw rewards).
GROUP_NORMALIZED_ESTIMATORS = ("grpo", "gspo", "cispo", "reinforce_plus_plus_baseline")
STD_NORMALIZED_ESTIMATORS = ("grpo", "gspo", "cispo")


class UnsupportedSlimeSetting(ValueError):
    """A slime setting under which ShopSim episodes cannot be trained token-exactly."""


# -- --dynamic-sampling-filter-path ---------------------------------------------------------------


def fully_scored_group_filter(args: Any, group: Sequence[Any], **kwargs: Any) -> Any:
    """docs/dynamic-sampling.md §2: technical -> drop (never a fallback); zero-std -> drop unless short; else keep.

    Feeds the verdict to the process-wide consecutive-failure guard, which raises
    ``TooManyTechnicalFailures`` (naming the trace dir) when the streak reaches
    ``args.shopsim_max_consecutive_failed_groups``.  Returns slime's ``DynamicFilterOutput``.
    """
    verdict = group_verdict(group, reward_key(args))
    state = hook_state()
    with state.lock:
        state.guard_for(max_consecutive_failed_groups(args), trace_dir(args)).observe(verdict, group_label(group))
    return to_dynamic_filter_output(filter_output(verdict))


class DynamicFilterOutput(FilterOutput):
    """Stand-in for slime's class of the same name, only where slime is not installed at all (same fields)."""


class SlimeFilterOutputUnavailable(RuntimeError):
    """slime is there, but its ``DynamicFilterOutput`` is not: refuse rather than keep every group."""


def _slime_present() -> bool:
    """True inside a slime process (slime loaded) or wherever a ``slime`` package is installed."""
    if "slime" in sys.modules:
        return True
    try:
        return importlib.util.find_spec("slime") is not None
    except (ImportError, ValueError):
        return True  # a broken `slime` entry is still a slime we cannot use


def _dynamic_filter_output_cls() -> type:
    state = hook_state()
    with state.lock:
        if state.filter_output_cls is None:
            try:
                from slime.rollout.filter_hub.base_types import DynamicFilterOutput as slime_cls
            except ImportError as exc:
                if _slime_present():
                    # slime's call_dynamic_filter wraps anything that is not its own DynamicFilterOutput
                    # as keep=<that object>, which is truthy: a stand-in would keep every group,
                    # technical ones included.  Fail at the first call instead.
                    raise SlimeFilterOutputUnavailable(
                        "slime is loaded but slime.rollout.filter_hub.base_types.DynamicFilterOutput cannot be "
                        f"imported ({type(exc).__name__}: {exc}); the filter refuses to run, since slime would "
                        "read any other return value as keep=True. Use a slime whose generate_rollout_async "
                        "calls should_drop_dynamic_filter_output."
                    ) from exc
                state.filter_output_cls = DynamicFilterOutput
            else:
                if "keep_when_insufficient" not in {f.name for f in fields(slime_cls)}:
                    raise RuntimeError(
                        "this slime's DynamicFilterOutput has no keep_when_insufficient field: the zero-std fallback "
                        "(docs/dynamic-sampling.md §3) needs a slime whose generate_rollout_async calls should_drop_dynamic_filter_output"
                    )
                state.filter_output_cls = slime_cls
        return state.filter_output_cls


def to_dynamic_filter_output(output: FilterOutput) -> Any:
    """The sampling core's answer as slime's own class (slime type-checks it)."""
    return _dynamic_filter_output_cls()(
        keep=output.keep, reason=output.reason, keep_when_insufficient=output.keep_when_insufficient
    )


# -- --custom-reward-post-process-path ------------------------------------------------------------


def normalize_grpo_by_prompt_and_rollout(args: Any, samples: Sequence[Any]) -> tuple[list[float], list[float]]:
    """``(raw_rewards, advantages)`` aligned with ``samples``, like slime's ``_post_process_rewards``.

    Differences from slime's default, on purpose: statistics are taken once per unique
    ``rollout_id`` (fan-out segments are one trajectory), and groups are the samples'
    ``group_index`` (slime reshapes by position).  Without ``group_index``, unique rollouts
    are chunked by ``n_samples_per_prompt`` in order, as slime's reshape does.
    ``--disable-rewards-normalization`` returns the raw rewards; ``--disable-grpo-std-normalization``
    keeps the centering but not the std division.
    """
    flat = list(iter_samples(samples))
    key = reward_key(args)
    raw = []
    for sample in flat:
        reward = sample_reward(sample, key)
        if reward is None:
            raise ValueError(f"sample index={getattr(sample, 'index', None)} has no finite reward under key {key!r}")
        raw.append(reward)
    estimator = getattr(args, "advantage_estimator", "grpo")
    if not getattr(args, "rewards_normalization", True) or estimator not in GROUP_NORMALIZED_ESTIMATORS:
        return raw, list(raw)
    std = bool(getattr(args, "grpo_std_normalization", True)) and estimator in STD_NORMALIZED_ESTIMATORS
    advantages = [0.0] * len(flat)
    for label, positions in _prompt_groups(flat, getattr(args, "n_samples_per_prompt", None)).items():
        values = grpo_advantages(
            [rollout_key(flat[i]) for i in positions], [raw[i] for i in positions], std_normalization=std, label=label
        )
        for position, value in zip(positions, values):
            advantages[position] = value
    return raw, advantages


def _prompt_groups(samples: list[Any], n_samples_per_prompt: int | None) -> dict[str, list[int]]:
    """Positions of each prompt group: by ``group_index``, or by chunks of ``n`` unique rollouts."""
    with_index = [getattr(s, "group_index", None) is not None for s in samples]
    groups: dict[str, list[int]] = {}
    if all(with_index):
        for position, sample in enumerate(samples):
            groups.setdefault(f"group_index={sample.group_index}", []).append(position)
        return groups
    if any(with_index):
        raise ValueError("reward normalization needs group_index on every sample or on none of them")
    order: dict[Hashable, int] = {}
    for sample in samples:
        order.setdefault(rollout_key(sample), len(order))
    n = n_samples_per_prompt or len(order)
    if len(order) % n:
        raise ValueError(
            f"{len(order)} unique rollouts do not split into prompt groups of n_samples_per_prompt={n}; "
            "set group_index on the samples"
        )
    for position, sample in enumerate(samples):
        groups.setdefault(f"prompt group {order[rollout_key(sample)] // n}", []).append(position)
    return groups


# -- --custom-generate-function-path ---------------------------------------------------------------


def check_exact_token_settings(args: Any, sampling_params: dict[str, Any], evaluation: bool = False) -> None:
    """Refuse what breaks exact-token training of multi-turn episodes, saying why."""
    problems = []
    if getattr(args, "partial_rollout", False):
        problems.append("--partial-rollout (a ShopSim episode cannot be resumed from a partial token stream)")
    if getattr(args, "group_rm", False):
        problems.append("--group-rm (the env scores each episode; the generate hook sets the reward)")
    if not evaluation:
        top_p = sampling_params.get("top_p")
        if top_p is not None and float(top_p) != 1.0:
            problems.append(f"--rollout-top-p {top_p} (rollout logprobs must come from the full distribution: use 1.0)")
        top_k = sampling_params.get("top_k")
        if top_k is not None and int(top_k) != -1:
            problems.append(f"--rollout-top-k {top_k} (use -1: a truncated distribution breaks the importance ratio)")
    if problems:
        raise UnsupportedSlimeSetting("ShopSim's generate hook refuses: " + "; ".join(problems))


async def generate(args: Any, sample: Any, sampling_params: dict[str, Any], evaluation: bool = False) -> Any:
    """One ShopSim episode for a slime sample whose prompt is a task id.

    Runs the agent's episode loop with a token-exact SGLang policy against the router's
    ``/generate`` and the env at ``args.shopsim_env_url``; the sample gets the tokens,
    loss mask, rollout logprobs, the reward dict, ``metadata["shopsim_scored"]``, the
    trace path and ``rollout_id``.  A technical failure returns a zero-loss placeholder
    (status aborted, ``remove_sample=True``, unscored) so the filter drops the group.
    Once slime has started its abort the episode stops (``shopsimrl.slime.abort``): it
    sends no new ``/generate``, releases its env lease and comes back aborted, unrewarded.
    """
    from shopsimrl.slime.policy import SGLangSettings, SGLangTokenPolicy

    check_exact_token_settings(args, sampling_params, evaluation)
    task_id = _task_id(sample)
    state = hook_state()
    watch = state.abort_watch(args)
    if watch.aborted():  # slime started its abort before this sample got here
        return _fill_aborted(sample)
    template = _chat_template(args)
    policy = SGLangTokenPolicy(
        SGLangSettings(
            generate_url=f"http://{args.sglang_router_ip}:{args.sglang_router_port}/generate",
            sampling_params=dict(sampling_params),
            max_context_tokens=getattr(args, "rollout_max_context_len", None),
        ),
        template,
        state.sglang_client(),
        aborted=watch.aborted,
    )
    env = state.env_client(args, _http_env_client)
    trace_path = _trace_path(args, sample, task_id, evaluation)
    try:
        result = await watch.run(_play_gated(args, sample, task_id, env, policy, watch, trace_path))
    except EpisodeAborted:
        return _fill_aborted(sample, policy, str(trace_path) if trace_path.exists() else None)
    if _sglang_aborted(result) and watch.aborted():
        return _fill_aborted(sample, policy, result.trace_path)
    _fill_sample(sample, policy.episode.ledger if policy.episode is not None else None, template, result)
    return sample


async def _play_gated(
    args: Any, sample: Any, task_id: str, env: Any, policy: Any, watch: AbortWatch, trace_path: Path
) -> Any:
    """The episode, once it holds one of the env slots; none is taken after slime's abort."""
    from shopsimrl.agent import run_episode

    async with hook_state().episode_gate(env_slots(args)):
        if watch.aborted():
            raise EpisodeAborted
        return await run_episode(
            env,
            policy,
            task_id,
            rollout_id=str(sample.index),
            seed=int(getattr(args, "rollout_seed", 0) or 0) + int(sample.index or 0),
            max_turns=max_turns(args),
            trace_path=trace_path,
        )


def _chat_template(args: Any) -> Any:
    from shopsimrl.slime.policy import ChatTemplate

    tokenizer = hook_state().tokenizer(args.hf_checkpoint)
    return ChatTemplate(tokenizer, getattr(args, "apply_chat_template_kwargs", None) or None)


def _sglang_aborted(result: Any) -> bool:
    from shopsimrl.slime.policy import SGLangAborted

    return bool(result.error) and result.error.get("type") == SGLangAborted.__name__


_UNSAFE_PATH_CHARS = re.compile(r"[^A-Za-z0-9._=-]")


def _trace_path(args: Any, sample: Any, task_id: str, evaluation: bool) -> Path:
    """``group_<group_index>/sample_<index>.json``; eval: ``eval/rollout_<id>/<task>/sample_<index>.json``.

    Eval samples have no group index and their indices restart with every eval pass
    and dataset, so eval traces get their own folder, per rollout id (what slime's
    ``set_current_rollout_id`` recorded for its sample hooks, when loaded), and a name
    no earlier episode of this process holds.
    """
    root = Path(trace_dir(args))
    if not evaluation:
        return root / f"group_{sample.group_index}" / f"sample_{sample.index}.json"
    rollout = getattr(sys.modules.get("slime.rollout.sample_hooks"), "_current_rollout_id", None)
    task = _UNSAFE_PATH_CHARS.sub("_", task_id)
    path = root / "eval" / f"rollout_{'unknown' if rollout is None else rollout}" / task / f"sample_{sample.index}.json"
    return Path(hook_state().claim_trace_path(str(path)))


def _task_id(sample: Any) -> str:
    metadata = getattr(sample, "metadata", None) or {}
    task_id = metadata.get("task_id") if isinstance(metadata, dict) else None
    if task_id is None:
        task_id = sample.prompt
    if not isinstance(task_id, str) or not task_id:
        raise ValueError(
            f"sample index={getattr(sample, 'index', None)}: the prompt must be a ShopSim task id "
            f"(export the data with `shopsimrl data export`, and do not pass --apply-chat-template), got {task_id!r}"
        )
    return task_id


def _http_env_client(args: Any) -> Any:
    """One URL: an HttpEnvClient; a comma list: an EnvPool over the servers (env/pool.py)."""
    from shopsimrl.env.auth import load_token
    from shopsimrl.env.pool import make_env_client

    return make_env_client(env_url(args), token=load_token(getattr(args, "shopsim_env_token_file", None)))


def _fill_aborted(sample: Any, policy: Any = None, trace_path: str | None = None) -> Any:
    """slime's abort reached this episode: hand the sample back as slime's ABORTED, with no reward.

    slime's ``generate_and_rm`` returns an aborted sample without calling the reward
    model, and ``abort()`` discards the groups it waited for (``--partial-rollout`` is
    refused), so nothing trains on it.  The tokens recorded so far stay, masked out.
    """
    ledger = policy.episode.ledger if policy is not None and policy.episode is not None else None
    prompt_ids = list(ledger.prompt_ids) if ledger is not None else []
    response_ids = list(ledger.response_ids) if ledger is not None else []
    sample.rollout_id = sample.index
    if prompt_ids:
        sample.tokens = prompt_ids + response_ids
        sample.response_length = len(response_ids)
        sample.rollout_log_probs = list(ledger.log_probs)
        sample.loss_mask = [0] * len(response_ids)
    sample.remove_sample = True
    sample.metadata = {
        **(getattr(sample, "metadata", None) or {}),
        "shopsim_scored": False,
        "shopsim_aborted": True,
        "shopsim_trace_path": trace_path,
    }
    sample.status = sample_status(sample, "ABORTED")
    return sample


def _fill_sample(sample: Any, ledger: Any, template: Any, result: Any) -> None:
    """Write the episode into slime's fields; unscored episodes become zero-loss placeholders."""
    prompt_ids = list(ledger.prompt_ids) if ledger is not None else []
    response_ids = list(ledger.response_ids) if ledger is not None else []
    sample.rollout_id = sample.index
    sample.tokens = prompt_ids + response_ids
    sample.response = template.decode(response_ids) if response_ids else ""
    sample.response_length = len(response_ids)
    sample.loss_mask = list(ledger.loss_mask) if ledger is not None else []
    sample.rollout_log_probs = list(ledger.log_probs) if ledger is not None else []
    sample.metadata = {
        **(getattr(sample, "metadata", None) or {}),
        "shopsim_scored": result.scored,
        "shopsim_trace_path": result.trace_path,
        "shopsim_task_id": result.task_id,
        "shopsim_end_reason": result.end_reason,
        "shopsim_turns": result.turns,
        "shopsim_error": result.error,
        "shopsim_aborted": False,
    }
    if result.scored:
        sample.reward = {**(result.reward_detail or {}), "reward": result.reward}
        truncated = result.end_reason == "generation_length"
        sample.status = sample_status(sample, "TRUNCATED" if truncated else "COMPLETED")
        return
    log.warning("ShopSim episode %s unscored (%s); trace: %s", sample.index, result.error, result.trace_path)
    sample.loss_mask = [0] * len(response_ids)
    sample.reward = {"reward": 0.0}  # a number for code that reads every reward; never trained (unscored)
    sample.remove_sample = True
    sample.status = sample_status(sample, "ABORTED")
