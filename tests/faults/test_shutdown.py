"""SIGTERM of an env server whose resets wait for a slot: the waits end at once (503), the server exits."""

from __future__ import annotations

import signal
import threading
import time

import httpx
from faults.processes import EnvServer, wait_for


def test_sigterm_ends_resets_waiting_for_a_slot_and_the_server_exits_at_once(servers, fault_cache):
    server = EnvServer(fault_cache, "--slots", "1").start()
    servers.append(server)
    task = httpx.get(server.url + "/tasks", timeout=5).json()["task_ids"][0]
    holder = httpx.post(server.url + "/reset", json={"task_id": task}, timeout=5)
    assert holder.status_code == 200  # the one slot is taken: the next reset waits
    replies: list[httpx.Response | Exception] = []

    def waiting_reset() -> None:
        try:
            replies.append(httpx.post(server.url + "/reset", json={"task_id": task, "timeout": 300}, timeout=60))
        except httpx.HTTPError as exc:
            replies.append(exc)

    waiter = threading.Thread(target=waiting_reset, daemon=True)
    waiter.start()
    time.sleep(1.0)  # the reset is in, waiting for the slot
    assert not replies
    sent = time.monotonic()
    server.signal(signal.SIGTERM)
    assert server.proc is not None
    server.proc.wait(timeout=30)  # was: until the reset's 300 s ran out
    took = time.monotonic() - sent
    assert took < 5, took
    waiter.join(timeout=10)
    reply = wait_for(lambda: replies, 5, "the waiting reset's reply")[0]
    assert isinstance(reply, httpx.Response), reply
    assert reply.status_code == 503 and reply.json()["error"]["code"] == "env_closed"
