"""The agent tests use the session catalogs of ``tests/conftest.py`` (``small_catalog``, ``default_catalog``).

``server``: the scripted OpenAI-compatible server (``openai_fake.py``) on 127.0.0.1, one per test module.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from agent.openai_fake import ScriptedServer, scripted_server


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedServer]:
    with scripted_server() as scripted:
        yield scripted
