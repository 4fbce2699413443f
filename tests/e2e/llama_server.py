"""Start the cached ``llama-server`` on 127.0.0.1 with the e2e model, and stop it by its PID.

Shared by the e2e tests (``conftest.py``) and the measurement script (``measure.py``).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
from e2e.llama_build import BuildFailed, build, chat_template, server_binary, wait_healthy
from e2e.model_file import ModelMissing, model_path
from local_processes import free_port

from shopsimrl.env.processes import stop_process

CONTEXT = 8192  # per slot
SLOTS = 2


class ServerUnavailable(RuntimeError):
    """The model is not installed, or the server did not come up (the message says why)."""


@dataclass(frozen=True)
class LlamaServer:
    url: str
    pid: int
    model: Path
    template: Path
    threads: int




@contextmanager
def running_server(log: Path, *, slots: int = SLOTS, context: int = CONTEXT) -> Iterator[LlamaServer]:
    try:
        entry = build()
        model = model_path()
    except (BuildFailed, ModelMissing) as exc:
        raise ServerUnavailable(str(exc)) from exc
    port = free_port()
    threads = max(1, (os.cpu_count() or 2) - 1)  # leave a core to the env, the driver and the adapter
    command = [str(server_binary(entry)), "-m", str(model), "--jinja", "--chat-template-file", str(chat_template(entry)),
               "--host", "127.0.0.1", "--port", str(port), "-c", str(context * slots), "-np", str(slots),
               "-t", str(threads), "--metrics"]
    with log.open("wb") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        try:
            code = wait_healthy(process, url, 180, interval=0.5)
        except TimeoutError:
            raise ServerUnavailable(f"llama-server did not become healthy in 180 s; log: {log}") from None
        if code is not None:
            raise ServerUnavailable(f"llama-server exited with {code}; log: {log}")
        yield LlamaServer(url=url, pid=process.pid, model=model, template=chat_template(entry), threads=threads)
    finally:
        stop_process(process, timeout=15)


def server_metrics(url: str) -> dict[str, float]:
    """llama-server's Prometheus counters (``--metrics``), by name without the ``llamacpp:`` prefix."""
    values = {}
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            values[name.removeprefix("llamacpp:")] = float(value)
    return values
