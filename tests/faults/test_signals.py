"""SIGINT / SIGTERM of a rollout mid-step: the step aborts, every lease is released, the exit is clean."""

from __future__ import annotations

import json
import signal
import time

import pytest
from faults.processes import EnvServer, Rollout, check_files_whole, wait_for


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_aborts_the_step_releases_every_lease_and_exits_cleanly(server, rollouts, tmp_path, sig, code):
    run = Rollout(tmp_path, "sig", "--env", server.url, "--steps", "50", "--episode-concurrency", "32",
                  turn_seconds=0.2)
    rollouts.append(run)
    step = wait_for(run.mid_step, 60, "a step under way")
    assert server.leased() > 0  # episodes hold leases right now
    sent = time.monotonic()
    run.signal(sig)
    assert run.wait(timeout=30) == code
    assert time.monotonic() - sent <= 10.0  # bounded cleanup (generous: this machine is shared)
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and f"interrupted by {sig.name}" in lines[0] and "Traceback" not in run.stderr
    assert server.leased() == 0
    events = [json.loads(line) for line in (step / "events.jsonl").read_text().splitlines()]
    assert events[-2]["event"] == "stopped" and events[-2]["reason"] == "interrupted"
    assert events[-2]["signal"] == sig.name and events[-1]["event"] == "abort"
    assert not (step / "metrics.json").exists()  # the step is marked incomplete
    check_files_whole(run.root)


def test_a_second_ctrl_c_during_cleanup_still_releases(server, rollouts, tmp_path):
    run = Rollout(tmp_path, "twice", "--env", server.url, "--steps", "50", "--episode-concurrency", "32",
                  turn_seconds=0.2)
    rollouts.append(run)
    wait_for(run.mid_step, 60, "a step under way")
    run.signal(signal.SIGINT)
    run.signal(signal.SIGINT)
    assert run.wait(timeout=30) == 130
    assert "Traceback" not in run.stderr
    assert server.leased() == 0
    check_files_whole(run.root)


def test_a_vanished_client_s_leases_are_reclaimed_after_the_lease_ttl(servers, fault_cache, rollouts, tmp_path):
    server = EnvServer(fault_cache, "--slots", "48", "--lease-ttl", "2").start()
    servers.append(server)
    run = Rollout(tmp_path, "vanish", "--env", server.url, "--steps", "50", turn_seconds=0.5)
    rollouts.append(run)
    wait_for(run.mid_step, 60, "a step under way")
    run.signal(signal.SIGKILL)  # no cleanup at all
    run.wait(timeout=10)
    wait_for(lambda: server.leased() == 0, 15, "the server to reclaim the dead client's leases")
    assert server.health()["free_slots"] == 48


def test_sigint_of_an_in_process_run_exits_130_with_whole_files(fault_cache, rollouts, tmp_path):
    run = Rollout(tmp_path, "inproc", "--steps", "50", "--episode-concurrency", "32", turn_seconds=0.2,
                  cache=fault_cache)
    rollouts.append(run)
    step = wait_for(run.mid_step, 60, "a step under way")
    run.signal(signal.SIGINT)
    assert run.wait(timeout=30) == 130
    assert "interrupted by SIGINT" in run.stderr and "Traceback" not in run.stderr
    events = [json.loads(line) for line in (step / "events.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events][-2:] == ["stopped", "abort"]
    check_files_whole(run.root)


def test_sigint_with_the_env_server_gone_still_exits_within_10_s(server, rollouts, tmp_path):
    run = Rollout(tmp_path, "gone", "--env", server.url, "--steps", "50", "--episode-concurrency", "32",
                  "--max-consecutive-failed-groups", "1000", turn_seconds=0.2)
    rollouts.append(run)
    wait_for(run.mid_step, 60, "a step under way")
    server.signal(signal.SIGSTOP)  # the server holds the connections and answers nothing
    try:
        sent = time.monotonic()
        run.signal(signal.SIGINT)
        code = run.wait(timeout=90)
        took = time.monotonic() - sent
        assert code == 130, run.stderr[-3000:]
        assert took <= 12.0, (took, run.stderr[-3000:])  # releases give up after 8 s; slack for a shared machine
        lines = [line for line in run.stderr.splitlines() if line.strip()]
        assert len(lines) == 1, run.stderr[-2000:]
        assert "interrupted by SIGINT" in lines[0] and "could not be released" in lines[0]
        check_files_whole(run.root)
    finally:
        server.signal(signal.SIGCONT)
    # what the server reads after SIGCONT is applied or dropped; what remains, the lease TTL reclaims
