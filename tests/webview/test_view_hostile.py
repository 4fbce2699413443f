"""Hostile and damaged run folders, the ones ``compare``'s and ``--resume``'s tests build: every page of the
viewer answers with the run's page or a one-line error page, never a traceback (a 500) and never a hang."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from learn.test_compare import HOSTILE, OK_ROW, _rows
from learn.test_tampered_runs import REBUILT, REFUSED
from view_runs import make_run

from shopsimrl.webview.app import create_app

pytestmark = pytest.mark.slow  # 138 tampered run folders, each served: with -n this file starts first

PAGES = ("/", "/runs/table", "/run/{name}", "/api/charts?run={name}", "/run/{name}/step/1", "/run/{name}/step/2",
         "/run/{name}/step/3", "/run/{name}/step/1/episode/0/0", "/run/{name}/step/3/episode/0/0",
         "/run/{name}/prompt/train-00001", "/run/{name}/step/1/timeline.png")
SECONDS = 5.0  # a page of a small damaged run; a hang would be far longer


@pytest.fixture(scope="module")
def real(tmp_path_factory, catalog_cache) -> Path:
    return make_run(tmp_path_factory.mktemp("runs"), catalog_cache)


def answers(folder: Path, name: str) -> None:
    web = TestClient(create_app(folder), raise_server_exceptions=False)
    for page in PAGES:
        started = time.monotonic()
        got = web.get(page.format(name=name))
        assert time.monotonic() - started < SECONDS, page
        assert got.status_code in (200, 404, 422), (page, got.status_code, got.text[-600:])
        assert "Traceback" not in got.text and "the viewer failed" not in got.text, page
        if got.status_code != 200:
            assert got.text.count('class="error"') == 1, page


@pytest.mark.parametrize("case", [c[0] for c in REFUSED] + [c[0] for c in REBUILT])
def test_a_tampered_run_folder_gets_its_page_or_an_error_page(real, tmp_path, case):
    tamper = {c[0]: c[1] for c in [*REFUSED, *REBUILT]}[case]
    root = tmp_path / "runs" / "real"
    shutil.copytree(real, root, symlinks=True)
    tamper(root)
    answers(tmp_path / "runs", "real")


@pytest.mark.parametrize("case", HOSTILE)
def test_a_hostile_metrics_or_run_json_gets_its_page_or_an_error_page(tmp_path, case):
    root = _rows(tmp_path / "runs" / "hostile", [OK_ROW])
    HOSTILE[case](root)
    answers(tmp_path / "runs", "hostile")


def test_a_run_whose_files_cannot_be_read_is_named_on_the_runs_page_with_why(real, tmp_path):
    root = tmp_path / "runs" / "real"
    shutil.copytree(real, root, symlinks=True)
    (root / "run.json").write_text("[1, 2]")
    page = TestClient(create_app(tmp_path / "runs")).get("/").text
    assert '<span class="badge unreadable">unreadable</span>' in page and "holds no JSON object" in page
