"""Fixtures for the slime adapter tests: a slime-shaped Sample, args, a clean hook state, the test tokenizer.

``SlimeSample`` is the double of slime's ``Sample`` (``shopsimrl/slime/harness/double/rollout.py``): slime's
field names (``slime/utils/types.py``) and its nested ``Status`` enum, so the hooks treat it
exactly as slime's own class.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from agent.fakes import TASK, FakeEnv, observation
from slime_hooks.model_text import WINNING

from shopsimrl.agent.messages import DEFAULT_SYSTEM_PROMPT
from shopsimrl.slime.harness.double.rollout import Sample as SlimeSample
from shopsimrl.slime.harness.workspace import PLAIN_CHAT_TEMPLATE, write_tokenizer
from shopsimrl.slime.state import hook_state, reset_hook_state

#: What the test tokenizer is trained on: the fake shop's task, pages and winning replies, the hook's system prompt.
CORPUS = [DEFAULT_SYSTEM_PROMPT, TASK.instruction, "thinking out loud", *WINNING,
          *(observation(page).text for page in ("search", "results", "item"))]


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


def scored_group(group: list[SlimeSample], rewards: list[float], task_id: str) -> list[SlimeSample]:
    """A drawn group's samples back, scored with ``rewards``, each naming its task (as the generate hook leaves them)."""
    out = []
    for sample, reward in zip(group, rewards):
        done = scored(sample.group_index, sample.index, reward, rollout_id=sample.index)
        done.metadata.update(task_id=task_id)
        done.prompt = task_id
        out.append(done)
    return out


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


@pytest.fixture
def env() -> FakeEnv:
    """The fake shop, which the generate hook's env client factory hands out."""
    shop = FakeEnv()
    hook_state().env_client_factory = lambda args: shop
    return shop


@pytest.fixture(autouse=True)
def fresh_hook_state():
    """Every test starts with no streak, no recorded groups, no cached classes."""
    yield reset_hook_state()
    reset_hook_state()


@pytest.fixture(scope="module")
def tokenizer_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A saved test tokenizer (what ``args.hf_checkpoint`` names), one per test module, with the module's
    ``CHAT_TEMPLATE`` (a plain one when it has none)."""
    template = getattr(request.module, "CHAT_TEMPLATE", PLAIN_CHAT_TEMPLATE)
    return write_tokenizer(tmp_path_factory.mktemp("tokenizer"), CORPUS, template)


@pytest.fixture(scope="module")
def tokenizer(tokenizer_dir: Any) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tokenizer_dir)


@pytest.fixture
def kit() -> SimpleNamespace:
    """The helpers above (conftest modules cannot be imported in importlib mode)."""
    return SimpleNamespace(Sample=SlimeSample, scored=scored, scored_group=scored_group, unscored=unscored,
                           args=slime_args)
