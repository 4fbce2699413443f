"""The vocabulary's promises: enough categories, and no value or attribute the reward could confuse."""

from __future__ import annotations

import itertools

from shopsimrl.env.reward import attribute_match, fuzzy_match
from shopsimrl.env.text import contains_phrase, fold
from shopsimrl.env.vocab import ATTRIBUTE_BULLETS, BENEFITS, BULLET_OPENERS, CATEGORIES, SEP


def test_at_least_twenty_categories_with_paths() -> None:
    assert len(CATEGORIES) >= 20
    assert len({c.name for c in CATEGORIES}) == len(CATEGORIES)
    for category in CATEGORIES:
        assert len(category.path) >= 3 and SEP in category.name
        assert sum(axis.pricing for axis in category.axes) <= 1  # at most one price-affecting axis


def test_no_two_option_values_of_a_category_fuzzy_match() -> None:
    for category in CATEGORIES:
        values = sorted({v for axis in category.axes for v in axis.values})
        clashes = [(a, b) for a, b in itertools.combinations(values, 2) if fuzzy_match(a, b)]
        assert clashes == [], category.name


def test_attributes_are_distinct_for_the_matcher() -> None:
    for category in CATEGORIES:
        for a, b in itertools.permutations(category.attributes, 2):
            assert not attribute_match(a, b), (category.name, a, b)
            assert not contains_phrase(fold(b), a), (category.name, a, b)
        for kind in category.kinds:
            assert not any(contains_phrase(fold(kind), a) for a in category.attributes), kind


def test_bullet_filler_never_names_an_attribute() -> None:
    filler = " ".join(BULLET_OPENERS + ATTRIBUTE_BULLETS + BENEFITS)
    for category in CATEGORIES:
        for attribute in category.attributes:
            assert not contains_phrase(fold(filler), attribute), attribute
            assert not any(contains_phrase(fold(use), attribute) for use in category.uses), attribute
