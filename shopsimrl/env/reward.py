"""The purchase reward: a pure function of (purchased product, chosen options, SKU price, goal).

Kept apart from the environment so it can be tested on hand-made products and
goals, and so the formula lives in exactly one place:

- r_type: 1.0 when the category paths share >= 2 leading segments or the title
  term overlap (share of the goal title's content words found in the purchased
  title) is > 0.2; 0.0 when the overlap is 0; 0.1 when < 0.1; else 0.5.
- r_att: share of goal attributes found among the product's attributes (fuzzy
  token-set ratio > 85) or as a whole-word phrase of title + bullets.
- r_option: share of goal option values matched by a chosen value (fuzzy > 85);
  1.0 when the goal has none.
- r_price: 1.0 with no budget, else 1.0 only when the SKU price is known and
  <= the limit (hard: amount, approximate: amount x 1.1, range: upper end).
- r_strict = r_type x r_att x r_option x r_price (the reward);
  r_loose = r_type x (M_att + M_opt + r_price) / (N_att + N_opt + 1);
  r_success = 1 iff every component is 1.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Mapping
from typing import Any

from rapidfuzz import fuzz

from shopsimrl.env.text import contains_phrase, fold, terms

FUZZY_THRESHOLD = 85.0
APPROX_FACTOR = 1.1


def _get(obj: Any, name: str, default: Any = None) -> Any:
    """Read a field from a Mapping or an object, so hand-made dicts work as products."""
    if isinstance(obj, Mapping):
        return obj.get(name, default)
    return getattr(obj, name, default)


def _norm_value(text: str) -> str:
    # Casefold only: "7.5" must stay one token, or "7" would fuzzy-match it.
    return " ".join(unicodedata.normalize("NFKC", str(text)).casefold().split())


def fuzzy_match(a: str, b: str) -> bool:
    """Option values: token-set ratio > 85 on casefolded text ("7.5" stays one token)."""
    return fuzz.token_set_ratio(_norm_value(a), _norm_value(b), processor=None) > FUZZY_THRESHOLD


def attribute_match(a: str, b: str) -> bool:
    """Attributes: token-set ratio > 85 with punctuation as spaces ("memory-foam" = "memory foam")."""
    return fuzz.token_set_ratio(fold(a), fold(b), processor=None) > FUZZY_THRESHOLD


def budget_limit(budget: Mapping[str, Any] | None) -> float | None:
    """The highest acceptable price for a budget, or None when there is no budget."""
    if not budget:
        return None
    kind = budget.get("kind", "none")
    if kind == "none":
        return None
    if kind == "hard":
        return float(budget["amount"])
    if kind == "approx":
        return round(float(budget["amount"]) * APPROX_FACTOR, 4)
    if kind == "range":
        return float(budget["high"])
    raise ValueError(f"unknown budget kind {kind!r}")


def category_overlap(a: str, b: str) -> int:
    """Number of leading category segments two paths share ("A › B › C" vs "A › B › D" -> 2)."""
    sa = [fold(s) for s in a.split("›")]
    sb = [fold(s) for s in b.split("›")]
    shared = 0
    for x, y in zip(sa, sb):
        if not x or x != y:
            break
        shared += 1
    return shared


def title_overlap(purchased_title: str, goal_title: str) -> float:
    goal_terms = terms(goal_title)
    if not goal_terms:
        return 0.0
    return len(goal_terms & terms(purchased_title)) / len(goal_terms)


def type_reward(purchased: Any, goal: Mapping[str, Any]) -> float:
    overlap = title_overlap(_get(purchased, "title", ""), goal.get("title", ""))
    if category_overlap(_get(purchased, "category", ""), goal.get("category", "")) >= 2 or overlap > 0.2:
        return 1.0
    if overlap == 0:
        return 0.0
    if overlap < 0.1:
        return 0.1
    return 0.5


def matched_attributes(purchased: Any, goal_attributes: Iterable[str]) -> int:
    attrs = list(_get(purchased, "attributes", ()) or ())
    text = fold(" ".join([_get(purchased, "title", ""), *(_get(purchased, "bullets", ()) or ())]))
    return sum(
        1 for goal_attr in goal_attributes
        if any(attribute_match(goal_attr, a) for a in attrs) or contains_phrase(text, goal_attr)
    )


def matched_options(chosen: Mapping[str, str], goal_options: Mapping[str, str]) -> int:
    values = list(chosen.values())
    return sum(1 for goal_value in goal_options.values() if any(fuzzy_match(goal_value, v) for v in values))


def compute_reward(purchased: Any, chosen_options: Mapping[str, str], sku_price: float | None,
                   goal: Mapping[str, Any]) -> dict[str, Any]:
    """Score a purchase against a goal; returns the full reward_detail (reward = r_strict)."""
    goal_attributes = list(goal.get("attributes", ()))
    goal_options = dict(goal.get("options", {}) or {})
    n_att, n_opt = len(goal_attributes), len(goal_options)
    m_att = matched_attributes(purchased, goal_attributes)
    m_opt = matched_options(chosen_options, goal_options)
    limit = budget_limit(goal.get("budget"))
    r_type = type_reward(purchased, goal)
    r_att = m_att / n_att if n_att else 1.0
    r_option = m_opt / n_opt if n_opt else 1.0
    r_price = 1.0 if limit is None else (1.0 if sku_price is not None and sku_price <= limit + 1e-9 else 0.0)
    r_strict = r_type * r_att * r_option * r_price
    r_loose = r_type * (m_att + m_opt + r_price) / (n_att + n_opt + 1)
    r_success = 1.0 if (r_type == 1.0 and r_att == 1.0 and r_option == 1.0 and r_price == 1.0) else 0.0
    return {
        "reward": r_strict,
        "r_type": r_type,
        "r_att": r_att,
        "r_option": r_option,
        "r_price": r_price,
        "r_strict": r_strict,
        "r_loose": r_loose,
        "r_success": r_success,
        "n_att": n_att,
        "m_att": m_att,
        "n_opt": n_opt,
        "m_opt": m_opt,
        "purchased_product_id": _get(purchased, "product_id"),
        "chosen_options": dict(chosen_options),
        "sku_price": sku_price,
        "budget": limit,
        "budget_kind": (goal.get("budget") or {}).get("kind", "none"),
        "end_reason": "purchase",
    }


def zero_reward(end_reason: str) -> dict[str, Any]:
    """The detail of an episode cut by a limit: every component 0."""
    return {
        "reward": 0.0, "r_type": 0.0, "r_att": 0.0, "r_option": 0.0, "r_price": 0.0, "r_strict": 0.0,
        "r_loose": 0.0, "r_success": 0.0, "n_att": 0, "m_att": 0, "n_opt": 0, "m_opt": 0,
        "purchased_product_id": None, "chosen_options": {}, "sku_price": None, "budget": None,
        "budget_kind": None, "end_reason": end_reason,
    }
