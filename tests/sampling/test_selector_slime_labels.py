"""slime prompts carry their cluster in a metadata key named by the custom config (``shopsim_cluster_key``)."""

from __future__ import annotations

import json
from types import SimpleNamespace

from shopsimrl.slime.data_source import SelectorDataSource


class Sample:  # the fields SelectorDataSource sets (slime's Sample has them too)
    def __init__(self, prompt, metadata):
        self.prompt, self.metadata = prompt, metadata
        self.group_index = self.index = None


def make_args(tmp_path, **extra):
    prompts = tmp_path / "train.jsonl"
    prompts.write_text("".join(
        json.dumps({"prompt": f"task-{i}", "metadata": {"task_id": f"task-{i}", "category": f"cat-{i % 5}"}}) + "\n"
        for i in range(40)))
    return SimpleNamespace(prompt_data=str(prompts), input_key="prompt", metadata_key="metadata",
                           n_samples_per_prompt=4, rollout_seed=0, save=str(tmp_path / "ckpt"),
                           load=str(tmp_path / "ckpt"), shopsim_selection="spread", **extra)


def test_the_named_metadata_key_labels_the_prompts_and_survives_a_checkpoint(tmp_path):
    source = SelectorDataSource(make_args(tmp_path, shopsim_cluster_key="category"), sample_cls=Sample)
    groups = source.get_samples(5)
    assert {g[0].metadata["category"] for g in groups} == {f"cat-{c}" for c in range(5)}  # one of each first
    assert source.selector.clusters_tried() == 5 and source.selector.cluster_coverage() == (0.125, 0.125)
    source.save(1)
    resumed = SelectorDataSource(make_args(tmp_path, shopsim_cluster_key="category"), sample_cls=Sample)
    resumed.load(1)
    assert resumed.selector.cluster_labels == source.selector.cluster_labels
    assert resumed.selector.cluster_coverage() == (0.125, 0.125)


def test_without_the_key_the_selector_has_no_clusters(tmp_path):
    source = SelectorDataSource(make_args(tmp_path), sample_cls=Sample)
    assert source.selector.cluster_coverage() is None
