"""The env server dies, stalls or restarts under a running rollout."""

from __future__ import annotations

import os
import signal
import time

from faults.processes import EnvServer, Rollout, check_files_whole, wait_for

# SIGSTOP stall; SHOPSIMRL_FAULT_STALL_SECONDS=30 runs the 30 s case (the timeouts scale with it)
STALL = float(os.environ.get("SHOPSIMRL_FAULT_STALL_SECONDS", "6"))


def test_kill_9_of_the_env_server_stops_the_run_with_exit_3_naming_the_trace_folder(server, rollouts, tmp_path):
    run = Rollout(tmp_path, "killed", "--env", server.url, "--steps", "50", "--episode-concurrency", "32",
                  "--max-consecutive-failed-groups", "4", "--env-timeout", "5", turn_seconds=0.2)
    rollouts.append(run)
    step = wait_for(run.mid_step, 60, "a step under way")
    server.signal(signal.SIGKILL)
    assert run.wait(timeout=120) == 3, run.stderr
    assert "technical groups in a row" in run.stderr and "Traceback" not in run.stderr
    stopped = run.step_dirs()[-1]
    assert f"traces: {stopped / 'traces'}" in run.stderr and f"triage: {stopped / 'triage'}" in run.stderr
    assert stopped.name >= step.name and not (stopped / "metrics.json").exists()
    check_files_whole(run.root)


def test_a_stalled_server_costs_technical_drops_and_no_leaked_slot(server, rollouts, tmp_path):
    run = Rollout(tmp_path, "stall", "--env", server.url, "--steps", "8", "--episode-concurrency", "32",
                  "--max-consecutive-failed-groups", "1000", "--env-timeout", str(max(1.0, STALL / 3)),
                  turn_seconds=0.1)
    rollouts.append(run)
    wait_for(run.mid_step, 60, "a step under way")
    server.signal(signal.SIGSTOP)
    time.sleep(STALL)
    server.signal(signal.SIGCONT)
    assert run.wait(timeout=STALL * 6 + 120) == 0, run.stderr
    metrics = [line for line in (run.root / "metrics.jsonl").read_text().splitlines()]
    assert len(metrics) == 8  # the run went on after the stall
    technical = sum(len(list((step / "triage").glob("*.json"))) for step in run.step_dirs())
    assert technical > 0
    assert '"classification": "technical"' in "".join(
        p.read_text() for step in run.step_dirs() for p in (step / "triage").glob("*.json"))
    wait_for(lambda: server.leased() == 0, 30, "every slot back after SIGCONT")
    check_files_whole(run.root)


def test_a_server_restart_mid_run_costs_technical_drops_and_the_run_continues(servers, fault_cache, rollouts,
                                                                              tmp_path):
    first = EnvServer(fault_cache, "--slots", "48").start()
    servers.append(first)
    run = Rollout(tmp_path, "restart", "--env", first.url, "--steps", "6", "--episode-concurrency", "32",
                  "--max-consecutive-failed-groups", "1000", "--env-timeout", "5", turn_seconds=0.1)
    rollouts.append(run)
    wait_for(run.mid_step, 60, "a step under way")
    first.stop()
    second = EnvServer(fault_cache, "--slots", "48", port=first.port).start()
    servers.append(second)
    assert run.wait(timeout=180) == 0, run.stderr
    assert len((run.root / "metrics.jsonl").read_text().splitlines()) == 6
    wait_for(lambda: second.leased() == 0, 30, "no slot held on the restarted server")
    check_files_whole(run.root)
