"""``shopsimrl view`` on a large run: each kind of page's answer time and the server's memory.

``python -m benchmarks.bench_view [--quick]``: a real run of the main job (``shopsimrl rollout``, default
knobs: 256 episodes generated per step, GRPO learner, an evaluation every 10 steps) of a few steps is made,
then widened to 80 steps (10 with ``--quick``) by linking its step folders' files under new step numbers
(traces and triage hard-linked; markers and metrics rows renumbered), so the viewer reads a run of 80 x 256
traces.  ``shopsimrl view`` is started as its own process; every page kind is asked for on many different
steps, groups and prompts (cold: each one the first time), timed from the client; the server's RSS is read
from ``/proc`` before and after.  Target: every page under 0.5 s.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx

from benchmarks.bench_memory import rss_mb
from benchmarks.common import command_line, machine, publish

RESULT = Path(__file__).resolve().parent / "results" / "view.json"
SOURCE_STEPS = 4
TARGET_SECONDS = 0.5


def make_source(out: Path) -> Path:
    command = [sys.executable, "-m", "shopsimrl.cli", "rollout", "--steps", str(SOURCE_STEPS), "--view", "plain",
               "--learner", "grpo", "--eval-every", "10", "--products", "2000", "--out", str(out), "--name", "src"]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, cwd=out)
    return out / "src"


def widen(source: Path, target: Path, steps: int) -> None:
    """``target``: ``source``'s steps repeated to ``steps`` steps (files linked, markers and rows renumbered)."""
    target.mkdir()
    shutil.copy(source / "run.json", target / "run.json")
    rows = [json.loads(line) for line in (source / "metrics.jsonl").read_text().splitlines()]
    lines = []
    for step in range(1, steps + 1):
        src = source / f"step-{(step - 1) % SOURCE_STEPS + 1}"
        dst = target / f"step-{step}"
        dst.mkdir()
        for entry in src.iterdir():
            if entry.is_dir():
                (dst / entry.name).mkdir()
                for file in entry.iterdir():
                    os.link(file, dst / entry.name / file.name)
            elif entry.name == "complete.json":
                marker = json.loads(entry.read_text())
                (dst / entry.name).write_text(json.dumps(marker | {"step": step}))
            else:
                os.link(entry, dst / entry.name)
        row = dict(rows[(step - 1) % SOURCE_STEPS]) | {"step": step}
        if step % 10 == 0 or step == 1:  # an evaluation every 10 steps, as --eval-every 10 leaves them
            row |= {"eval/shopsim/trained_steps": step if step > 1 else 0,
                    "eval/shopsim/success_rate": rows[0].get("eval/shopsim/success_rate", 0.5)}
        else:
            row = {k: v for k, v in row.items() if not k.startswith("eval/")}
        lines.append(json.dumps(row))
    (target / "metrics.jsonl").write_text("\n".join(lines) + "\n")


def pages(run: Path, steps: int, per_kind: int) -> dict[str, list[str]]:
    """The URLs asked for, per page kind: many steps, groups and prompts, so most answers are cold."""
    chosen = [1 + (i * 7) % steps for i in range(per_kind)]
    episodes, prompts = [], []
    for i, step in enumerate(chosen):
        triage = sorted((run / f"step-{step}" / "triage").iterdir())
        group = int(triage[(i * 5) % len(triage)].stem[1:])
        episodes.append(f"/run/big/step/{step}/episode/{group}/{i % 8}")
        prompts.append(json.loads(triage[(i * 3) % len(triage)].read_text())["task_id"])
    return {"runs": ["/"] * per_kind, "run": ["/run/big"] * per_kind, "run charts": ["/api/charts?run=big"] * per_kind,
            "step": [f"/run/big/step/{s}" for s in chosen], "episode": episodes,
            "prompt": [f"/run/big/prompt/{p}" for p in prompts]}


def measure(folder: Path, urls: dict[str, list[str]]) -> dict[str, Any]:
    server = subprocess.Popen([sys.executable, "-m", "shopsimrl.cli", "view", str(folder), "--port", "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        base = line.split(" at ", 1)[1].split(" ", 1)[0].rstrip("/")
        with httpx.Client(base_url=base, timeout=60) as client:
            client.get("/static/view.js")
            rss_before = rss_mb(server.pid)
            timings: dict[str, list[float]] = {}
            for kind, paths in urls.items():
                for path in paths:
                    started = time.perf_counter()
                    answer = client.get(path)
                    timings.setdefault(kind, []).append(time.perf_counter() - started)
                    assert answer.status_code == 200, (path, answer.status_code, answer.text[-300:])
            rss_after = rss_mb(server.pid)
    finally:
        server.terminate()
        server.wait(timeout=30)
    return {"pages": {kind: {"median_seconds": round(statistics.median(t), 4), "worst_seconds": round(max(t), 4),
                             "requests": len(t)} for kind, t in timings.items()},
            "server_rss_mb": {"after_start": rss_before, "after_all_pages": rss_after}}


def main(quick: bool = False) -> dict[str, Any]:
    steps, per_kind = (10, 10) if quick else (80, 40)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        source = make_source(out)
        runs = out / "runs"
        runs.mkdir()
        widen(source, runs / "big", steps)
        traces = sum(1 for _ in (runs / "big").glob("step-*/traces/*.json"))
        measured = measure(runs, pages(runs / "big", steps, per_kind))
    worst = max(p["worst_seconds"] for p in measured["pages"].values())
    load = os.getloadavg()[0]  # the machine is shared: what else ran shows in the worst figures
    results = {"machine": machine(), "cpus": os.cpu_count(), "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
               "quick": quick, "load_average_1min": round(load, 2), "steps": steps, "traces": traces, **measured,
               "target_seconds": TARGET_SECONDS, "every_page_under_target": worst < TARGET_SECONDS}
    if not quick:
        publish(RESULT, results)
    else:
        print(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    command_line(main, __doc__)
