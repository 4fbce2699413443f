"""Connections that never finish a request head (silent, or trickling half a header) are closed after 10 s."""

from __future__ import annotations

import socket
import time

import httpx
from faults.processes import EnvServer

from shopsimrl.env.request_limits import HEAD_TIMEOUT

SOCKETS = 200  # half silent, half with half a header: bounded, far below any fd limit


def _closed(conn: socket.socket) -> bool:
    """True once the server closed it (EOF or reset; the 408 reply before the close is read and skipped)."""
    try:
        while conn.recv(4096):
            pass
        return True  # recv returned b"": end of file
    except BlockingIOError:
        return False  # open, nothing to read
    except ConnectionError:
        return True


def test_silent_and_trickling_connections_are_closed_after_the_head_deadline(servers, fault_cache):
    server = EnvServer(fault_cache, "--slots", "8").start()
    servers.append(server)
    conns: list[socket.socket] = []
    try:
        for i in range(SOCKETS):
            conn = socket.create_connection(("127.0.0.1", server.port), timeout=5)
            if i % 2:
                conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Half: ")  # never finished
            conn.setblocking(False)
            conns.append(conn)
        opened = time.monotonic()
        assert httpx.get(server.url + "/healthz", timeout=5).status_code == 200  # serving meanwhile
        time.sleep(HEAD_TIMEOUT / 2)
        trickle = conns[1]
        trickle.setblocking(True)
        trickle.sendall(b"x")  # a byte now and then does not move the deadline
        trickle.setblocking(False)
        assert not any(_closed(c) for c in conns[:20])  # nothing closed before the deadline
        deadline = opened + HEAD_TIMEOUT + 10  # slack for a shared 2-core machine
        while time.monotonic() < deadline and not all(_closed(c) for c in conns):
            time.sleep(0.25)
        still_open = sum(not _closed(c) for c in conns)
        assert still_open == 0, f"{still_open} of {SOCKETS} connections still open {time.monotonic() - opened:.0f}s on"
        assert httpx.get(server.url + "/healthz", timeout=5).status_code == 200
    finally:
        for conn in conns:
            conn.close()
