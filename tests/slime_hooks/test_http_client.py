"""One SGLang HTTP client per process and event loop, shared by every episode, closed at shutdown."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading

import httpx
import pytest
from agent.fakes import TASK, FakeEnv

from shopsimrl.slime.harness.double.rollout import Sample, slime_args
from shopsimrl.slime.harness.scripted_sglang import ScriptedSGLang, serving
from shopsimrl.slime.state import hook_state
from shopsimrl.slime_runtime import generate


@pytest.fixture
def counted_clients(monkeypatch):
    built: list[httpx.AsyncClient] = []

    class Counted(httpx.AsyncClient):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            built.append(self)

    monkeypatch.setattr(httpx, "AsyncClient", Counted)
    return built


async def test_episodes_of_one_loop_share_one_client_and_another_loop_gets_its_own(tokenizer_dir, tmp_path, counted_clients):
    from transformers import AutoTokenizer

    shop = FakeEnv()
    hook_state().env_client_factory = lambda args: shop
    server = ScriptedSGLang(AutoTokenizer.from_pretrained(tokenizer_dir), lambda body: ("thinking out loud", "length"))
    with serving(server):
        args = slime_args(sglang_router_ip="127.0.0.1", sglang_router_port=server.port, hf_checkpoint=str(tokenizer_dir),
                          shopsim_trace_dir=str(tmp_path / "traces"))
        params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_new_tokens": 300}

        async def episodes(n: int) -> list[Sample]:
            return await asyncio.gather(*(generate(args, Sample(group_index=0, index=i, prompt=TASK.task_id), dict(params))
                                          for i in range(n)))

        samples = await episodes(6)
        assert server.generate_calls == 6 and all(s.metadata["shopsim_scored"] for s in samples)
        assert len(counted_clients) == 1  # six episodes, one client
        assert hook_state().sglang_client() is counted_clients[0]

        other: list[Sample] = []
        thread = threading.Thread(target=lambda: other.extend(asyncio.run(episodes(2))))  # slime's loop thread
        thread.start()
        thread.join(timeout=60)
        assert len(other) == 2 and len(counted_clients) == 2  # a second loop, a second client

        await hook_state().aclose_loop_clients()
        assert counted_clients[0].is_closed
        assert hook_state().sglang_client() is not counted_clients[0]  # a new one after closing


def test_clients_are_closed_at_interpreter_exit_on_slimes_loop_thread():
    """slime runs the rollout on a daemon thread's loop that is still running at exit (slime/utils/async_utils.py)."""
    code = textwrap.dedent(
        """
        import asyncio, atexit, threading
        from shopsimrl.slime.state import hook_state

        seen = {}
        # registered before the hook state's own handler, so it runs after it (atexit is LIFO)
        atexit.register(lambda: print("closed" if seen["client"].is_closed else "OPEN", flush=True))
        loop = asyncio.new_event_loop()
        threading.Thread(target=loop.run_forever, daemon=True).start()

        async def get():
            return hook_state().sglang_client()

        seen["client"] = asyncio.run_coroutine_threadsafe(get(), loop).result(10)
        print("built", flush=True)
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["built", "closed"]
