"""slime's adaptive rollout function with staged siblings (R29): siblings through slime's per-sample
``generate_and_rm`` (the slime double's), whole groups to the trainer, early stops as zero-std drops in slime's
drop metrics."""

from __future__ import annotations

import pytest
from slime_hooks.test_rollout_fn import args, slime  # noqa: F401  (fixtures)

from shopsimrl.sampling.filter import REASON_ZERO_STD
from shopsimrl.sampling.staged import STAGED_PREFIX
from shopsimrl.slime.data_source import SelectorDataSource
from shopsimrl.slime.rollout_fn import generate_rollout


def test_r29_slime_staged_whole_groups_to_the_trainer_and_early_stops_counted(args, kit, slime, monkeypatch):  # noqa: F811
    per_sample = []
    real = slime.module.generate_and_rm

    async def generate_and_rm(_args, sample, sampling_params, evaluation=False):  # slime's, spied on
        per_sample.append(sample.session_id)
        return await real(_args, sample, sampling_params, evaluation=evaluation)

    monkeypatch.setattr(slime.module, "generate_and_rm", generate_and_rm)
    args.shopsim_siblings, args.shopsim_stage_size, args.rollout_batch_size = "staged", 2, 2
    source = SelectorDataSource(args, sample_cls=kit.Sample)
    stopped = saved = 0
    # which groups stop early follows the prediction, which follows the order the double's groups finish in (an
    # asyncio race): run at least 8 steps, and up to 32 until one group has stopped early
    for rollout_id in range(32):
        if rollout_id >= 8 and stopped:
            break
        out = generate_rollout(args, rollout_id, source)
        assert len(out.samples) == args.rollout_batch_size
        assert all(len(g) == args.n_samples_per_prompt for g in out.samples), "the trainer gets whole groups"
        assert all([s.index for s in g] == sorted(s.index for s in g) for g in out.samples)
        m = out.metrics
        stopped += m[STAGED_PREFIX + "groups_stopped_early"]
        saved += m[STAGED_PREFIX + "episodes_saved"]
        assert m[STAGED_PREFIX + "episodes_saved"] == 2 * m[STAGED_PREFIX + "groups_stopped_early"]
        # every early stop is one of slime's zero-std drops
        assert m.get(f"rollout/dynamic_filter/drop_{REASON_ZERO_STD}", 0) >= m[STAGED_PREFIX + "groups_stopped_early"]
        assert source.selector.in_flight == frozenset()
    assert per_sample and None not in per_sample, "staged siblings go through slime's per-sample generate_and_rm, " \
                                                  "a session id each"
    assert stopped > 0 and saved == 2 * stopped


def test_r29_slime_staging_is_refused_with_a_group_reward_model(args, kit):  # noqa: F811
    args.shopsim_siblings, args.group_rm = "staged", True
    with pytest.raises(ValueError, match="group-rm"):
        generate_rollout(args, 0, SelectorDataSource(args, sample_cls=kit.Sample))


def test_r29_slime_default_writes_no_staging_figures(args, kit):  # noqa: F811
    out = generate_rollout(args, 0, SelectorDataSource(args, sample_cls=kit.Sample))
    assert not [k for k in out.metrics if k.startswith(STAGED_PREFIX)]
