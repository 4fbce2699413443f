"""Our REAL generate hook inside slime's real ``generate_and_rm_group``: a scripted SGLang, a real env server, slime's ``abort()``.

``python -m shopsimrl.slime.harness.episodes SPEC.json`` (the parent, :func:`run_episodes`,
starts the env server and reads ``spec["out"]``).  slime's args come from its own parser
over our launcher's argv, as in the loop legs; the hook is ours, unchanged
(``--custom-generate-function-path shopsimrl.slime_runtime.generate``).  Two phases:

1. **whole episodes**: one group through slime's ``generate_and_rm_group`` on slime's own
   event-loop thread (``slime.utils.async_utils.run``); every sample must come back
   scored and rewarded, its loss mask and logprobs as long as its response;
2. **abort mid-episode**: groups submitted with slime's ``GenerateState.submit_generate_tasks``,
   whose second turn "decodes" until aborted (the first answers at once), more episodes
   than env slots (some wait at the hook's gate); once the second turns are running,
   slime's ``abort()``.  Then: no ``/generate`` reached SGLang after the abort, every
   sample is slime's ABORTED and unrewarded, no env lease is held.

After each phase, no task of ours may be left on slime's loop (a loop closed then would
destroy it pending); in phase 1 the abort watch polls once a minute, so a poller that
outlived the episodes is still there to be seen.
"""

from __future__ import annotations

import asyncio
import json
import os
import runpy
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from shopsimrl.agent.messages import DEFAULT_SYSTEM_PROMPT
from shopsimrl.defaults import HOOKS
from shopsimrl.io import atomic_write_text
from shopsimrl.slime.harness import workspace
from shopsimrl.slime.harness.children import Children, child_env, child_result, die_with_parent
from shopsimrl.slime.harness.leg import launcher_argv
from shopsimrl.slime.launch import TrainConfig

HOOK = HOOKS["--custom-generate-function-path"]


def _reply(tokenizer: Any) -> Any:
    from shopsimrl.slime.harness.world import _unit  # seeded, like the world

    def reply(body: dict[str, Any]) -> tuple[str, str]:
        turn = tokenizer.decode(body["input_ids"]).count("<|im_start|>assistant")
        query = ["red hiking boots", "wool socks", "rain jacket"][int(_unit("q", turn, len(body["input_ids"])) * 3)]
        return f'<tool_call>\n{json.dumps({"name": "search", "arguments": {"query": query}})}\n</tool_call>', "stop"

    return reply


def _second_turn_hangs(tokenizer: Any) -> Any:
    def delay(body: dict[str, Any]) -> float | None:
        return None if tokenizer.decode(body["input_ids"]).count("<|im_start|>assistant") >= 2 else 0.0

    return delay


async def _leftover_tasks() -> list[str]:
    me = asyncio.current_task()
    await asyncio.sleep(0)  # let anything just finished settle
    return sorted(repr(t.get_coro()) for t in asyncio.all_tasks() if t is not me and not t.done())


