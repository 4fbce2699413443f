"""slime's own loader (``slime.utils.misc.load_function``, from ``SLIME_SRC``) loads every dotted path the launcher gives it.

The paths are the stable ones users hold (``shopsimrl.slime_runtime`` / ``shopsimrl.slime_metrics``, the filter's
since the seed); each must come back as the hook's implementation under ``shopsimrl/slime/``.  Run in a child
process: slime's module imports torch, which only the harness's stand-ins provide.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from shopsimrl.defaults import DATA_SOURCE_PATH, HOOKS, ROLLOUT_FUNCTION_PATH, SLIME_ORDER_DATA_SOURCE_PATH

LOAD = """
import json, sys
from shopsimrl.slime.harness.double import stand_ins
stand_ins.install(sys.argv[1], sys.argv[2])
from slime.utils import misc
loaded = {}
for path in json.loads(sys.argv[3]):
    hook = misc.load_function(path)
    home = sys.modules[hook.__module__]
    loaded[path] = [hook.__module__, hook.__qualname__, getattr(home, hook.__qualname__) is hook]
print(json.dumps({"loader": misc.__file__, "loaded": loaded}))
"""

#: the implementation each path must load
HOMES = {
    HOOKS["--dynamic-sampling-filter-path"]: "shopsimrl.slime.filter.fully_scored_group_filter",
    HOOKS["--custom-reward-post-process-path"]: "shopsimrl.slime.rewards.normalize_grpo_by_prompt_and_rollout",
    HOOKS["--custom-generate-function-path"]: "shopsimrl.slime.generate.generate",
    HOOKS["--rollout-all-samples-process-path"]: "shopsimrl.slime.metrics.record_generated_rollout_groups",
    HOOKS["--custom-rollout-log-function-path"]: "shopsimrl.slime.metrics.enrich_rollout_metrics",
    HOOKS["--custom-eval-rollout-log-function-path"]: "shopsimrl.slime.evaluation.drop_unscored_eval_episodes",
    HOOKS["--eval-function-path"]: "shopsimrl.slime.evaluation.eval_rollout",
    DATA_SOURCE_PATH: "shopsimrl.slime.data_source.SelectorDataSource",
    ROLLOUT_FUNCTION_PATH: "shopsimrl.slime.rollout_fn.generate_rollout",
    SLIME_ORDER_DATA_SOURCE_PATH: "shopsimrl.slime.data_source.slime_order_data_source",
}


def test_slimes_loader_loads_every_hook_path_as_its_implementation(slime_src, tmp_path):
    paths = [*HOOKS.values(), DATA_SOURCE_PATH, ROLLOUT_FUNCTION_PATH, SLIME_ORDER_DATA_SOURCE_PATH]
    assert set(paths) == set(HOMES)
    out = subprocess.run([sys.executable, "-c", LOAD, str(slime_src), str(tmp_path), json.dumps(paths)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert Path(result["loader"]).resolve().is_relative_to(slime_src)  # slime's real loader, not a stand-in
    for path in paths:
        module, qualname, found_at_home = result["loaded"][path]
        assert f"{module}.{qualname}" == HOMES[path], path
        assert found_at_home, path
