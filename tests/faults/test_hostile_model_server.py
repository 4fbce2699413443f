"""The model path fuzzed as the CLI is: a hostile OpenAI-compatible server process, one rollout process per case.

``tests/hostile_model.py`` runs as its own process on 127.0.0.1 and answers every request of a case
with that case's reply (a 200 MB body, an endless one, JSON nested 200,000 deep, token counts that are
strings, half surrogate pairs, NaN, control characters, 20,000 tool calls, wrong types...).  For each
case a real ``shopsimrl rollout --policy openai`` plays one small step against it and a real env server:

- no traceback on its stderr, no escape sequence or NUL of the server's on its terminal, no
  ``runner_error`` episode: every case is filed by the rule (docs/agent.md), a technical case stopping the
  run with exit 3 and its error type, a model's case scored and the step written (exit 0);
- its peak memory (``ru_maxrss`` of the process, from ``wait4``) stays under ``PEAK_RSS_LIMIT`` for
  every case, the 200 MB and endless bodies included (before the cap: 2.8 GB and growing).

Every process is stopped by its PID; every wait is bounded.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from faults.processes import PRODUCTS, EnvServer, stop, wait_for
from hostile_model import CASES
from local_processes import free_port

HOSTILE = Path(__file__).resolve().parent.parent / "hostile_model.py"
PEAK_RSS_LIMIT = 400 << 20  # bytes
RUN_SECONDS = 180.0
AT_ONCE = 4  # rollouts at a time: most of a case is a process starting
STEP = ["--rollout-batch-size", "1", "--n-samples-per-prompt", "2", "--over-sampling-batch-size", "2",
        "--global-batch-size", "2", "--steps", "1", "--max-turns", "2", "--max-consecutive-failed-groups", "1",
        "--episode-concurrency", "2", "--request-timeout", "30", "--view", "plain", "--no-timeline"]


@dataclass
class Played:
    code: int
    stdout: str
    stderr: str
    peak_rss: int  # bytes
    root: Path


@pytest.fixture(scope="module")
def hostile() -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(HOSTILE), str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return httpx.post(url + "/none/v1/chat/completions", content=b"{}", timeout=2).status_code == 404
        except httpx.HTTPError:
            return False

    try:
        wait_for(lambda: up() or proc.poll() is not None, 30, "the hostile model server")
        assert proc.poll() is None
        yield url
    finally:
        stop(proc)


@pytest.fixture(scope="module")
def env_server(fault_cache: Path) -> Iterator[EnvServer]:
    server = EnvServer(fault_cache, "--slots", "16").start()
    try:
        yield server
    finally:
        server.stop()


def play(out: Path, case: str, hostile: str, env_url: str, cache: Path) -> Played:  # from a pool thread
    """One rollout process against ``case``; its exit code, output and peak RSS (``wait4``, so its own)."""
    argv = [sys.executable, "-m", "shopsimrl.cli", "rollout", "--policy", "openai", "--openai-model", "m",
            "--openai-base-url", f"{hostile}/{case}/v1", "--env", env_url, "--products", str(PRODUCTS), *STEP,
            "--out", str(out), "--name", case]
    if CASES[case].constrained:
        argv += ["--action-format", "constrained"]
    with open(out / f"{case}.out", "wb") as stdout, open(out / f"{case}.err", "wb") as stderr:
        # each pool thread waits for its own process, by its PID (wait4: that process's own peak RSS)
        proc = subprocess.Popen(argv, stdout=stdout, stderr=stderr, env={**os.environ, "SHOPSIMRL_CACHE": str(cache)})
    deadline = time.monotonic() + RUN_SECONDS
    try:
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                proc.returncode = os.waitstatus_to_exitcode(status)
                break
            if time.monotonic() > deadline:
                os.kill(proc.pid, signal.SIGKILL)
                raise AssertionError(f"the rollout against {case} did not end within {RUN_SECONDS:g} s")
            time.sleep(0.05)
    finally:
        if proc.returncode is None:
            stop(proc)
    return Played(proc.returncode, (out / f"{case}.out").read_text(errors="replace"),
                  (out / f"{case}.err").read_text(errors="replace"), usage.ru_maxrss * 1024, out / case)


@pytest.fixture(scope="module")
def played(hostile: str, env_server: EnvServer, fault_cache: Path,
           tmp_path_factory: pytest.TempPathFactory) -> dict[str, Played]:
    """Every case's rollout, ``AT_ONCE`` processes at a time (each measured on its own by ``wait4``)."""
    out = tmp_path_factory.mktemp("hostile")
    with ThreadPoolExecutor(max_workers=AT_ONCE) as pool:
        runs = {case: pool.submit(play, out, case, hostile, env_server.url, fault_cache) for case in CASES}
        return {case: run.result() for case, run in runs.items()}


@pytest.mark.parametrize("case", list(CASES))
def test_a_hostile_reply_is_filed_by_the_rule_in_a_real_rollout(case: str, played: dict[str, Played]) -> None:
    expected = CASES[case]
    run = played[case]
    shown = run.stdout + run.stderr
    assert "Traceback" not in shown and "\x1b" not in shown and "\x00" not in shown, shown[-3000:]
    assert run.peak_rss < PEAK_RSS_LIMIT, f"{case}: peak RSS {run.peak_rss / 2**20:.0f} MiB"
    siblings = [sibling for path in run.root.glob("step-*/triage/*.json")
                for sibling in json.loads(path.read_text(encoding="utf-8"))["siblings"]]
    assert siblings and not [s for s in siblings if s["end_reason"] == "runner_error"], siblings
    for path in run.root.glob("step-*/traces/*.json"):
        json.loads(path.read_text(encoding="utf-8"))  # whole, whatever the reply held
    if expected.technical:
        assert run.code == 3, shown[-3000:]
        assert {(s["error"]["stage"], s["error"]["type"]) for s in siblings} == {("policy", expected.filed[10:])}
        assert len(run.stderr.strip().splitlines()) <= 3, run.stderr  # the stop, where the traces and triage are
    else:
        assert run.code == 0, shown[-3000:]
        assert all(s["scored"] for s in siblings)
        assert (run.root / "step-1" / "complete.json").exists()


def test_the_largest_replies_cost_the_rollout_little_memory(played: dict[str, Played], env_server: EnvServer) -> None:
    """The figures (``-s`` prints them): a 200 MB or endless answer is read up to the 8 MiB cap, no further."""
    for case in ("body-200mb-declared", "body-200mb", "body-endless", "many-tool-calls", "content-megabytes"):
        print(f"{case}: peak RSS {played[case].peak_rss / 2**20:.0f} MiB")
        assert played[case].peak_rss < PEAK_RSS_LIMIT
    wait_for(lambda: env_server.leased() == 0, 30, "every env slot released")
