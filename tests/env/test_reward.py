"""The reward formula on hand-made products and goals."""

from __future__ import annotations

import pytest

from shopsimrl.env.catalog import Product
from shopsimrl.env.reward import budget_limit, category_overlap, compute_reward, title_overlap, zero_reward

BOOTS = {
    "product_id": "B0TEST0001",
    "title": "Trailpeak TX-340 Waterproof Men's Hiking Boots",
    "category": "Clothing › Men › Shoes",
    "attributes": ["waterproof", "memory foam insole", "arch support"],
    "bullets": ["Features breathable mesh, comfortable from day one"],
}


def goal(**overrides: object) -> dict:
    base = {
        "title": "Nordline AB-100 Waterproof Men's Hiking Boots",
        "category": "Clothing › Men › Shoes",
        "attributes": ["waterproof"],
        "options": {},
        "budget": {"kind": "none"},
    }
    base.update(overrides)
    return base


def test_perfect_purchase_scores_one_everywhere() -> None:
    g = goal(attributes=["waterproof", "arch support"], options={"size": "10", "color": "black"},
             budget={"kind": "hard", "amount": 40.0})
    d = compute_reward(BOOTS, {"size": "10", "color": "black"}, 39.99, g)
    assert d["reward"] == d["r_strict"] == d["r_success"] == d["r_loose"] == 1.0
    assert (d["n_att"], d["m_att"], d["n_opt"], d["m_opt"]) == (2, 2, 2, 2)
    assert d["purchased_product_id"] == "B0TEST0001" and d["chosen_options"] == {"size": "10", "color": "black"}
    assert d["sku_price"] == 39.99 and d["budget"] == 40.0 and d["end_reason"] == "purchase"


def test_r_type_category_share_of_two_segments_is_enough() -> None:
    shirt = dict(BOOTS, title="Completely Different Words", category="Clothing › Men › Shirts")
    assert category_overlap(shirt["category"], "Clothing › Men › Shoes") == 2
    assert compute_reward(shirt, {}, 10.0, goal())["r_type"] == 1.0


@pytest.mark.parametrize(
    ("purchased_title", "goal_title", "expected"),
    [
        ("alpha beta gamma", "alpha beta gamma delta", 1.0),  # overlap 0.75 > 0.2
        ("zzz", "alpha beta gamma delta", 0.0),  # overlap 0
        ("alpha", "alpha b1 b2 b3 b4 b5 b6 b7 b8 b9 b10", 0.1),  # 1/11 < 0.1
        ("alpha beta", "alpha beta c1 c2 c3 c4 c5 c6 c7 c8", 0.5),  # 2/10 = 0.2, not > 0.2
    ],
)
def test_r_type_title_overlap_bands(purchased_title: str, goal_title: str, expected: float) -> None:
    product = dict(BOOTS, title=purchased_title, category="Toys › Blocks")
    g = goal(title=goal_title, category="Beauty › Hair")
    assert compute_reward(product, {}, 1.0, g)["r_type"] == expected


def test_title_overlap_ignores_stop_words_and_case() -> None:
    assert title_overlap("THE Boots for HIKING", "hiking boots with the laces") == pytest.approx(2 / 3)


def test_r_att_fuzzy_and_substring_matches() -> None:
    # "memory-foam insole" fuzzy-matches the attribute; "breathable mesh" is only in a bullet
    g = goal(attributes=["memory-foam insole", "breathable mesh", "steel toe", "vegan"])
    d = compute_reward(BOOTS, {}, 1.0, g)
    assert (d["m_att"], d["n_att"]) == (2, 4) and d["r_att"] == 0.5
    assert d["r_strict"] == pytest.approx(0.5) and d["r_success"] == 0.0


def test_r_att_substring_is_whole_word() -> None:
    product = dict(BOOTS, title="Drawer Organizer", attributes=[], bullets=["straw colored"])
    assert compute_reward(product, {}, 1.0, goal(attributes=["raw"]))["r_att"] == 0.0