def run(spec: dict[str, Any]) -> dict[str, Any]:
    # the stand-ins belong in the child only, never in the check's own process
    from shopsimrl.slime.harness.double import stand_ins

    stand_ins.install(spec["slime_src"], Path(spec["out"]).parent / "stand_ins")
    # transformers once the stand-ins are in (it must not find the stand-in torch), and the scripted SGLang
    # loads fastapi: only in the child
    from transformers import AutoTokenizer

    from shopsimrl.slime.harness.scripted_sglang import ScriptedSGLang, serving

    config = TrainConfig.from_env(spec["env"])
    tokenizer = AutoTokenizer.from_pretrained(config.hf_checkpoint)
    result: dict[str, Any] = {"status": 1, "problems": []}
    problems: list[str] = result["problems"]
    server = ScriptedSGLang(tokenizer, _reply(tokenizer), delay=0.0, server_info={"enable_memory_saver": config.colocate})
    with serving(server):
        argv = launcher_argv(config, server.port, [*spec["extra"], "--custom-generate-function-path", HOOK])
        namespace: dict[str, Any] = {}
        sys.argv = ["train.py", *argv]
        namespace = runpy.run_path(str(Path(spec["slime_src"]) / "train.py"), run_name="slime_train")
        args = namespace["parse_args"]()
        # slime's own code: importable only once the stand-ins have put the checkout on sys.path
        from slime.rollout import sglang_rollout as slime_rollout
        from slime.utils.async_utils import run as slime_run
        from slime.utils.http_utils import init_http_client
        from slime.utils.types import Sample

        init_http_client(args)  # as slime's RolloutManager does before any rollout
        state = slime_rollout.GenerateState(args)
        n = int(args.n_samples_per_prompt)
        tasks = spec["task_ids"]
        counter = {"group": 0, "index": 0}

        def group(task_id: str) -> list[Any]:
            samples = []
            for _ in range(n):
                samples.append(Sample(prompt=task_id, metadata={"task_id": task_id}, group_index=counter["group"],
                                      index=counter["index"]))
                counter["index"] += 1
            counter["group"] += 1
            return samples

        # 1. whole episodes, the abort watch polling slowly: a poller outliving the episodes is then still there to
        # be seen (with the default 5 ms poll it would end on its own a few ms later, too soon to catch reliably)
        from shopsimrl.slime.abort import POLL_SECONDS
        from shopsimrl.slime.state import hook_state

        hook_state().abort_poll_seconds = 60.0
        started = time.perf_counter()
        done = slime_run(slime_rollout.generate_and_rm_group(args, group(tasks[0]), sampling_params=state.sampling_params.copy()))
        result["whole_seconds"] = time.perf_counter() - started
        for sample in done:
            if sample.status not in (Sample.Status.COMPLETED, Sample.Status.TRUNCATED):
                problems.append(f"whole episodes: sample {sample.index} came back {sample.status}")
            elif not (sample.metadata or {}).get("shopsim_scored") or sample.reward is None:
                problems.append(f"whole episodes: sample {sample.index} is not scored and rewarded")
            elif len(sample.loss_mask) != sample.response_length or len(sample.rollout_log_probs) != sample.response_length:
                problems.append(f"whole episodes: sample {sample.index}: loss mask / logprobs do not cover the response")
        left = slime_run(_leftover_tasks())
        if left:
            problems.append(f"whole episodes: {len(left)} task(s) left pending on slime's loop, e.g. {left[0]}")
        result["whole"] = [[s.index, str(s.status), s.reward, (s.metadata or {}).get("shopsim_end_reason")] for s in done]

        # 2. abort mid-episode
        server.delay = _second_turn_hangs(tokenizer)
        groups = [group(task_id) for task_id in tasks[1:1 + spec["abort_groups"]]]
        episodes = sum(len(g) for g in groups)
        running = min(episodes, int(spec["env_slots"]))

        async def submit_then_abort() -> dict[str, Any]:
            hook_state().abort_watch(args).poll_seconds = POLL_SECONDS  # slime's abort with the real poll
            state.submit_generate_tasks(groups)
            deadline = time.monotonic() + 60
            while server.running < running:
                if time.monotonic() > deadline:
                    return {"timeout": f"only {server.running} of {running} second turns running after 60 s"}
                await asyncio.sleep(0.01)
            calls_at_abort = server.generate_calls
            await asyncio.wait_for(slime_rollout.abort(args, rollout_id=0), timeout=60)
            return {"calls_at_abort": calls_at_abort, "calls_after": server.generate_calls}

        outcome = slime_run(submit_then_abort())
        state.reset()
        result["abort"] = outcome
        if "timeout" in outcome:
            problems.append(f"abort: {outcome['timeout']}")
        if server.generate_after_abort:
            problems.append(f"abort: {server.generate_after_abort} /generate request(s) reached SGLang after slime's abort")
        for sample in (s for g in groups for s in g):
            if sample.status is not Sample.Status.ABORTED or sample.reward is not None:
                problems.append(f"abort: sample {sample.index} came back {sample.status} with reward {sample.reward}")
                break
        left = slime_run(_leftover_tasks())
        if left:
            problems.append(f"abort: {len(left)} task(s) left pending on slime's loop, e.g. {left[0]}")
        result["status"] = 0
    return result


