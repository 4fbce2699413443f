"""Each kind of ``shopsimrl view`` page in a real browser (Debian's headless Chromium) on a real run: no console
error, no failed load, and the key elements there (charts drawn, the group table's rows, an episode's turns).

``make browser`` runs it (installing chromium when missing); screenshots go to ``$SHOPSIMRL_SCREENSHOTS``
(``make browser SCREENSHOTS=docs/view`` refreshes the docs' pictures), else to a temporary folder.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from browser.cdp import Browser
from view_runs import make_run, view_server

from shopsimrl.rollout.outputs import prepare_run_dir
from shopsimrl.webview.folder import Folder
from shopsimrl.webview.groups import step_groups


@pytest.fixture(scope="module")
def runs(tmp_path_factory, catalog_cache) -> Path:
    out = tmp_path_factory.mktemp("runs")
    make_run(out, catalog_cache, "real")
    return out


@pytest.fixture(scope="module")
def server(runs) -> Iterator[str]:
    with view_server(runs) as (url, _):
        yield url


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    chrome = Browser()
    try:
        yield chrome
    finally:
        chrome.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    return Path(os.environ.get("SHOPSIMRL_SCREENSHOTS") or tmp_path_factory.mktemp("screenshots"))


def visit(browser: Browser, url: str, ready: str, shot: Path) -> None:
    browser.load(url)
    browser.wait_for(ready)
    browser.screenshot(shot)
    assert browser.errors() == []
    assert shot.stat().st_size > 10_000


def test_the_runs_page(browser, server, shots):
    visit(browser, server, "document.querySelectorAll('table.runs tbody tr').length === 1", shots / "runs.png")
    assert browser.value("document.querySelector('.badge.finished') !== null")


def test_the_run_page_draws_its_charts(browser, server, shots):
    visit(browser, server + "run/real", "Number(document.getElementById('charts').dataset.drawn || 0) >= 6",
          shots / "run.png")
    assert browser.value("document.querySelectorAll('#charts .js-plotly-plot').length") >= 6
    assert browser.value("document.querySelectorAll('#chart-held-out .scatterlayer .trace').length") >= 1


def test_the_step_page_lists_every_group_and_filters_them(browser, server, runs, shots):
    folder = Folder(runs)
    groups = step_groups(folder, folder.run("real"), 1)[0]
    visit(browser, server + "run/real/step/1", "document.getElementById('timeline').dataset.drawn", shots / "step.png")
    assert browser.value("document.querySelectorAll('#groups tbody tr').length") == len(groups)
    kept = sum(g.verdict == "kept" for g in groups)
    browser.value("const s = document.getElementById('f-verdict'); s.value = 'kept';"
                  "s.dispatchEvent(new Event('input')); true")
    assert browser.value("document.querySelectorAll('#groups tbody tr:not([hidden])').length") == kept
    assert browser.value("document.getElementById('group-count').textContent") == str(kept)


def test_the_episode_page_shows_its_turns_and_a_technical_failure(browser, server, runs, shots):
    folder = Folder(runs)
    group = next(g for g in step_groups(folder, folder.run("real"), 1)[0] if g.verdict == "technical")
    failed = group.rewards.index(None)
    visit(browser, server + f"run/real/step/1/episode/{group.index}/{failed}",
          "document.getElementById('outcome') !== null", shots / "episode-technical.png")
    assert browser.value("document.getElementById('technical') !== null")
    scored = group.rewards.index(next(r for r in group.rewards if r is not None))
    visit(browser, server + f"run/real/step/1/episode/{group.index}/{scored}",
          "document.querySelectorAll('#turns li.turn').length > 0", shots / "episode.png")
    assert browser.value("document.getElementById('technical') === null")
    assert browser.value("document.getElementById('instruction').textContent.length") > 10


def test_the_prompt_page_draws_its_outcomes(browser, server, runs, shots):
    folder = Folder(runs)
    tasks = [g.task_id for step in (1, 2, 3) for g in step_groups(folder, folder.run("real"), step)[0]]
    task = max(tasks, key=tasks.count)  # the prompt with the most groups
    visit(browser, server + f"run/real/prompt/{task}", "document.getElementById('prompt-chart').dataset.drawn",
          shots / "prompt.png")
    assert browser.value("document.querySelectorAll('#prompt-groups tbody tr').length") == tasks.count(task)


def test_an_error_page_is_a_page_too(browser, server, shots):
    browser.load(server + "run/real/step/99")
    assert browser.value("document.getElementById('error').textContent").startswith("step-99")


def test_a_running_run_updates_without_a_reload(browser, server, runs, shots):
    """A run holding its lock shows as running; when its last step lands and the lock is let go, the runs table
    and the run's charts follow within a refresh, in the same page (a value set on the page survives)."""
    live = runs / "live"
    shutil.copytree(runs / "real", live)
    shutil.rmtree(live / "step-3")
    rows = (live / "metrics.jsonl").read_text().splitlines()
    (live / "metrics.jsonl").write_text("\n".join(rows[:2]) + "\n")
    paths = prepare_run_dir(runs, "live", resume=True)  # holds the lock, as a running rollout does
    try:
        row = "document.querySelector('tr[data-run=\"live\"]')"
        visit(browser, server, f"{row} !== null && {row}.textContent.includes('running')", shots / "runs-live.png")
        browser.value("window.sameLoad = 'yes'")
        shutil.copytree(runs / "real" / "step-3", live / "step-3")
        (live / "metrics.jsonl").write_text("\n".join(rows) + "\n")
    finally:
        paths.unlock()
    browser.wait_for(f"{row}.textContent.includes('finished') && {row}.textContent.includes('3 / 3')", timeout=20)
    assert browser.value("window.sameLoad") == "yes" and browser.errors() == []
    assert json.loads((live / "metrics.jsonl").read_text().splitlines()[-1])["step"] == 3


def test_a_running_runs_charts_grow_without_a_reload(browser, server, runs):
    grow = runs / "grow"
    shutil.copytree(runs / "real", grow)
    rows = (grow / "metrics.jsonl").read_text().splitlines()
    (grow / "metrics.jsonl").write_text(rows[0] + "\n")
    paths = prepare_run_dir(runs, "grow", resume=True)
    try:
        points = "(document.querySelector('#chart-waves') || {data: [{x: []}]}).data[0].x.length"
        browser.load(server + "run/grow")
        browser.wait_for(f"{points} === 1")
        browser.value("window.sameLoad = 'yes'")
        (grow / "metrics.jsonl").write_text("\n".join(rows) + "\n")
        browser.wait_for(f"{points} === 3", timeout=20)
        assert browser.value("window.sameLoad") == "yes" and browser.errors() == []
    finally:
        paths.unlock()
