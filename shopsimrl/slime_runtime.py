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

import logging
from collections.abc import Hashable, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from shopsimrl.sampling import FilterOutput, filter_output, grpo_advantages, group_verdict
from shopsimrl.sampling.verdict import group_label, iter_samples, rollout_key, sample_reward
from shopsimrl.slime.samples import (
    env_slots,
    env_url,
    max_consecutive_failed_groups,
    reward_key,
    sample_status,
    trace_dir,
)
from shopsimrl.slime.state import hook_state

log = logging.getLogger(__name__)

# slime's _post_process_rewards: which estimators get group centering, and which the std division.
GROUP_NORMALIZED_ESTIMATORS = ("grpo", "gspo", "reinforce_plus_plus_baseline")
STD_NORMALIZED_ESTIMATORS = ("grpo", "gspo")


class UnsupportedSlimeSetting(ValueError):
    """A slime setting under which ShopSim episodes cannot be trained token-exactly."""


# -- --dynamic-sampling-filter-path ---------------------------------------------------------------


def fully_scored_group_filter(args: Any, group: Sequence[Any], **kwargs: Any) -> Any:
    """SPEC §2: technical -> drop (never a fallback); zero-std -> drop unless short; else keep.

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
    """Stand-in for slime's class of the same name when slime is not installed (same fields)."""


def _dynamic_filter_output_cls() -> type:
    state = hook_state()
    with state.lock:
        if state.filter_output_cls is None:
            try:
                from slime.rollout.filter_hub.base_types import DynamicFilterOutput as slime_cls
            except ImportError:
                state.filter_output_cls = DynamicFilterOutput
            else:
                if "keep_when_insufficient" not in {f.name for f in fields(slime_cls)}:
                    raise RuntimeError(
                        "this slime's DynamicFilterOutput has no keep_when_insufficient field: the zero-std fallback "
                        "(SPEC §3) needs a slime whose generate_rollout_async calls should_drop_dynamic_filter_output"
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
    """
    from shopsimrl.agent import DEFAULT_MAX_STEPS, run_episode
    from shopsimrl.slime.policy import ChatTemplate, SGLangSettings, SGLangTokenPolicy

    check_exact_token_settings(args, sampling_params, evaluation)
    state = hook_state()
    template = ChatTemplate(
        state.tokenizer(args.hf_checkpoint), getattr(args, "apply_chat_template_kwargs", None) or None
    )
    policy = SGLangTokenPolicy(
        SGLangSettings(
            generate_url=f"http://{args.sglang_router_ip}:{args.sglang_router_port}/generate",
            sampling_params=dict(sampling_params),
            max_context_tokens=getattr(args, "rollout_max_context_len", None),
        ),
        template,
    )
    task_id = _task_id(sample)
    trace_path = Path(trace_dir(args)) / f"group_{sample.group_index}" / f"sample_{sample.index}.json"
    env = state.env_client(args, _http_env_client)
    try:
        async with state.episode_gate(env_slots(args)):
            result = await run_episode(
                env,
                policy,
                task_id,
                rollout_id=str(sample.index),
                seed=int(getattr(args, "rollout_seed", 0) or 0) + int(sample.index or 0),
                max_steps=int(getattr(args, "shopsim_max_steps", None) or DEFAULT_MAX_STEPS),
                trace_path=trace_path,
            )
    finally:
        await policy.aclose()
    ledger = policy.episode.ledger if policy.episode is not None else None
    _fill_sample(sample, ledger, template, result)
    return sample


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
