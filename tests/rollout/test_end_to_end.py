"""End to end on the real ShopSim env and the heuristic agent: CLI, outputs, replay, abort, faults, HTTP."""

from __future__ import annotations

import asyncio
import socket
from collections import Counter
from pathlib import Path

from rollout.conftest import CATALOG_SEED, PRODUCTS
from rollout.fakes import load_events, read_json, replay_events

from shopsimrl.agent import make_policy
from shopsimrl.agent.policy import PolicyTurn, ToolCall
from shopsimrl.commands import rollout as cli
from shopsimrl.env import InProcessEnvClient
from shopsimrl.env.build import build_catalog
from shopsimrl.env.core import ShopSimEnv
from shopsimrl.env.server import ServerThread
from shopsimrl.io import read_jsonl
from shopsimrl.rollout import RolloutConfig, run_rollout
from shopsimrl.rollout.episode_runner import agent_runner
from shopsimrl.rollout.synthetic import unit_hash
from shopsimrl.sampling import REASON_ZERO_STD, SamplingKnobs
from shopsimrl.sampling.metrics import STEP_METRIC_KEYS

SMALL_ARGS = ["--products", "2000", "--rollout-batch-size", "4", "--n-samples-per-prompt", "4",
              "--over-sampling-batch-size", "8", "--global-batch-size", "8", "--view", "plain"]


