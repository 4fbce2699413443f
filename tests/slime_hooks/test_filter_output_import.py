"""The filter never returns a stand-in inside a slime process.

slime's ``call_dynamic_filter`` (``slime/rollout/filter_hub/base_types.py``) wraps any return
value that is not its own ``DynamicFilterOutput`` as ``DynamicFilterOutput(keep=<value>)``:
our stand-in object is truthy, so slime would keep every group, technical ones included.
So when slime is loaded but its class cannot be imported, the first filter call fails.
"""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass

import pytest

from shopsimrl.slime_runtime import DynamicFilterOutput, SlimeFilterOutputUnavailable, fully_scored_group_filter


def technical_group(kit):
    return [kit.unscored(0, 0), kit.scored(0, 1, 1.0), kit.scored(0, 2, 0.0)]


def test_slime_loaded_without_its_filter_output_fails_at_the_first_call(kit, monkeypatch):
    monkeypatch.setitem(sys.modules, "slime", types.ModuleType("slime"))  # slime is there, its filter hub is not
    with pytest.raises(SlimeFilterOutputUnavailable, match="DynamicFilterOutput cannot be imported"):
        fully_scored_group_filter(kit.args(), technical_group(kit))


def test_slime_installed_with_its_filter_output_gets_slimes_class(kit, monkeypatch):
    @dataclass
    class SlimeDynamicFilterOutput:  # slime's fields: keep, reason=None, keep_when_insufficient=False
        keep: bool
        reason: str | None = None
        keep_when_insufficient: bool = False

    names = ("slime", "slime.rollout", "slime.rollout.filter_hub", "slime.rollout.filter_hub.base_types")
    for name in names:
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    sys.modules["slime.rollout.filter_hub.base_types"].DynamicFilterOutput = SlimeDynamicFilterOutput
    out = fully_scored_group_filter(kit.args(), technical_group(kit))
    assert type(out) is SlimeDynamicFilterOutput and out.keep is False


def test_an_old_slime_without_keep_when_insufficient_is_refused(kit, monkeypatch):
    @dataclass
    class OldDynamicFilterOutput:
        keep: bool
        reason: str | None = None

    names = ("slime", "slime.rollout", "slime.rollout.filter_hub", "slime.rollout.filter_hub.base_types")
    for name in names:
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    sys.modules["slime.rollout.filter_hub.base_types"].DynamicFilterOutput = OldDynamicFilterOutput
    with pytest.raises(RuntimeError, match="keep_when_insufficient"):
        fully_scored_group_filter(kit.args(), technical_group(kit))


def test_without_slime_the_stand_in_is_used(kit):
    assert "slime" not in sys.modules
    out = fully_scored_group_filter(kit.args(), technical_group(kit))
    assert type(out) is DynamicFilterOutput and out.keep is False
