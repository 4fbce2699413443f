"""The prompt page's skips on a real run of the ``informative`` selection: the prompts found skipped in a step
are exactly as many as the step's own count (``rollout/shopsim/selector/prompts_skipped``), and the page
names the steps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from view_runs import PRODUCTS

from shopsimrl.commands import rollout as cli
from shopsimrl.env.build import build_catalog
from shopsimrl.webview.app import create_app
from shopsimrl.webview.folder import Folder
from shopsimrl.webview.skips import skips

SKIPPED = "rollout/shopsim/selector/prompts_skipped"


@pytest.fixture(scope="module")
def informative(tmp_path_factory, catalog_cache) -> Path:
    """Six steps of 32 prompts over 160: the second epoch pass, where the rule skips, begins in step 6."""
    build_catalog(PRODUCTS, 0, catalog_cache)
    out = tmp_path_factory.mktemp("runs")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SHOPSIMRL_CACHE", str(catalog_cache))
        assert cli.main(["--products", str(PRODUCTS), "--view", "plain", "--no-timeline", "--selection", "skip",
                         "--n-samples-per-prompt", "4", "--global-batch-size", "32", "--steps", "6",
                         "--out", str(out), "--name", "inf"]) == 0
    return out


def test_the_prompts_found_skipped_are_the_steps_own_count(informative):
    folder = Folder(informative)
    run = folder.run("inf")
    ids = json.loads((run / "step-1" / "state.json").read_text())["prompt_source"]["evidence"]["prompt_ids"]
    found: dict[int, int] = {}
    for task in ids:
        rule, turns, notes = skips(folder, run, task)
        assert rule == "skip" and notes == []
        for turn in turns:
            found[turn.step] = found.get(turn.step, 0) + turn.skipped
    rows = {r["step"]: r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())}
    assert {step: int(row[SKIPPED]) for step, row in rows.items()} == {step: found.get(step, 0) for step in rows}
    assert sum(found.values()) > 0  # the run did skip (else the test would prove nothing)


def test_the_prompt_page_names_the_steps_it_was_skipped_in(informative):
    folder = Folder(informative)
    run = folder.run("inf")
    ids = json.loads((run / "step-1" / "state.json").read_text())["prompt_source"]["evidence"]["prompt_ids"]
    task, steps = next((t, [x.step for x in skips(folder, run, t)[1] if x.skipped]) for t in ids
                       if any(x.skipped for x in skips(folder, run, t)[1]))
    page = TestClient(create_app(informative)).get(f"/run/inf/prompt/{task}").text
    assert "skipped this prompt at its turn in step(s)" in page
    assert all(f'/run/inf/step/{k}">{k}</a>' in page for k in steps)
    never = next(t for t in ids if not any(x.skipped for x in skips(folder, run, t)[1]))
    assert "never skipped this prompt" in TestClient(create_app(informative)).get(f"/run/inf/prompt/{never}").text