def check_step_outputs(step_dir: Path, knobs: SamplingKnobs) -> dict:
    """batch / events / metrics / traces / triage of one finished step are complete and consistent.

    Output plumbing, not rule coverage: the decisions are replayed with the driver's own controller.
    """
    rows = list(read_jsonl(step_dir / "batch.jsonl"))
    n, target = knobs.n_samples_per_prompt, knobs.rollout_batch_size
    groups = Counter(r["group_index"] for r in rows)
    assert len(groups) == target and set(groups.values()) == {n}
    per_update = Counter()
    for gi in groups:
        updates = {r["update"] for r in rows if r["group_index"] == gi}
        assert len(updates) == 1  # a group never straddles two updates
        per_update[updates.pop()] += 1
    assert dict(per_update) == {u: knobs.global_batch_size // n for u in range(knobs.updates_per_step)}
    for row in rows:
        assert Path(row["trace_path"]).is_file()
        assert row["decision"] in ("accepted", "fallback")
        assert isinstance(row["advantage"], float) and isinstance(row["reward"], float)
    events = load_events(step_dir)
    kinds = [e["event"] for e in events]
    assert kinds[0] == "step_start" and kinds[1] == "wave" and kinds[-1] == "abort"
    assert all(a["t"] <= b["t"] for a, b in zip(events, events[1:]))
    decisions = [e for e in events if e["event"] == "decision"]
    triage = sorted(p.name for p in (step_dir / "triage").iterdir())
    judged = {d["index"] for d in decisions}
    assert {f"g{i:04d}.json" for i in judged} <= set(triage)
    # the log replayed through the same WaveController: checks the event log and the driver's batching,
    # not the rules (a broken rule would break both sides alike; the rules are tested in tests/sampling)
    replayed, _ = replay_events(events, knobs)
    assert [(e.group.index, e.group.decision.value, e.group.remaining) for e in replayed.events] == [
        (d["index"], d["decision"], d["remaining"]) for d in decisions
    ]
    assert sorted(replayed.kept) == sorted(groups)
    metrics = read_json(step_dir / "metrics.json")
    for key in STEP_METRIC_KEYS:
        assert key in metrics
    assert metrics["rollout/shopsim/train_group_count"] == target
    assert metrics["rollout/shopsim/train_trajectory_count"] == target * n
    assert metrics["rollout/shopsim/group_count"] == len(decisions)
    return metrics


def test_cli_default_knobs_on_the_in_process_env(tmp_path, cli_cache, capsys):
    code = cli.main(["--steps", "2", "--products", "2000", "--out", str(tmp_path), "--name", "e2e",
                     "--view", "plain"])
    out = capsys.readouterr().out
    assert code == 0, out
    run = tmp_path / "e2e"
    for k in (1, 2):
        metrics = check_step_outputs(run / f"step-{k}", SamplingKnobs())
        assert metrics["rollout/shopsim/waste/groups_submitted"] >= 32
    assert [line["step"] for line in read_jsonl(run / "metrics.jsonl")] == [1, 2]
    assert read_json(run / "run.json")["knobs"] == SamplingKnobs().as_dict()
    assert "step 1 wave 1: submitted 32 groups" in out
    for column in ("kept", "fallback", "zero-std drops", "technical drops", "surplus", "aborted", "waves",
                   "success rate", "reward mean", "wall s", "episodes/s"):
        assert column in out
    queued = {(q["step"], q["group_index"]) for q in read_jsonl(run / "failure_queue.jsonl")} \
        if (run / "failure_queue.jsonl").exists() else set()
    no_success = {(k, read_json(p)["group_index"]) for k in (1, 2) for p in (run / f"step-{k}" / "triage").iterdir()
                  if _never_succeeded(read_json(p))}
    assert queued == no_success


def _never_succeeded(triage: dict) -> bool:
    """The failure queue's rule, read off a triage file: every sibling scored, none with r_success = 1."""
    return all(s["scored"] and not s["success"] for s in triage["siblings"])


class _Clueless:
    """Searches for nonsense until the turn limit: a real episode that ends scored 0 (action_limit)."""

    name = "clueless"

    def new_episode(self, task, seed):
        return self

    async def act(self, observation, feedback):
        return PolicyTurn(text=None, tool_calls=(ToolCall("search", '{"query": "zzqx"}', "c1"),),
                          finish_reason="tool_calls")


class _HalfClueless:
    """The heuristic on half the tasks, the clueless shopper on the other half (all-wrong groups)."""

    name = "half-clueless"

    def __init__(self) -> None:
        self.heuristic = make_policy("heuristic")

    def new_episode(self, task, seed):
        if unit_hash("clueless", task.task_id) < 0.5:
            return _Clueless()
        return self.heuristic.new_episode(task, seed)


class _Slow:
    def __init__(self, inner) -> None:
        self.inner = inner

    async def act(self, observation, feedback):
        await asyncio.sleep(0.5)  # holds its env lease mid-episode
        return await self.inner.act(observation, feedback)


class _SlowHalf:
    """The heuristic, slowed down on half the tasks: those episodes are surely in flight at the abort."""

    name = "slow-half"

    def __init__(self) -> None:
        self.heuristic = make_policy("heuristic")

    def new_episode(self, task, seed):
        episode = self.heuristic.new_episode(task, seed)
        return _Slow(episode) if unit_hash("slow", task.task_id) < 0.5 else episode


def _run_api(shop, tmp_path, knobs, *, policy, concurrency=32, steps=1, client=None, max_turns=4):
    async def main():
        env = client or InProcessEnvClient(shop)
        try:
            tasks = await env.list_tasks("train")
            config = RolloutConfig(knobs=knobs, steps=steps, out=tmp_path, name="api", episode_concurrency=concurrency)
            result = await run_rollout(config, agent_runner(env, policy, max_turns=max_turns), tasks)
            assert asyncio.all_tasks() == {asyncio.current_task()}  # nothing left pending
            return result
        finally:
            await env.aclose()

    return asyncio.run(main())


def test_abort_leaves_zero_leased_env_slots(shop, tmp_path):
    knobs = SamplingKnobs(rollout_batch_size=2, n_samples_per_prompt=4, over_sampling_batch_size=16,
                          global_batch_size=8)
    result = _run_api(shop, tmp_path, knobs, policy=_SlowHalf(), concurrency=64, steps=2,
                      max_turns=30)
    assert all(r.aborted for r in result.reports)  # episodes were in flight when the steps ended
    counters = shop.counters()
    assert counters["leased"] == 0 and counters["free_slots"] == counters["slots"]


def test_real_all_wrong_groups_dropped_as_zero_std_are_triaged_and_queued(shop, tmp_path):
    knobs = SamplingKnobs(rollout_batch_size=4, n_samples_per_prompt=4, over_sampling_batch_size=16,
                          global_batch_size=16)
    result = _run_api(shop, tmp_path, knobs, policy=_HalfClueless())
    report = result.reports[0]
    dropped = report.dropped[REASON_ZERO_STD]
    assert dropped
    queue = {q["group_index"]: q for q in read_jsonl(tmp_path / "api" / "failure_queue.jsonl")}
    for index in dropped:
        triage = read_json(tmp_path / "api" / "step-1" / "triage" / f"g{index:04d}.json")
        if _never_succeeded(triage):
            assert triage["classification"] in ("all_wrong", "same_partial")  # zero-std, no success
            assert index in queue
            assert all(Path(p).is_file() for p in queue[index]["trace_paths"])
    assert any(_never_succeeded(read_json(tmp_path / "api" / "step-1" / "triage" / f"g{i:04d}.json")) for i in dropped)


def test_fault_injection_yields_technical_drops(tmp_path, cli_cache, capsys):
    code = cli.main([*SMALL_ARGS, "--steps", "2", "--fault-rate", "0.03", "--max-consecutive-failed-groups", "100",
                     "--out", str(tmp_path), "--name", "faults"])
    assert code == 0, capsys.readouterr().err
    run = tmp_path / "faults"
    drops = sum(read_json(run / f"step-{k}" / "metrics.json")["rollout/shopsim/technical_group_drop_count"]
                for k in (1, 2))
    assert drops > 0
    technical = [read_json(p) for k in (1, 2) for p in (run / f"step-{k}" / "triage").iterdir()]
    technical = [t for t in technical if t["classification"] == "technical"]
    assert technical
    errors = [s["error"] for t in technical for s in t["siblings"] if s["error"]]
    assert errors and all(e.get("code") == "injected_fault" for e in errors)
    for k in (1, 2):
        check_step_outputs(run / f"step-{k}", SamplingKnobs(4, 4, 8, 8, 100))


def test_high_fault_rate_stops_the_run_with_exit_3_naming_the_trace_folder(tmp_path, cli_cache, capsys):
    code = cli.main([*SMALL_ARGS, "--steps", "3", "--fault-rate", "0.9", "--max-consecutive-failed-groups", "4",
                     "--out", str(tmp_path), "--name", "stop"])
    err = capsys.readouterr().err
    assert code == 3
    traces = tmp_path / "stop" / "step-1" / "traces"
    assert "4 technical groups in a row" in err
    assert str(traces) in err
    assert traces.is_dir() and any(traces.iterdir())
    assert load_events(tmp_path / "stop" / "step-1")[-2]["event"] == "stopped"


def test_a_step_through_the_http_env_server(shop, tmp_path, capsys):
    with ServerThread(shop) as server:
        code = cli.main([*SMALL_ARGS, "--env", server.url, "--episode-concurrency", "16",
                         "--out", str(tmp_path), "--name", "http"])
        assert code == 0, capsys.readouterr().err
    check_step_outputs(tmp_path / "http" / "step-1", SamplingKnobs(4, 4, 8, 8))
    assert read_json(tmp_path / "http" / "run.json")["env"] == server.url
    assert shop.counters()["leased"] == 0


def test_wandb_offline_logs_every_step(tmp_path, cli_cache, capsys):
    code = cli.main([*SMALL_ARGS, "--steps", "2", "--wandb", "--wandb-mode", "offline", "--wandb-project", "t",
                     "--out", str(tmp_path), "--name", "wb"])
    assert code == 0, capsys.readouterr().err
    runs = list((tmp_path / "wb" / "wandb" / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    assert list(runs[0].glob("*.wandb"))


def test_episode_concurrency_is_capped_to_the_env_servers_slots(shop_cache, tmp_path, capsys):
    with ShopSimEnv(build_catalog(PRODUCTS, CATALOG_SEED, shop_cache), slots=3) as small, ServerThread(small) as server:
        code = cli.main([*SMALL_ARGS, "--env", server.url, "--episode-concurrency", "16",
                         "--out", str(tmp_path), "--name", "capped"])
        err = capsys.readouterr().err
        assert code == 0, err
        assert "has 3 free slots of 3: running at most 3 episodes at once" in err
        assert small.counters()["leased"] == 0


def test_concurrency_follows_the_free_slots_when_another_client_holds_some(shop_cache, tmp_path, capsys):
    with ShopSimEnv(build_catalog(PRODUCTS, CATALOG_SEED, shop_cache), slots=5) as small, ServerThread(small) as server:
        other = [small.reset(small.list_tasks("train")[i]).lease_id for i in range(3)]  # another client's episodes
        code = cli.main([*SMALL_ARGS, "--env", server.url, "--episode-concurrency", "16",
                         "--out", str(tmp_path), "--name", "shared"])
        err = capsys.readouterr().err
        assert code == 0, err
        assert "has 2 free slots of 5 (3 are leased by other clients): running at most 2 episodes" in err
        assert read_json(tmp_path / "shared" / "run.json")["episode_concurrency"] == 2
        assert small.counters()["leased"] == 3  # ours all released, the other client's untouched
        for lease in other:
            small.release(lease)
        others = [small.reset(small.list_tasks("train")[i]).lease_id for i in range(5)]
        code = cli.main([*SMALL_ARGS, "--env", server.url, "--out", str(tmp_path), "--name", "full"])
        assert code == 2 and "all 5 slots of the env server" in capsys.readouterr().err
        assert not (tmp_path / "full").exists()
        for lease in others:
            small.release(lease)


def test_an_unreachable_env_server_is_refused_before_any_work(tmp_path, capsys):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # nothing listens there once the socket closes
    code = cli.main([*SMALL_ARGS, "--env", f"http://127.0.0.1:{port}", "--out", str(tmp_path), "--name", "gone"])
    assert code == 2
    assert "does not answer /healthz" in capsys.readouterr().err
    assert not (tmp_path / "gone").exists()
