"""The Ray helper on a local Ray instance: env servers as actors, their URL list, the ray-serve command.

Ray is the optional ``shopsimrl[ray]`` extra; these tests are skipped only when it is not installed
(`make venv` installs it, so `make test` runs them).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from catalogs import SMALL_PRODUCTS, SMALL_SEED

ray = pytest.importorskip("ray", reason="the Ray helper needs the optional extra: pip install 'shopsimrl[ray]'")

from shopsimrl.env.pool import EnvPool  # noqa: E402
from shopsimrl.env.ray_servers import start_ray_env_servers  # noqa: E402

pytestmark = pytest.mark.slow  # two local Ray instances: with -n this file starts first


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_ray_serve_prints_the_urls_and_stops_on_sigterm(catalog_cache: Path, small_catalog: Path,
                                                        tmp_path: Path) -> None:
    urls_file = tmp_path / "env_urls.txt"
    cmd = [sys.executable, "-m", "shopsimrl.cli", "env", "ray-serve", "--address", "local", "--per-node", "2",
           "--host", "127.0.0.1", "--port", "0", "--slots", "4", "--products", str(SMALL_PRODUCTS), "--seed",
           str(SMALL_SEED), "--cache-dir", str(catalog_cache), "--urls-file", str(urls_file)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while not urls_file.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "ray-serve did not write its URL file"
            time.sleep(0.2)
        urls = urls_file.read_text().strip().split(",")
        assert len(urls) == 2 and len(set(urls)) == 2  # one local node, two servers on it
        assert all(url.startswith("http://127.0.0.1:") and _answers(url) for url in urls)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert f"SHOPSIM_ENV_URL={','.join(urls)}" in out and "stopping every env server" in err
        assert not any(_answers(url) for url in urls)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        yield
    finally:
        ray.shutdown()


async def test_servers_per_node_as_actors_serve_one_pool(local_ray: None, catalog_cache: Path,
                                                         small_catalog: Path) -> None:
    servers = start_ray_env_servers(2, port=0, host="127.0.0.1", slots=3, products=SMALL_PRODUCTS, seed=SMALL_SEED,
                                    cache_dir=str(catalog_cache), num_cpus=0.5)
    try:
        assert len(servers.urls) == 2 and len(set(servers.nodes)) == 1 and servers.env_url == ",".join(servers.urls)
        async with EnvPool(servers.env_url, refresh_interval=0.1) as pool:
            assert (await pool.healthz())["slots"] == 6
            task = (await pool.list_tasks("train"))[0]
            starts = [await pool.reset(task) for _ in range(2)]
            assert sorted(s["ours"] for s in pool.status()) == [1, 1]  # one episode on each actor's server
            for start in starts:
                result = await pool.step(start.lease_id, f"search[{start.task.instruction}]")
                assert result.observation.state["page"] == "results"
                await pool.release(start.lease_id)
    finally:
        servers.stop()
    assert not any(_answers(url) for url in servers.urls)


def test_a_non_loopback_bind_without_a_token_is_refused(local_ray: None) -> None:
    with pytest.raises(ValueError, match="--token-file"):
        start_ray_env_servers(1, host="0.0.0.0")
    with pytest.raises(ValueError, match="per_node"):
        start_ray_env_servers(0, host="127.0.0.1")