def test_r_option_fuzzy_and_missing() -> None:
    g = goal(options={"size": "10", "color": "Black", "pack": "two pack"})
    d = compute_reward(BOOTS, {"size": "10", "color": "black", "pack": "four pack"}, 1.0, g)
    assert (d["m_opt"], d["n_opt"]) == (2, 3) and d["r_option"] == pytest.approx(2 / 3)
    assert compute_reward(BOOTS, {"size": "10.5"}, 1.0, goal(options={"size": "10"}))["r_option"] == 0.0
    assert compute_reward(BOOTS, {"color": "red"}, 1.0, goal(options={}))["r_option"] == 1.0


@pytest.mark.parametrize(
    ("budget", "price", "expected"),
    [
        ({"kind": "none"}, None, 1.0),
        ({"kind": "none"}, 999.0, 1.0),
        ({"kind": "hard", "amount": 40}, 40.0, 1.0),
        ({"kind": "hard", "amount": 40}, 40.01, 0.0),
        ({"kind": "approx", "amount": 40}, 44.0, 1.0),  # around $40 allows x1.1
        ({"kind": "approx", "amount": 40}, 44.01, 0.0),
        ({"kind": "range", "low": 30, "high": 40}, 40.0, 1.0),  # the upper end counts
        ({"kind": "range", "low": 30, "high": 40}, 12.0, 1.0),
        ({"kind": "range", "low": 30, "high": 40}, 40.5, 0.0),
        ({"kind": "hard", "amount": 40}, None, 0.0),  # unknown SKU price with a budget
        ({"kind": "approx", "amount": 40}, None, 0.0),
    ],
)
def test_r_price_for_every_budget_wording(budget: dict, price: float | None, expected: float) -> None:
    assert compute_reward(BOOTS, {}, price, goal(budget=budget))["r_price"] == expected


def test_budget_limit_values() -> None:
    assert budget_limit(None) is None and budget_limit({"kind": "none"}) is None
    assert budget_limit({"kind": "hard", "amount": 25}) == 25
    assert budget_limit({"kind": "approx", "amount": 40}) == pytest.approx(44.0)
    assert budget_limit({"kind": "range", "low": 30, "high": 40}) == 40
    with pytest.raises(ValueError):
        budget_limit({"kind": "whatever"})


def test_strict_loose_and_success_combine_components() -> None:
    g = goal(attributes=["waterproof", "vegan"], options={"size": "10"}, budget={"kind": "hard", "amount": 20})
    d = compute_reward(BOOTS, {"size": "10"}, 25.0, g)  # 1 of 2 attributes, option ok, over budget
    assert d["r_att"] == 0.5 and d["r_option"] == 1.0 and d["r_price"] == 0.0
    assert d["r_strict"] == 0.0 and d["reward"] == 0.0 and d["r_success"] == 0.0
    assert d["r_loose"] == pytest.approx(1.0 * (1 + 1 + 0) / (2 + 1 + 1))


def test_accepts_product_objects() -> None:
    product = Product(product_id="B0X", title=BOOTS["title"], brand="Trailpeak", model="TX-340",
                      category=BOOTS["category"], kind="hiking boots", attributes=("waterproof",), bullets=(),
                      options=(("size", ("9", "10")),), price_axis=None, prices=(30.0,))
    d = compute_reward(product, {"size": "10"}, product.sku_price({"size": "10"}), goal(options={"size": "10"}))
    assert d["r_success"] == 1.0 and d["sku_price"] == 30.0


def test_zero_reward_has_every_key_zeroed() -> None:
    detail = zero_reward("generation_length")
    full = compute_reward(BOOTS, {}, 1.0, goal())
    assert set(detail) == set(full)
    assert detail["end_reason"] == "generation_length"
    assert all(detail[k] == 0 for k in ("reward", "r_type", "r_att", "r_option", "r_price", "r_strict", "r_loose",
                                        "r_success", "n_att", "m_att", "n_opt", "m_opt"))
