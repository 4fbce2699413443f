"""Importing shopsimrl must never import torch, ray, sglang, slime or transformers."""

import subprocess
import sys

import pytest

HEAVY = ("torch", "ray", "sglang", "slime", "transformers", "wandb", "matplotlib")


@pytest.mark.parametrize(
    "module",
    ["shopsimrl", "shopsimrl.sampling", "shopsimrl.cli", "shopsimrl.env", "shopsimrl.agent", "shopsimrl.rollout",
     "shopsimrl.slime_runtime", "shopsimrl.slime_metrics", "shopsimrl.env.pool", "shopsimrl.env.pool_health",
     "shopsimrl.env.ray_servers",
     "shopsimrl.env.auth", "shopsimrl.learn", "shopsimrl.learn.connect", "shopsimrl.commands.compare"],
)
def test_import_loads_no_heavy_dependency(module):
    code = f"import sys, {module}; print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", f"importing {module} loaded {out}"


def test_sampling_core_imports_no_io_or_asyncio_module_of_the_package():
    code = "import sys, shopsimrl.sampling; print(sorted(m for m in sys.modules if m.startswith('shopsimrl.') and not m.startswith('shopsimrl.sampling')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    # the exception root and the defaults: leaves of the standard library only
    assert out == "['shopsimrl.defaults', 'shopsimrl.errors']"


def test_the_rollout_imports_the_episode_record_but_not_the_agents_policies():
    code = ("import sys, shopsimrl.rollout; "
            "print(sorted(m for m in sys.modules if m.startswith('shopsimrl.agent')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "['shopsimrl.agent', 'shopsimrl.agent.result']"
