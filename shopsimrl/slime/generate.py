"""One ShopSim episode per slime sample (``--custom-generate-function-path``).

The episode is the agent's own loop (``agent.run_episode``) with the token-exact SGLang
policy (``slime.policy.SGLangTokenPolicy``); this module refuses slime settings that break
exact-token training, gates episodes to the env server's slots, carries slime's abort to
the episode (``slime.abort``) and writes the result into slime's ``Sample`` fields.
Stable dotted path: ``shopsimrl.slime_runtime.generate``.

The policy, the agent and the tokenizer (transformers) are imported on first use.
"""

from __future__ import annotations

import logging
import re
import sys
from pathlib import Path
from typing import Any

from shopsimrl.errors import Refusal
from shopsimrl.slime.abort import AbortWatch, EpisodeAborted
from shopsimrl.slime.samples import sample_status
from shopsimrl.slime.settings import slime_settings
from shopsimrl.slime.state import hook_state

log = logging.getLogger(__name__)


class UnsupportedSlimeSetting(Refusal, ValueError):
    """A slime setting under which ShopSim episodes cannot be trained token-exactly."""


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
    # lazy: slime_runtime imports this hook and stays light
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
            action_format=action_format(args),
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
    # lazy: the agent loop loads with the first episode (slime_runtime stays light)
    from shopsimrl.agent import run_episode

    settings = slime_settings(args)
    async with hook_state().episode_gate(settings.env_slots):
        if watch.aborted():
            raise EpisodeAborted
        return await run_episode(
            env,
            policy,
            task_id,
            rollout_id=str(sample.index),
            seed=settings.rollout_seed + int(sample.index or 0),
            max_turns=settings.max_turns,
            trace_path=trace_path,
        )


def action_format(args: Any) -> str:
    """``shopsim_action_format`` from slime's custom config: ``tools`` (default) or ``constrained``."""
    # lazy: the agent package loads with the first episode (slime_runtime stays light)
    from shopsimrl.agent.constrained import DEFAULT_ACTION_FORMAT, UnknownActionFormat, check_action_format

    value = slime_settings(args).action_format or DEFAULT_ACTION_FORMAT
    try:
        return check_action_format(str(value))
    except UnknownActionFormat as exc:
        raise UnsupportedSlimeSetting(f"ShopSim's generate hook refuses shopsim_action_format: {exc}") from exc


def _chat_template(args: Any) -> Any:
    # lazy: slime_runtime imports this hook and stays light
    from shopsimrl.slime.policy import ChatTemplate

    tokenizer = hook_state().tokenizer(args.hf_checkpoint)
    return ChatTemplate(tokenizer, getattr(args, "apply_chat_template_kwargs", None) or None)


def _sglang_aborted(result: Any) -> bool:
    # lazy: slime_runtime imports this hook and stays light
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
    root = Path(slime_settings(args).trace_dir)
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
    # lazy: the env client (httpx) loads with the first episode
    from shopsimrl.env.auth import load_token
    from shopsimrl.env.pool import make_env_client

    settings = slime_settings(args)
    return make_env_client(settings.env_url, token=load_token(settings.env_token_file))


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
