"""A token server refuses an unauthenticated request before reading its body: 400 bodies of 1 MiB, each
sent but for its last byte and held open, leave the server's memory flat (it grew 60 -> 364 MB when the
size limit, which reads the body, ran before the token check)."""

from __future__ import annotations

import secrets
import socket
import threading
import time
from pathlib import Path

import httpx
from faults.processes import EnvServer

BODIES = 400
BODY = b"x" * (1 << 20)


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_unauthenticated_bodies_are_never_read(servers, fault_cache, tmp_path):
    token = tmp_path / "env.token"
    token.write_text(secrets.token_urlsafe(32))
    token.chmod(0o600)
    server = EnvServer(fault_cache, "--slots", "8", "--token-file", str(token)).start()
    servers.append(server)
    assert server.proc is not None
    before = _rss_mb(server.proc.pid)
    head = (b"POST /step HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(BODY))
    conns: list[socket.socket] = []
    lock = threading.Lock()

    def send_one() -> None:
        conn = socket.create_connection(("127.0.0.1", server.port), timeout=20)
        with lock:
            conns.append(conn)
        try:
            conn.sendall(head + BODY[:-1])  # all but the last byte: a body reader would hold it all
        except OSError:  # refused and closed mid-body: what should happen
            pass

    threads = [threading.Thread(target=send_one) for _ in range(BODIES)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        time.sleep(1.0)  # let a body reader catch up with what is in the sockets
        grown = _rss_mb(server.proc.pid) - before
        assert grown < 50, f"RSS grew {grown:.0f} MB over {BODIES} unauthenticated 1 MiB bodies"
        assert httpx.get(server.url + "/healthz", timeout=5).status_code == 200
    finally:
        for conn in conns:
            conn.close()
