"""``shopsimrl view``'s pages on a real run made by the main job: every kind of page answers, shows what the
run holds, and escapes what it shows; a damaged or hostile run folder is a one-line error on its own page."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from view_runs import make_run

from shopsimrl.webview.app import create_app
from shopsimrl.webview.folder import Folder
from shopsimrl.webview.groups import step_groups, verdict_of


@pytest.fixture(scope="module")
def real(tmp_path_factory, catalog_cache) -> Path:
    return make_run(tmp_path_factory.mktemp("runs"), catalog_cache)


@pytest.fixture
def runs(real, tmp_path) -> Path:
    """A folder of runs holding a copy of the real run (each test may damage its copy)."""
    shutil.copytree(real, tmp_path / "runs" / "real", symlinks=True)
    return tmp_path / "runs"


def client(folder: Path) -> TestClient:
    return TestClient(create_app(folder), raise_server_exceptions=False)


def rows(html: str, table_id: str) -> int:
    body = html.split(f'id="{table_id}"', 1)[1].split("</table>", 1)[0]
    return body.count("<tr") - 1  # the header's row


def test_the_runs_page_lists_the_run_with_its_state_steps_and_held_out_success(runs):
    page = client(runs).get("/")
    assert page.status_code == 200
    assert '<a href="/run/real">real</a>' in page.text
    assert '<span class="badge finished">finished</span>' in page.text and "3 / 3" in page.text
    last = [json.loads(line) for line in (runs / "real" / "metrics.jsonl").read_text().splitlines()][-1]
    assert f"{last['eval/shopsim/success_rate']:.3f}" in page.text


def test_the_run_page_has_every_chart_of_the_run_and_overlays_another(runs):
    shutil.copytree(runs / "real", runs / "other")
    web = client(runs)
    page = web.get("/run/real?with=other&with=nonexistent")
    assert page.status_code == 200 and "&#34;real&#34;, &#34;other&#34;" in page.text  # the runs drawn, escaped JSON
    data = web.get("/api/charts?run=real&run=other").json()
    assert data["errors"] == []
    charts = {c["id"]: c for c in data["charts"]}
    assert {"rates", "waves", "groups", "episodes", "concentration", "held-out"} <= charts.keys()
    names = [t["name"] for t in charts["groups"]["traces"]]
    assert "real: kept" in names and "other: aborted" in names
    held = charts["held-out"]["traces"][0]
    assert held["name"] == "real sampled" and held["x"][0] == 0  # the evaluation before training: 0 episodes


def test_modelled_figures_are_drawn_when_present_and_left_out_when_not(runs):
    web = client(runs)
    assert not [c for c in web.get("/api/charts?run=real").json()["charts"] if "modelled" in c["id"] or "time" in c["id"]]
    metrics = runs / "real" / "metrics.jsonl"
    rows_ = [json.loads(line) for line in metrics.read_text().splitlines()]
    metrics.write_text("".join(json.dumps(r | {"rollout/shopsim/modelled/step_seconds": 10.0 * r["step"]}) + "\n"
                               for r in rows_))
    charts = {c["id"]: c for c in web.get("/api/charts?run=real").json()["charts"]}
    assert charts["modelled"]["traces"][0]["y"] == [10.0, 20.0, 30.0]
    assert charts["held-out-time"]["traces"][0]["x"] == [0.0, 30.0, 60.0]  # trained steps 0, 2, 3: summed


def test_the_step_page_lists_every_group_with_its_verdict_rewards_prompt_and_weight(runs):
    folder = Folder(runs)
    groups, _, _ = step_groups(folder, folder.run("real"), 1)
    page = client(runs).get("/run/real/step/1")
    assert page.status_code == 200
    assert rows(page.text, "groups") == len(groups) and f'id="group-count">{len(groups)}<' in page.text
    for group in groups:
        assert f'data-verdict="{group.verdict}"' in page.text and f"/prompt/{group.task_id}" in page.text
    assert {g.verdict for g in groups} >= {"kept", "technical"}
    kept = next(g for g in groups if g.verdict == "kept")
    assert kept.weight == 1.0 and len(kept.rewards) == 4
    assert '<a class="unscored"' in page.text  # a technical failure's sibling: "error", not a reward
    assert client(runs).get("/run/real/step/1/timeline.png").content[:4] == b"\x89PNG"


def test_the_episode_page_shows_the_conversation_and_tells_a_technical_failure_from_a_model_mistake(runs):
    folder = Folder(runs)
    groups, _, _ = step_groups(folder, folder.run("real"), 1)
    technical = next(g for g in groups if g.verdict == "technical")
    failed = technical.rewards.index(None)
    web = client(runs)
    page = web.get(f"/run/real/step/1/episode/{technical.index}/{failed}")
    assert page.status_code == 200
    assert 'id="technical"' in page.text and "injected fault" in page.text and "Triage record" in page.text
    scored = technical.rewards.index(next(r for r in technical.rewards if r is not None))
    trace = runs / "real" / "step-1" / "traces" / f"g{technical.index:04d}-s{scored}.json"
    record = json.loads(trace.read_text())
    record["steps"][0]["protocol_error"] = {"code": "no_tool_call", "message": "reply <b>had</b> no tool call"}
    trace.write_text(json.dumps(record))
    page = web.get(f"/run/real/step/1/episode/{technical.index}/{scored}")
    assert 'id="technical"' not in page.text
    assert "model's mistake: reply &lt;b&gt;had&lt;/b&gt; no tool call" in page.text
    assert page.text.count('<li class="turn') == len(record["steps"])
    assert "Instruction" in page.text and "reward" in page.text


def test_the_prompt_page_lists_every_group_of_the_prompt_across_the_run(runs):
    folder = Folder(runs)
    seen: dict[str, int] = {}
    for step in (1, 2):
        for group in step_groups(folder, folder.run("real"), step)[0]:
            seen[group.task_id] = seen.get(group.task_id, 0) + 1
    task, count = max(seen.items(), key=lambda kv: kv[1])
    page = client(runs).get(f"/run/real/prompt/{task}")
    assert page.status_code == 200 and rows(page.text, "prompt-groups") == count


@pytest.mark.parametrize("path", [
    "/run/%2e%2e", "/run/%2e%2e/step/1", "/run/real/step/1/episode/0/0/../../../../../../etc/passwd",
    "/run/..%2f..%2fetc", "/static/..%2f..%2fapp.py", "/static/view.js%00", "/run/real/prompt/..%2f..%2frun.json",
    "/run/real/step/0", "/run/real/step/-1", "/run/real/step/99", "/run/real/step/1x", "/run/real/step/1/episode/99/0",
])
def test_paths_that_leave_the_folder_or_name_nothing_are_a_404_page(runs, path):
    page = client(runs).get(path)
    assert page.status_code == 404, page.text
    assert "Traceback" not in page.text and "root:" not in page.text


def test_a_symlink_leaving_the_folder_is_never_followed(runs, tmp_path):
    outside = tmp_path / "outside"
    shutil.copytree(runs / "real", outside)
    (outside / "step-1" / "traces" / "g0000-s0.json").write_text('{"task": {"instruction": "SECRET"}}')
    (runs / "linked").symlink_to(outside)
    step = runs / "real" / "step-2"
    shutil.rmtree(step)
    step.symlink_to(outside / "step-1")
    trace = runs / "real" / "step-1" / "traces" / "g0000-s1.json"
    trace.unlink()
    trace.symlink_to(outside / "step-1" / "traces" / "g0000-s0.json")
    web = client(runs)
    assert "linked" not in web.get("/").text
    for path in ("/run/linked", "/run/real/step/2", "/run/real/step/1/episode/0/1", "/run/real/step/2/episode/0/0"):
        page = web.get(path)
        assert page.status_code in (404, 422) and "SECRET" not in page.text, path
        assert any(why in page.text for why in ("symbolic link", "outside the served folder", "does not exist")), path


def test_every_string_from_a_run_is_escaped(runs):
    hostile = '<script>alert(1)</script>"\'&<img src=x onerror=alert(2)>'
    root = runs / "real"
    config = json.loads((root / "run.json").read_text())
    (root / "run.json").write_text(json.dumps(config | {"selection": hostile, "policy": hostile}))
    trace = root / "step-1" / "traces" / "g0000-s0.json"
    record = json.loads(trace.read_text())
    record["task"]["instruction"] = hostile
    record["steps"][0]["observation"] = hostile
    record["steps"][0]["output"]["text"] = hostile
    trace.write_text(json.dumps(record))
    web = client(runs)
    for path in ("/", "/run/real", "/run/real/step/1/episode/0/0"):
        page = web.get(path)
        assert page.status_code == 200
        assert "<script>alert" not in page.text and "<img src=x" not in page.text, path
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text, path


def test_a_running_run_is_told_by_its_held_lock(runs):
    from shopsimrl.rollout.outputs import prepare_run_dir

    shutil.copytree(runs / "real", runs / "live")
    shutil.rmtree(runs / "live" / "step-3")
    paths = prepare_run_dir(runs, "live", resume=True)  # holds the lock, as a running rollout does
    try:
        page = client(runs).get("/runs/table").text
        live = page.split('data-run="live"', 1)[1].split("</tr>", 1)[0]
        assert '<span class="badge running">running</span>' in live
    finally:
        paths.unlock()
    live = client(runs).get("/runs/table").text.split('data-run="live"', 1)[1].split("</tr>", 1)[0]
    assert '<span class="badge stopped">stopped</span>' in live and "2 / 3" in live


def test_the_only_methods_are_reads(runs):
    web = client(runs)
    for method in ("post", "put", "delete", "patch"):
        assert getattr(web, method)("/run/real").status_code == 405
    assert re.search(r"<h1>Cannot show this page</h1>", web.post("/").text)


def test_the_step_pages_verdicts_add_up_to_the_steps_own_counts(runs):
    """Each verdict's groups on a step page are as many as the step's metrics count (kept = accepted + fallback)."""
    folder = Folder(runs)
    rows_ = {r["step"]: r for r in map(json.loads, (runs / "real" / "metrics.jsonl").read_text().splitlines())}
    seen = set()
    for step, row in rows_.items():
        groups = step_groups(folder, folder.run("real"), step)[0]
        count = {v: sum(g.verdict == v for g in groups) for v in ("kept", "fallback", "zero-spread", "technical",
                                                                  "surplus", "aborted")}
        w = "rollout/shopsim/waste/"
        assert count["kept"] + count["fallback"] == row[w + "groups_kept"]
        assert count["fallback"] == row["rollout/shopsim/step/fallback_group_count"]
        assert count["zero-spread"] == row[w + "groups_dropped_zero_std"]
        assert count["technical"] == row[w + "groups_dropped_technical"]
        assert count["surplus"] == row[w + "groups_surplus"]
        assert count["aborted"] == row[w + "groups_aborted"]
        seen |= {v for v, n in count.items() if n}
    assert seen >= {"kept", "fallback", "zero-spread", "technical", "aborted"}  # the run shows them (else: no proof)


@pytest.mark.parametrize(("event", "verdict"), [
    ({"decision": "accepted", "verdict": "varied"}, "kept"),
    ({"decision": "fallback", "verdict": "zero_std"}, "fallback"),
    ({"decision": "surplus", "verdict": "varied"}, "surplus"),
    ({"decision": "dropped", "verdict": "zero_std"}, "zero-spread"),
    ({"decision": "dropped", "verdict": "technical"}, "technical"),
])
def test_each_decision_has_its_word(event, verdict):
    assert verdict_of(event) == verdict
