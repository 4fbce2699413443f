"""Fixtures for the slime adapter tests: a slime-shaped Sample, args, and a clean hook state.

``SlimeSample`` is the double of slime's ``Sample`` (``shopsimrl/slime/harness/double/rollout.py``): slime's
field names (``slime/utils/types.py``) and its nested ``Status`` enum, so the hooks treat it
exactly as slime's own class.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from shopsimrl.slime.harness.double.rollout import Sample as SlimeSample
from shopsimrl.slime.state import reset_hook_state


def scored(group_index: int, index: int, reward: float, *, success: float | None = None, rollout_id: Any = None) -> SlimeSample:
    success = reward if success is None else success
    return SlimeSample(
        group_index=group_index,
        index=index,
        rollout_id=rollout_id,
        reward={"reward": reward, "r_strict": reward, "r_success": success},
        metadata={"shopsim_scored": True},
        status=SlimeSample.Status.COMPLETED,
    )


def unscored(group_index: int, index: int) -> SlimeSample:
    return SlimeSample(
        group_index=group_index,
        index=index,
        reward={"reward": 0.0},
        metadata={"shopsim_scored": False},
        remove_sample=True,
        status=SlimeSample.Status.ABORTED,
    )


def slime_args(**overrides: Any) -> SimpleNamespace:
    base = dict(
        reward_key="reward",
        shopsim_max_consecutive_failed_groups=8,
        shopsim_trace_dir="/tmp/shopsim-traces",
        advantage_estimator="grpo",
        rewards_normalization=True,
        grpo_std_normalization=True,
        n_samples_per_prompt=4,
        partial_rollout=False,
        group_rm=False,
    )
    base.update(overrides)
    return SimpleNamespace(**base)


@pytest.fixture(autouse=True)
def fresh_hook_state():
    """Every test starts with no streak, no recorded groups, no cached classes."""
    yield reset_hook_state()
    reset_hook_state()


@pytest.fixture
def kit() -> SimpleNamespace:
    """The helpers above (conftest modules cannot be imported in importlib mode)."""
    return SimpleNamespace(Sample=SlimeSample, scored=scored, unscored=unscored, args=slime_args)
