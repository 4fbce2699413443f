"""slime's abort with ShopSim's generate hook: time from ``abort()`` to an idle rollout, 256 episodes in flight.

One slime step's worth of episodes (32 groups x 8 = 256) runs through slime-shaped state
(the test double of ``GenerateState`` / ``generate_and_rm_group`` / ``abort()`` in
``shopsimrl/slime/harness/double/rollout.py``, each rule read from slime's source) against a scripted SGLang
server on 127.0.0.1 and the real ShopSim env in-process with 48 slots, so 48 episodes
hold a slot and 208 wait at the env-slot gate.  Then slime's ``abort()`` runs (it sets
``GenerateState.aborted``, posts ``/abort_request`` to every worker until ``/v1/loads``
reports none -- retrying every 3 s as slime does -- and waits for every group task).

- ``decoding``: every ``/generate`` decodes until it is aborted (the usual state at abort:
  long generations still running).
- ``turns``: each ``/generate`` answers after 100 ms, so episodes keep taking turns; the
  abort comes 1 s in.  Measured with the hook honouring the abort, and with it ignored
  (the hook before this change: every episode plays on to its end).

Reported: seconds from calling ``abort()`` until it returns (every group task done), and
after it the ``/generate`` requests sent since the abort began, env slots leased, and
SGLang requests still running -- all three must be 0.  Also: the blocking time of building
one ``httpx.AsyncClient``, which the hook once paid per episode.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import command_line, machine, publish

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "slime_abort.json"
GROUPS, N_SAMPLES, ENV_SLOTS = 32, 8, 48
PRODUCTS = 2_000
SEARCH = '<tool_call>\n{"name": "search", "arguments": {"query": "red hiking boots"}}\n</tool_call>'


def _test_kit() -> tuple[Any, Any]:
    """The slime double and the scripted SGLang (the ones the tests and ``shopsimrl slime check`` use)."""
    from shopsimrl.slime.harness import scripted_sglang
    from shopsimrl.slime.harness.double import rollout

    return rollout, scripted_sglang


async def _one_abort(kit: tuple[Any, Any], env: Any, tokenizer: Any, tokenizer_dir: Path, *, mode: str,
                     honour: bool, max_turns: int, trace_dir: Path) -> dict[str, float]:
    from shopsimrl.env import InProcessEnvClient
    from shopsimrl.slime.abort import never_aborted
    from shopsimrl.slime.state import hook_state, reset_hook_state

    slime_double, scripted = kit
    state = reset_hook_state()
    client = InProcessEnvClient(env, workers=4)
    state.env_client_factory = lambda args: client
    if not honour:
        state.abort_flag_factory = lambda args: never_aborted
    server = scripted.ScriptedSGLang(tokenizer, lambda body: (SEARCH, "stop"), delay=None if mode == "decoding" else 0.1)
    module = slime_double.install()
    try:
        with scripted.serving(server):
            port = server.port
            args = slime_double.slime_args(
                sglang_router_ip="127.0.0.1", sglang_router_port=port, hf_checkpoint=str(tokenizer_dir),
                shopsim_trace_dir=str(trace_dir), shopsim_env_slots=ENV_SLOTS, shopsim_max_turns=max_turns,
                sampling_params={"temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_new_tokens": 8192},
                apply_chat_template_kwargs={"enable_thinking": False})
            generate_state = module.GenerateState(args)
            sent: list[float] = []

            async def record(request: Any) -> None:
                sent.append(time.perf_counter())

            hook_state().sglang_client().event_hooks["request"].append(record)
            tasks = await client.list_tasks("train")
            samples = [[slime_double.Sample(group_index=g, index=g * N_SAMPLES + i, prompt=tasks[g % len(tasks)])
                        for i in range(N_SAMPLES)] for g in range(GROUPS)]
            generate_state.submit_generate_tasks(samples)
            deadline = time.monotonic() + 120
            while server.running < ENV_SLOTS:  # every slot is in a /generate
                if time.monotonic() > deadline:
                    raise RuntimeError(f"only {server.running} episodes reached SGLang")
                await asyncio.sleep(0.01)
            if mode == "turns":
                await asyncio.sleep(1.0)
            started = time.perf_counter()
            await module.abort(args, rollout_id=0, retry_seconds=3.0)
            seconds = time.perf_counter() - started
            figures = {
                "abort_to_idle_seconds": seconds,
                "generate_after_abort": sum(t >= started for t in sent),
                "leased_after": env.counters()["leased"],
                "sglang_running_after": server.running,
                "abort_request_rounds": server.abort_calls,
                "samples_aborted": sum(s.status is slime_double.Sample.Status.ABORTED for g in samples for s in g),
            }
            await hook_state().aclose_loop_clients()
            return figures
    finally:
        await client.aclose()
        for name in ("slime.rollout.sglang_rollout", "slime.rollout", "slime"):
            sys.modules.pop(name, None)


def bench_client_build(n: int = 30) -> dict[str, float]:
    """What one HTTP client per episode would cost: building an ``httpx.AsyncClient`` (blocking work)."""
    import httpx

    seconds = []
    for _ in range(n):
        start = time.perf_counter()
        httpx.AsyncClient(timeout=600.0)
        seconds.append(time.perf_counter() - start)
    return {"builds": n, "median_ms": statistics.median(seconds) * 1e3, "max_ms": max(seconds) * 1e3}


def _median(runs: list[dict[str, float]]) -> dict[str, Any]:
    keys = runs[0].keys()
    return {"runs": len(runs), **{k: statistics.median(r[k] for r in runs) for k in keys},
            "abort_to_idle_seconds_all": [round(r["abort_to_idle_seconds"], 4) for r in runs],
            "worst": {k: max(r[k] for r in runs) for k in keys if k != "abort_to_idle_seconds"}}


def main(quick: bool = False) -> dict[str, Any]:
    from transformers import AutoTokenizer

    from shopsimrl.agent.messages import DEFAULT_SYSTEM_PROMPT
    from shopsimrl.env import load_env
    from shopsimrl.slime.harness.workspace import write_tokenizer

    kit = _test_kit()
    repeats = 2 if quick else 5
    with tempfile.TemporaryDirectory() as tmp:
        template = (ROOT / "tests" / "data" / "chat_templates" / "Qwen-Qwen3-0.6B.jinja").read_text()
        tokenizer_dir = write_tokenizer(Path(tmp) / "tokenizer", [DEFAULT_SYSTEM_PROMPT, SEARCH], template)
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
        env = load_env(PRODUCTS, 7, Path(tmp) / "catalogs", slots=ENV_SLOTS)
        try:
            def run(mode: str, honour: bool, max_turns: int, i: int) -> dict[str, float]:
                return asyncio.run(_one_abort(kit, env, tokenizer, tokenizer_dir, mode=mode, honour=honour,
                                              max_turns=max_turns, trace_dir=Path(tmp) / f"traces-{mode}-{honour}-{i}"))

            decoding = [run("decoding", True, 30, i) for i in range(repeats)]
            turns = [run("turns", True, 30, i) for i in range(repeats)]
            # ignored: every episode plays on to its end; 30 turns of 100 ms for 256 episodes on 48 slots
            ignored = [run("turns", False, 8 if quick else 30, 0)]
        finally:
            env.close()
    results: dict[str, Any] = {
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "episodes_in_flight": GROUPS * N_SAMPLES,
        "env_slots": ENV_SLOTS,
        "decoding": _median(decoding),
        "turns": _median(turns),
        "turns_abort_ignored": _median(ignored),
        "http_client_build": bench_client_build(),
    }
    results["idle_after_abort"] = all(
        results[k]["worst"][f] == 0 for k in ("decoding", "turns")
        for f in ("generate_after_abort", "leased_after", "sglang_running_after"))
    publish(RESULTS, results)
    return results


if __name__ == "__main__":
    command_line(main, __doc__, "fewer repeats, shorter ignored-abort episodes")
