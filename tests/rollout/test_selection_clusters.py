"""The main job tells the prompt selector ShopSim's categories: per-cluster coverage in every step's metrics."""

from __future__ import annotations

import asyncio
import json

from shopsimrl.commands import rollout as cli
from shopsimrl.env.inprocess import InProcessEnvClient
from shopsimrl.rollout.clusters import task_categories
from shopsimrl.sampling.selection_metrics import SELECTOR_PREFIX


def test_task_categories_are_each_train_task_s_category(shop):
    async def read() -> tuple[list[str], dict[str, str]]:
        client = InProcessEnvClient(shop)
        try:
            ids = await client.list_tasks("train")
            return ids, await task_categories(client, ids)
        finally:
            await client.aclose()

    ids, categories = asyncio.run(read())
    assert set(categories) == set(ids)
    for task_id in ids[:20]:
        assert categories[task_id] == shop.get_task(task_id).goal["category"]
    assert len(set(categories.values())) > 1


def test_spread_adaptive_reports_coverage_per_category(tmp_path, cli_cache, capsys):
    code = cli.main(["--steps", "2", "--products", "2000", "--out", str(tmp_path), "--name", "clusters",
                     "--view", "plain", "--selection", "spread", "--waves", "adaptive", "--no-timeline"])
    out = capsys.readouterr().out
    assert code == 0, out
    run_dir = tmp_path / "clusters"
    config = json.loads((run_dir / "run.json").read_text())
    assert config["clusters"] > 1
    for k in (1, 2):
        metrics = json.loads((run_dir / f"step-{k}" / "metrics.json").read_text())
        low, mid = metrics[SELECTOR_PREFIX + "cluster_coverage_min"], metrics[SELECTOR_PREFIX + "cluster_coverage_median"]
        assert 0.0 < low <= mid <= 1.0  # every category tried from the first step (never-tried ones come first)
        assert metrics[SELECTOR_PREFIX + "clusters_tried"] == config["clusters"]
