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
    return done, report(out / name, before, after, wall, server)


def _delta(after: dict[str, float], before: dict[str, float], name: str) -> float:
    return after.get(name, 0.0) - before.get(name, 0.0)


def report(run: Path, before: dict[str, float], after: dict[str, float], wall: float, server: LlamaServer) -> dict[str, Any]:
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
    bound = cache_share_bound(run)
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
        "prompt_cache_share_bound": bound,
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


def cache_share_bound(run: Path) -> float | None:
    """The highest share of the run's prompt tokens any prefix cache could serve, from the traces' prompt sizes.

    Every request's prompt is the episode's previous prompt, the reply and the new page; siblings share their
    first prompt (system prompt, task, search page). Only the pages are new, and each must be read once: the
    tokens a cache cannot serve are each episode's last prompt less its earlier replies (generated into the
    cache), less the first prompt for every sibling after a group's first. The share actually served
    (``prompt_cache_share``) is at most about this (a reply re-tokenized differently costs a few tokens, a
    cancelled episode's requests are in the server's counters but not in the traces); equal, nothing was lost.
    """
    total = new = 0
    firsts: dict[str, list[int]] = collections.defaultdict(list)
    for path in sorted(run.glob("step-*/traces/g*-s*.json")):
        if json.loads(path.read_text()).get("cancelled"):
            continue
        outputs = [s["output"] for s in json.loads(path.read_text())["steps"] if isinstance(s["output"].get("prompt_tokens"), int)]
        prompts = [o["prompt_tokens"] for o in outputs]
        if prompts:
            total += sum(prompts)
            # the replies before the last prompt were generated into the server's cache: not new either
            new += prompts[-1] - sum(o.get("completion_tokens") or 0 for o in outputs[:-1])
            firsts[f"{path.parent.parent.name}/{path.name.split('-s')[0]}"].append(prompts[0])
    new -= sum(min(values) * (len(values) - 1) for values in firsts.values())
    return round(1 - new / total, 3) if total else None


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
    decisions = {f"{path.parent.name}/g{event['index']:04d}": event["decision"]
                 for path in sorted(run.glob("step-*/events.jsonl")) for event in map(json.loads, path.read_text().splitlines())
                 if event.get("event") == "decision"}
    batch = [json.loads(line) for path in sorted(run.glob("step-*/batch.jsonl")) for line in path.read_text().splitlines()]
    trained: dict[tuple[int, int], list[float]] = collections.defaultdict(list)
    for row in batch:
        trained[(row["step"], row["group_index"])].append(float(row["reward"]))
    return {
        "groups": {name: {"rewards": values, "spread": round(statistics.pstdev(values), 4),
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
