"""The filter answers with slime's own ``DynamicFilterOutput``, or not at all.

slime's ``call_dynamic_filter`` (``slime/rollout/filter_hub/base_types.py``) wraps any return
value that is not its own ``DynamicFilterOutput`` as ``DynamicFilterOutput(keep=<value>)``: any
other object is truthy, so slime would keep every group, technical ones included.  So when slime's
class cannot be imported (slime absent, or loaded without its filter hub), the first filter call fails.
"""

from __future__ import annotations

import sys

import pytest

from shopsimrl.slime.harness.double import rollout as slime_double
from shopsimrl.slime_runtime import SlimeFilterOutputUnavailable, fully_scored_group_filter


def technical_group(kit):
    return [kit.unscored(0, 0), kit.scored(0, 1, 1.0), kit.scored(0, 2, 0.0)]


def test_slime_loaded_without_its_filter_output_fails_at_the_first_call(kit, monkeypatch):
    slime_double.install(monkeypatch)
    monkeypatch.delitem(sys.modules, "slime.rollout.filter_hub.base_types")  # slime is there, its filter hub is not
    monkeypatch.delattr(sys.modules["slime.rollout.filter_hub"], "base_types")
    with pytest.raises(SlimeFilterOutputUnavailable, match="DynamicFilterOutput cannot be imported"):
        fully_scored_group_filter(kit.args(), technical_group(kit))


def test_inside_slime_the_answer_is_slimes_class(kit, monkeypatch):
    slime_double.install(monkeypatch)
    out = fully_scored_group_filter(kit.args(), technical_group(kit))
    assert type(out) is sys.modules["slime.rollout.filter_hub.base_types"].DynamicFilterOutput and out.keep is False


def test_without_slime_the_filter_refuses(kit):
    assert "slime" not in sys.modules
    with pytest.raises(SlimeFilterOutputUnavailable, match="cannot be imported"):
        fully_scored_group_filter(kit.args(), technical_group(kit))