def main(argv: list[str] | None = None) -> None:
    die_with_parent()
    argv = sys.argv[1:] if argv is None else argv
    spec = json.loads(Path(argv[0]).read_text())
    try:
        result = run(spec)
    except BaseException as exc:  # reported to the parent as the check's mismatch
        result = {"status": 1, "problems": [f"failed: {''.join(traceback.format_exception(exc))[-2500:]}"]}
    atomic_write_text(Path(spec["out"]), json.dumps(result, default=str))
    sys.stdout.flush()
    os._exit(0)


def run_episodes(slime_src: Path, root: Path, env_slots: int = 4, abort_groups: int = 2, n: int = 4,
                 children: Children | None = None) -> dict[str, Any]:
    """Start a real env server on 127.0.0.1, run the two phases in a child process, stop the server (by its PID)."""
    children = children or Children()

    root.mkdir(parents=True, exist_ok=True)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-c", "import sys; from shopsimrl.cli import main; sys.exit(main())", "env", "serve", "--port", str(port), "--slots", str(env_slots),
         "--products", "200", "--cache-dir", str(root / "catalog")],
        stdout=open(root / "env.log", "wb"), stderr=subprocess.STDOUT)
    try:
        import httpx  # slow to load: only when the episodes check runs, never on `shopsimrl --help`

        deadline = time.monotonic() + 120
        while True:
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).json()
                if health.get("ready"):
                    break
            except httpx.HTTPError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                return {"status": 1, "problems": [f"the env server did not start: {(root / 'env.log').read_text()[-800:]}"]}
            time.sleep(0.2)
        task_ids = httpx.get(f"http://127.0.0.1:{port}/tasks", params={"split": "train"}, timeout=10).json()["task_ids"]
        hf = workspace.write_checkpoint_dir(root / "hf", [DEFAULT_SYSTEM_PROMPT, *task_ids[:8],
                                                          '<tool_call>\n{"name": "search", "arguments": {"query": "red hiking boots"}}\n</tool_call>'])
        spec = {
            "slime_src": str(slime_src), "out": str(root / "episodes.json"), "task_ids": task_ids[: 1 + abort_groups],
            "abort_groups": abort_groups, "env_slots": env_slots,
            "env": {"HF_CHECKPOINT": str(hf), "REF_LOAD": str(root / "ref"), "SAVE_DIR": str(root / "checkpoints"),
                    "RUN_DIR": str(root), "PROMPT_DATA": str(workspace.write_prompts(root / "train.jsonl", task_ids)),
                    "SHOPSIM_ENV_URL": f"http://127.0.0.1:{port}", "ENV_SLOTS": str(env_slots),
                    "N_SAMPLES_PER_PROMPT": str(n), "ROLLOUT_BATCH_SIZE": "2", "SHOPSIM_MAX_TURNS": "3",
                    "ROLLOUT_MAX_RESPONSE_LEN": "2000"},
            "extra": list(workspace.MODEL_ARGS),
        }
        (root / "spec.json").write_text(json.dumps(spec))
        out = root / "episodes.json"
        out.unlink(missing_ok=True)
        ended = children.run([sys.executable, "-m", "shopsimrl.slime.harness.episodes", str(root / "spec.json")],
                             root / "episodes.log", env=child_env(root))
        result = child_result(out, root / "episodes.log", ended, children.timeout)
        if result.get("status") is None:
            return {"status": 1, "problems": [result["error"][-1500:]]}
        leased = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).json().get("leased")
        result["env_leased_after"] = leased
        if leased:
            result["problems"].append(f"abort: the env server still has {leased} lease(s) held")
        return result
    finally:
        from shopsimrl.env.processes import stop_process  # loads httpx: only once a server was started

        stop_process(server)


if __name__ == "__main__":
    main()
