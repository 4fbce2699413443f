"""The hooks' settings read from slime's ``args`` (the launcher's custom config): the turn cap under its name,
``shopsim_max_turns``, and under its old name ``shopsim_max_steps`` for one release, warned once per process."""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import pytest

from shopsimrl.defaults import DEFAULT_MAX_TURNS
from shopsimrl.slime.settings import slime_settings

OLD_KEY_WARNING = ("the custom-config key shopsim_max_steps is deprecated and will be removed in the next release: "
                   "use shopsim_max_turns")


def read_three_times(**config: int) -> tuple[list[int], list[str]]:
    """Three episodes' reads of the cap under Python's default warning filter (as in a slime worker)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.resetwarnings()
        warnings.simplefilter("default")
        values = [slime_settings(SimpleNamespace(**config)).max_turns for _ in range(3)]
    return values, [str(w.message) for w in caught if issubclass(w.category, FutureWarning)]


def test_the_new_key_is_read_silently():
    assert read_three_times(shopsim_max_turns=12) == ([12, 12, 12], [])


def test_no_key_is_the_agents_default():
    assert read_three_times() == ([DEFAULT_MAX_TURNS] * 3, [])


def test_the_old_key_still_works_and_warns_once():
    assert read_three_times(shopsim_max_steps=7) == ([7, 7, 7], [OLD_KEY_WARNING])


def test_the_new_key_wins_over_the_old_one():
    assert read_three_times(shopsim_max_turns=9, shopsim_max_steps=7) == ([9, 9, 9], [])


@pytest.mark.parametrize("value", ["5", 5.0])
def test_the_cap_is_an_integer(value):
    assert slime_settings(SimpleNamespace(shopsim_max_turns=value)).max_turns == 5
