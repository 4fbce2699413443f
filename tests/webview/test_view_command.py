"""``shopsimrl view`` as a real process on 127.0.0.1: it prints its URL, serves the pages over HTTP, refuses
raw traversal paths, warns before listening beyond loopback, and refuses a folder that is not there."""

from __future__ import annotations

import http.client
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from view_runs import make_run, view_server

pytestmark = pytest.mark.slow  # real view servers: with -n this file starts first


@pytest.fixture(scope="module")
def runs(tmp_path_factory, catalog_cache) -> Path:
    out = tmp_path_factory.mktemp("runs")
    make_run(out, catalog_cache)
    return out


def raw_get(url: str, path: str) -> tuple[int, str]:
    """GET ``path`` exactly as written (no client normalizing ``..`` away)."""
    where = urlsplit(url)
    connection = http.client.HTTPConnection(where.hostname, where.port, timeout=30)
    try:
        connection.putrequest("GET", path, skip_accept_encoding=True)
        connection.endheaders()
        answer = connection.getresponse()
        return answer.status, answer.read().decode()
    finally:
        connection.close()


def test_it_serves_every_page_kind_on_loopback_and_stops_on_ctrl_c(runs):
    with view_server(runs) as (url, process):
        assert url.startswith("http://127.0.0.1:")
        for path in ("", "run/real", "api/charts?run=real", "run/real/step/1", "run/real/step/1/episode/0/0",
                     "static/plotly.min.js", "static/view.js"):
            assert httpx.get(url + path, timeout=30).status_code == 200, path
        assert "plotly" in httpx.get(url + "static/plotly.min.js", timeout=30).text[:2000].lower()
    assert process.returncode == 0


@pytest.mark.parametrize("path", ["/run/../../../../etc/passwd", "/static/../../../../etc/passwd",
                                  "/run/real/step/1/../../../../../etc/passwd", "/run/real/../../etc/passwd",
                                  "/static/%2e%2e/%2e%2e/%2e%2e/etc/passwd", "//etc/passwd", "/run/real%00/step/1"])
def test_raw_traversal_paths_get_nothing_outside(runs, path):
    with view_server(runs) as (url, _):
        status, body = raw_get(url, path)
    assert status in (400, 404) and "root:" not in body


def test_listening_beyond_loopback_is_warned_before_the_port_is_taken():
    """192.0.2.1 (TEST-NET-1) is no address of this machine: the warning, then the refusal to listen."""
    done = subprocess.run([sys.executable, "-m", "shopsimrl.cli", "view", ".", "--host", "192.0.2.1", "--port", "0"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    warning, refusal = done.stderr.splitlines()
    assert warning.startswith("shopsimrl view: WARNING: --host 192.0.2.1: anyone who can reach this address")
    assert refusal.startswith("shopsimrl view: refused: cannot listen on 192.0.2.1")


def test_a_folder_that_is_not_there_is_refused_in_one_line(tmp_path):
    done = subprocess.run([sys.executable, "-m", "shopsimrl.cli", "view", str(tmp_path / "nowhere")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "does not exist" in done.stderr
