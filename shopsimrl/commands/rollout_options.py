"""``shopsimrl rollout``: what one value alone cannot show, checked before any work (exit 2).

Each value is checked while parsing (``argtypes``); here are the checks that need several
options at once, the policy's options read from the flags, and the run's configuration.
Everything here raises :class:`~shopsimrl.errors.UsageError` (a refusal: one line, exit 2).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shopsimrl.argtypes import in_file
from shopsimrl.commands.clock_options import check_options as check_clock_options
from shopsimrl.commands.clock_options import run_fields as clock_fields
from shopsimrl.commands.clock_options import time_model
from shopsimrl.errors import UsageError
from shopsimrl.learn.connect import check_options as check_learner_options
from shopsimrl.learn.connect import run_fields as learning_fields
from shopsimrl.rollout.run import RolloutConfig, default_run_name
from shopsimrl.sampling import SamplingKnobs
from shopsimrl.sampling.modes import Selection
from shopsimrl.slime.data import PromptDataError, descriptions_of, read_prompts, with_labels

IN_PROCESS = "inprocess"  # --env: the in-process env (no server)

_OPENAI_ONLY = {
    "openai_base_url": "base_url",
    "openai_model": "model",
    "openai_api_key_env": "api_key_env",
    "max_tokens": "max_tokens",
    "request_timeout": "timeout",
    "top_p": "top_p",
    "send_seed": "send_seed",
    "extra_body": "extra_body",
    "system_prompt": "system_prompt",
    "max_context_tokens": "max_context_tokens",
    "action_format": "action_format",
}


def knobs_from_args(args: argparse.Namespace) -> SamplingKnobs:
    """The five dynamic-sampling knobs (``KnobError``, a refusal, when slime would refuse them)."""
    return SamplingKnobs(
        rollout_batch_size=args.rollout_batch_size,
        n_samples_per_prompt=args.n_samples_per_prompt,
        over_sampling_batch_size=args.over_sampling_batch_size,
        global_batch_size=args.global_batch_size,
        max_consecutive_failed_groups=args.max_consecutive_failed_groups,
    )


def policy_options(args: argparse.Namespace) -> dict[str, Any]:
    """The policy's constructor options (only those given); ``--temperature`` serves both policies."""
    given = {option: getattr(args, flag) for flag, option in _OPENAI_ONLY.items() if getattr(args, flag) is not None}
    if given and args.policy != "openai":
        flags = ", ".join("--" + f.replace("_", "-") for f, o in _OPENAI_ONLY.items() if o in given)
        raise UsageError(f"{flags}: used only by --policy openai")
    if "extra_body" in given:
        given["extra_body"] = _json_object(given["extra_body"], "--extra-body")
    if "system_prompt" in given:
        given["system_prompt"] = _read_prompt(given["system_prompt"])
    if args.temperature is not None:
        given["temperature"] = args.temperature  # finite and >= 0: checked while parsing
    return given


def _json_object(text: str, flag: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise UsageError(f"{flag} is not valid JSON ({exc}): {text!r:.200}") from None
    if not isinstance(value, dict):
        raise UsageError(f"{flag} must be a JSON object such as '{{\"top_k\": 20}}', got {text!r:.200}")
    return value


def _read_prompt(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--system-prompt: cannot read {path}: {exc}") from None
    if not text.strip():
        raise UsageError(f"--system-prompt: {path} is empty")
    return text


@dataclass(frozen=True)
class PromptLabels:
    """``--prompt-labels FILE``, read and checked while parsing: each task's text and labels."""

    path: Path
    labels: dict[str, dict[str, Any]]

    def over(self, descriptions: dict[str, dict[str, Any]] | None, task_ids: list[str]) -> dict[str, dict[str, Any]]:
        """The env's descriptions with this file's text and labels over them (a task the run does not train on: a
        refusal, :func:`~shopsimrl.slime.data.with_labels`)."""
        return with_labels(descriptions, self.labels, task_ids, self.path)


def prompt_labels(text: str) -> PromptLabels:
    """A prompt file in ``shopsimrl data export``'s format (labels added to its metadata), read whole; a malformed line
    is refused naming the file and the line."""
    path = in_file(text)
    try:
        _ids, metadata = read_prompts(path)
    except PromptDataError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"cannot read {text} ({exc.strerror or exc})") from None
    return PromptLabels(path, descriptions_of(metadata))


def run_fields(args: argparse.Namespace, options: dict[str, Any]) -> dict[str, Any]:
    """The run's options beyond its config, recorded in ``run.json`` (``--resume`` refuses other ones)."""
    return {"policy": args.policy, "policy_options": options, "env": args.env, "products": args.products,
            "catalog_seed": args.catalog_seed, "fault_rate": args.fault_rate, "max_turns": args.max_turns,
            **({"prompt_labels": str(args.prompt_labels.path)} if args.prompt_labels is not None else {}),
            **learning_fields(args), **clock_fields(args)}


def check_options(args: argparse.Namespace) -> None:
    """What one value alone cannot show (each value is checked while parsing: argtypes)."""
    checks = (
        (args.max_turns >= 1, f"--max-turns (turns per episode) must be >= 1, got {args.max_turns}"),  # --max-steps
        (args.env != IN_PROCESS or args.env_token_file is None, "--env-token-file: used only with --env URL"),
        (args.prompt_labels is None or args.selection is Selection.FORECAST,
         "--prompt-labels: only the forecast rule reads labels (add --selection forecast)"),
    )
    for ok, message in checks:
        if not ok:
            raise UsageError(message)
    check_clock_options(args)
    try:
        check_learner_options(args)
    except ValueError as exc:  # the learner's checks of these flags: each a refusal of the combination given
        raise UsageError(str(exc)) from None


def check_policy_server(args: argparse.Namespace) -> None:
    """``--policy openai`` plays against a server the user names: no silent default address."""
    if args.policy == "openai" and args.openai_base_url is None:
        raise UsageError("--policy openai needs --openai-base-url URL, the OpenAI-compatible server to play "
                         "against (e.g. http://127.0.0.1:30000/v1)")


def config_from_args(args: argparse.Namespace, knobs: SamplingKnobs) -> RolloutConfig:
    """The run's configuration (its own checks: steps, episode concurrency, cushion, stage size)."""
    try:
        return RolloutConfig(knobs=knobs, steps=args.steps, seed=args.seed, out=args.out,
                             name=args.name or default_run_name(), episode_concurrency=args.episode_concurrency,
                             selection=args.selection, waves=args.waves, cushion=args.cushion, timeline=args.timeline,
                             siblings=args.siblings, stage_size=args.stage_size, clock=args.clock, loop=args.loop,
                             time_model=time_model(args))
    except ValueError as exc:  # the config's checks of values given as flags (e.g. --stage-size >= n): a refusal
        raise UsageError(str(exc)) from None
