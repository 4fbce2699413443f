"""Memory of a long ``shopsimrl rollout``: the process's RSS at step ~20 and at step ~190.

``python -m benchmarks.bench_memory [--quick] [--code DIR] [-- ROLLOUT OPTIONS]`` runs the real command
(in-process env, heuristic policy) in its own process and reads ``VmRSS`` from ``/proc/<pid>/status`` the
moment each sampled step's ``metrics.json`` appears.  Flat means the two figures differ by a few MB; a run
that keeps every step's report grows with the steps.  ``--code DIR`` also runs another copy of the source
(e.g. ``git archive <commit> shopsimrl | tar -x -C DIR``) with the same options at the same time, side by
side.  Linux only (``/proc``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.common import machine, publish

RESULT = Path(__file__).resolve().parent / "results" / "memory.json"
ROOT = Path(__file__).resolve().parents[1]
#: a smaller step than the defaults (64 episodes kept, not 256), so 200 steps take minutes, not half an hour;
#: a 2,000-product catalog, so the env's product cache (an LRU of up to 50,000 products, about 3.6 KB each) is
#: warm within the first steps and what grows after step 20 is what the run itself keeps
KNOBS = ["--rollout-batch-size", "8", "--n-samples-per-prompt", "8", "--over-sampling-batch-size", "16",
         "--global-batch-size", "64", "--products", "2000"]


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def measure(steps: int, at: list[int], options: list[str], code: str | None = None) -> dict[str, Any]:
    """Run ``shopsimrl rollout --steps steps`` and return the RSS (MB) when each step of ``at`` has finished."""
    env = dict(os.environ)
    env["PYTHONPATH"] = (code or str(ROOT)) + os.pathsep + env.get("PYTHONPATH", "")
    with tempfile.TemporaryDirectory() as out:  # also the working folder: `-m` puts it first on sys.path
        command = [sys.executable, "-m", "shopsimrl.cli", "rollout", "--steps", str(steps), "--view", "plain",
                   "--no-timeline", "--out", out, "--name", "memory", *options]
        proc = subprocess.Popen(command, env=env, cwd=out, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        rss: dict[str, float] = {}
        started = time.monotonic()
        try:
            while proc.poll() is None and len(rss) < len(at):
                for step in at:
                    if str(step) not in rss and (Path(out) / "memory" / f"step-{step}" / "metrics.json").exists():
                        rss[str(step)] = round(rss_mb(proc.pid), 1)
                        print(f"{code or 'this checkout'}: step {step}: {rss[str(step)]} MB", file=sys.stderr, flush=True)
                time.sleep(0.1)
            proc.wait(timeout=3600)
        finally:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=30)
        if proc.returncode != 0 or len(rss) < len(at):
            raise RuntimeError(f"the rollout failed (exit {proc.returncode}): {proc.stderr.read().decode()[-2000:]}")
    first, last = (rss[str(s)] for s in (at[0], at[-1]))
    return {"command": " ".join(["shopsimrl", *command[3:]]).replace(out, "OUT"), "rss_mb_at_step": rss,
            "growth_mb": round(last - first, 1), "growth_kb_per_step": round((last - first) * 1024 / (at[-1] - at[0]), 1),
            "seconds": round(time.monotonic() - started, 1)}


def main(quick: bool = False, code: str | None = None, options: list[str] | None = None) -> dict[str, Any]:
    """This checkout's rollout; with ``code``, that copy's too, at the same time (side by side, one load)."""
    steps, at = (45, [5, 40]) if quick else (200, [20, 50, 100, 150, 190])
    runs = {"this checkout": None, **({f"--code {code}": code} if code else {})}
    with ThreadPoolExecutor(len(runs)) as pool:
        futures = {label: pool.submit(measure, steps, at, KNOBS + (options or []), where)
                   for label, where in runs.items()}
        measured = {label: future.result() for label, future in futures.items()}
    result = {"machine": f"{machine()}, {os.cpu_count()} cores", "date": time.strftime("%Y-%m-%d"),
              "load_average_at_end": round(os.getloadavg()[0], 1), "runs": measured}
    publish(Path(tempfile.gettempdir()) / "memory.json" if quick else RESULT, result)
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="45 steps, RSS at steps 5 and 40")
    parser.add_argument("--code", default=None, help="also run the shopsimrl package found in this folder, side by side")
    parser.add_argument("options", nargs=argparse.REMAINDER, help="-- then more rollout options")
    args = parser.parse_args()
    main(args.quick, args.code, [o for o in args.options if o != "--"])
