"""Measure ``shopsimrl rollout --policy openai`` on the e2e model: tokens/s, wall time per step, how episodes ended.

    python tests/e2e/measure.py --out runs --name real-model -- --steps 1 --rollout-batch-size 8 ...

starts the cached ``llama-server`` (``make e2e`` builds it and installs the model), runs the
real rollout CLI against it with the options after ``--``, and prints one JSON report: the
server's own counters over the run (completion and prompt tokens, their seconds, prompt
tokens served from its prefix cache), each step's wall time, and the table of end reasons,
protocol-error codes and env feedback codes read from the episode traces.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __name__ == "__main__":  # run as a script: make `e2e.*` importable as in the tests
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402
from e2e.llama_server import LlamaServer, running_server, server_metrics  # noqa: E402


def rollout(server: LlamaServer, out: Path, name: str, options: list[str]) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """Run the rollout CLI; returns the finished process and the report of the run."""
    before = server_metrics(server.url)
    command = [sys.executable, "-m", "shopsimrl.cli", "rollout", "--policy", "openai",
               "--openai-base-url", f"{server.url}/v1", "--openai-model", "smollm2", *options,
               "--out", str(out), "--name", name, "--view", "plain"]
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, timeout=7200)
    wall = time.monotonic() - started
    after = server_metrics(server.url)
    return done, report(out / name, before, after, wall, server, system_turn_tokens(server, options))


def _delta(after: dict[str, float], before: dict[str, float], name: str) -> float:
    return after.get(name, 0.0) - before.get(name, 0.0)


def report(run: Path, before: dict[str, float], after: dict[str, float], wall: float, server: LlamaServer,
           header_tokens: int = 0) -> dict[str, Any]:
    every = [json.loads(p.read_text()) for p in sorted(run.glob("step-*/traces/*.json"))]
    # an episode the step cancelled once its batch was full (its group no longer needed) has no outcome
    traces = [t for t in every if not t.get("cancelled")]
    steps = [s for t in traces for s in t["steps"]]
    step_walls = []
    technical = 0.0
    for metrics_file in sorted(run.glob("step-*/metrics.json")):
        metrics = json.loads(metrics_file.read_text())
        technical += metrics.get("rollout/shopsim/technical_group_drop_count", 0.0)
        step_walls.append(round(metrics.get("rollout/shopsim/step/wall_seconds", float("nan")), 1))
    predicted = _delta(after, before, "tokens_predicted_total")
    processed = _delta(after, before, "prompt_tokens_total")
    cached = _delta(after, before, "prompt_tokens_cached_total")
    cache = cache_share_bound(run, header_tokens)
    unique = cache["prompt_tokens_in_traces"] - cache["prompt_tokens_reusable"]  # read once by any cache
    return {
        "machine": f"{os.cpu_count()} cores, llama-server -t {server.threads}, {time.strftime('%Y-%m-%d')}",
        "episodes": len(traces),
        "cancelled_episodes": len(every) - len(traces),
        "scored": sum(1 for t in traces if t["scored"]),
        "technical_groups": int(technical),
        "turns": len(steps),
        "wall_seconds_total": round(wall, 1),
        "wall_seconds_per_step": step_walls,
        "completion_tokens": int(predicted),
        "generation_tokens_per_second": round(predicted / max(1e-9, _delta(after, before, "tokens_predicted_seconds_total")), 1),
        "prompt_tokens_processed": int(processed),
        "prompt_tokens_from_cache": int(cached),
        "prompt_tokens_per_second": round(processed / max(1e-9, _delta(after, before, "prompt_seconds_total")), 1),
        "prompt_cache_share": round(cached / max(1.0, cached + processed), 3),
        **cache,
        # of the prompt tokens some cache could have served, the share the server did serve: cached / (cached + the
        # tokens it computed beyond those no cache could serve; the requests in flight when episodes were cancelled
        # count as computed for nothing)
        "prompt_cache_reusable_served": round(cached / (cached + max(0.0, processed - unique)), 3)
        if cached + max(0.0, processed - unique) else None,
        "end_reasons": dict(collections.Counter(t["end_reason"] for t in traces)),
        "protocol_errors": dict(collections.Counter(s["protocol_error"]["code"] for s in steps if s["protocol_error"])),
        "env_feedback": dict(collections.Counter(s["feedback"]["code"] for s in steps if s["feedback"])),
        "turns_per_episode": dict(sorted(collections.Counter(len(t["steps"]) for t in traces).items())),
        "env_action_share": round(sum(1 for s in steps if s["action"] is not None) / max(1, len(steps)), 3),
        "purchases": sum(1 for t in traces if t["end_reason"] == "purchase"),
        "reward_distribution": dict(sorted(collections.Counter(
            f"{float((t.get('final') or {}).get('reward') or 0.0):.3f}" for t in traces if t["scored"]).items())),
        **groups_report(run),
    }


def cache_share_bound(run: Path, header_tokens: int = 0) -> dict[str, Any]:
    """The most of the run's prompt tokens any prefix cache could serve, from the traces' prompt sizes.

    Every request's prompt is the episode's previous prompt, the reply and the new page, so only the pages are
    new, and each distinct one must be read once. A turn's new tokens are its prompt less the previous prompt and
    the reply before it (generated into the server's cache: not new either). Two prompts are the same up to a
    turn when they belong to one group (one task) and the actions before that turn were the same: siblings share
    their first prompt (system prompt, task, search page) and any later page they reached by the same actions.
    Every group's first prompt also starts with the same system turn (``header_tokens`` long). What remains,
    each distinct prefix once, cannot come from any cache; the rest (``prompt_tokens_reusable``) can.

    ``prompt_cache_share_bound`` is 1 less that share: the measured ``prompt_cache_share`` is at most about
    this (a reply re-tokenized differently costs a few tokens; the request in flight when an episode was
    cancelled is in the server's counters but not in its trace). ``prompt_cache_share_bound_own_path`` is the
    same when siblings share only their first prompt (the figure reported before). The key of a turn is the
    actions taken before it, as the traces record them, not the reply's exact text: two replies of one action
    written differently would be two prompts.
    """
    total = new = new_own_path = 0
    seen: set[tuple[str, tuple[str, ...]]] = set()
    firsts: dict[str, list[int]] = collections.defaultdict(list)
    for path in sorted(run.glob("step-*/traces/g*-s*.json")):
        trace = json.loads(path.read_text())  # a cancelled episode's finished turns are requests the server served
        group = f"{path.parent.parent.name}/{path.name.split('-s')[0]}"
        steps = [s for s in trace["steps"] if isinstance(s["output"].get("prompt_tokens"), int)]
        prompts = [s["output"]["prompt_tokens"] for s in steps]
        if not prompts:
            continue
        total += sum(prompts)
        new_own_path += prompts[-1] - sum(s["output"].get("completion_tokens") or 0 for s in steps[:-1])
        firsts[group].append(prompts[0])
        before: tuple[str, ...] = ()
        for k, step in enumerate(steps):
            if (group, before) not in seen:
                seen.add((group, before))
                previous = steps[k - 1]["output"] if k else None
                new += prompts[0] if previous is None else max(
                    0, prompts[k] - previous["prompt_tokens"] - (previous.get("completion_tokens") or 0))
            before += (json.dumps([step["output"].get("tool_calls"), step["output"].get("text")], sort_keys=True),)
    new_own_path -= sum(min(values) * (len(values) - 1) for values in firsts.values())
    new -= header_tokens * max(0, len(firsts) - 1)
    if not total:
        return {"prompt_tokens_in_traces": 0, "prompt_tokens_reusable": 0, "prompt_cache_share_bound": None,
                "prompt_cache_share_bound_own_path": None}
    return {"prompt_tokens_in_traces": total, "prompt_tokens_reusable": total - new,
            "prompt_cache_share_bound": round(1 - new / total, 3),
            "prompt_cache_share_bound_own_path": round(1 - new_own_path / total, 3)}


def system_turn_tokens(server: LlamaServer, options: list[str]) -> int:
    """The tokens of the system turn every episode's prompt starts with (constrained formats: no tool list)."""
    from shopsimrl.agent.constrained import CONSTRAINED_FORMATS
    from shopsimrl.agent.messages import default_system_prompt

    action_format = options[options.index("--action-format") + 1] if "--action-format" in options else "tools"
    if action_format not in CONSTRAINED_FORMATS:
        return 0  # the tool list is rendered into the system turn: not counted (the bound is then a little low)
    text = f"<|im_start|>system\n{default_system_prompt(action_format)}<|im_end|>\n"
    answer = httpx.post(f"{server.url}/tokenize", json={"content": text, "parse_special": True}, timeout=30)
    return len(answer.json()["tokens"])


def groups_report(run: Path) -> dict[str, Any]:
    """Each completed group's rewards and spread (from the traces), and what reached the trainer (``batch.jsonl``).

    A group is informative when its rewards differ (standard deviation > 0): only such a group gives GRPO
    a non-zero advantage. ``kept_informative_groups`` counts the informative groups in the trained batch. Each
    group carries the filter's decision (``events.jsonl``); a group the step cancelled once its batch was full
    has no decision, and its finished siblings do not count towards ``groups_with_spread``.
    """
    rewards: dict[str, list[float]] = collections.defaultdict(list)
    for path in sorted(run.glob("step-*/traces/g*-s*.json")):
        trace = json.loads(path.read_text())
        if trace["scored"]:
            group = f"{path.parent.parent.name}/{path.name.split('-s')[0]}"
            rewards[group].append(round(float((trace.get("final") or {}).get("reward") or 0.0), 4))
    events = [(path.parent.name, event) for path in sorted(run.glob("step-*/events.jsonl"))
              for event in map(json.loads, path.read_text().splitlines())]
    decisions = {f"{step}/g{event['index']:04d}": event["decision"] for step, event in events if event.get("event") == "decision"}
    tasks = {f"{step}/g{index:04d}": task for step, event in events if event.get("event") == "wave"
             for index, task in enumerate(event["task_ids"], start=event["first_index"])}
    batch = [json.loads(line) for path in sorted(run.glob("step-*/batch.jsonl")) for line in path.read_text().splitlines()]
    trained: dict[tuple[int, int], list[float]] = collections.defaultdict(list)
    for row in batch:
        trained[(row["step"], row["group_index"])].append(float(row["reward"]))
    return {
        "started_tasks": list(tasks.values()),
        "groups": {name: {"task": tasks.get(name), "rewards": values, "spread": round(statistics.pstdev(values), 4),
                          "decision": decisions.get(name, "not judged (the step ended first)")}
                   for name, values in rewards.items()},
        "groups_with_spread": sum(1 for name, values in rewards.items() if name in decisions and statistics.pstdev(values) > 0),
        "decisions": dict(collections.Counter(decisions.values())),
        "trained_groups": len(trained),
        "kept_informative_groups": sum(1 for values in trained.values() if statistics.pstdev(values) > 0),
        "trained_decisions": dict(collections.Counter(row["decision"] for row in batch)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("runs"))
    parser.add_argument("--name", default="real-model")
    parser.add_argument("rollout_options", nargs=argparse.REMAINDER, help="options for shopsimrl rollout, after --")
    args = parser.parse_args(argv)
    options = [o for o in args.rollout_options if o != "--"]
    # SIGTERM unwinds like Ctrl-C, so the rollout child and the server are stopped by their PIDs
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with tempfile.TemporaryDirectory() as scratch, running_server(Path(scratch) / "server.log") as server:
        done, result = rollout(server, args.out, args.name, options)
    print(json.dumps(result, indent=2))
    if done.returncode != 0:
        print(done.stdout[-3000:], done.stderr[-3000:], sep="\n", file=sys.stderr)
    return done.returncode


if __name__ == "__main__":
    raise SystemExit(main())
