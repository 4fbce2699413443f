"""Task goals and the English instructions written from them.

A goal is drawn from one specific product: a subset of its attributes, values
from its option axes (always the price axis when there is a budget, so the
budget pins a SKU) and a budget consistent with that SKU's price.  The build
(see build.py) then keeps only goals whose instruction, used verbatim as a
search query, ranks the goal product within the search hit list, so every task
is solvable through search.
"""

from __future__ import annotations

import math
import random
from typing import Any

from shopsimrl.env.catalog import Product
from shopsimrl.env.reward import budget_limit
from shopsimrl.env.vocab import CATEGORIES

_AUDIENCE = {c.name: c.audience for c in CATEGORIES}
BUDGET_WEIGHTS = (("none", 25), ("hard", 35), ("approx", 20), ("range", 20))

_TEMPLATES = (
    "I am looking for {attrs} {noun}{opts}{budget}.",
    "I need {attrs} {noun}{opts}{budget}.",
    "Find me {attrs} {noun}{opts}{budget}.",
    "Please get me {attrs} {noun}{opts}{budget}.",
    "Can you help me buy {attrs} {noun}{opts}{budget}?",
    "I want to buy {noun} that {be} {attrs}{opts}{budget}.",
    "Show me {noun} that {be} {attrs}{opts}{budget}.",
)


def _money(amount: float) -> str:
    return f"${amount:.0f}" if float(amount).is_integer() else f"${amount:.2f}"


def _step(price: float) -> float:
    """Granularity of a "round" budget near ``price``."""
    if price < 20:
        return 1.0
    if price < 100:
        return 5.0
    if price < 500:
        return 10.0
    return 50.0


def make_budget(rng: random.Random, price: float | None) -> dict[str, Any]:
    """A budget the goal SKU (``price``) satisfies; "none" when the price is not pinned."""
    kind = rng.choices([k for k, _ in BUDGET_WEIGHTS], weights=[w for _, w in BUDGET_WEIGHTS])[0]
    if price is None or kind == "none":
        return {"kind": "none", "amount": None, "low": None, "high": None, "text": ""}
    step = _step(price)
    if kind == "hard":
        amount = math.ceil(price * rng.uniform(1.0, 1.25) / step) * step
        if amount <= price:
            amount += step
        text = rng.choice((f"under {_money(amount)}", f"less than {_money(amount)}",
                           f"and price lower than {amount:.2f} dollars", f"for no more than {_money(amount)}"))
        return {"kind": "hard", "amount": amount, "low": None, "high": None, "text": text}
    if kind == "approx":
        amount = max(step, round(price * rng.uniform(0.93, 1.08) / step) * step)
        while price > amount * 1.1:
            amount += step
        text = rng.choice((f"around {_money(amount)}", f"for about {_money(amount)}", f"roughly {_money(amount)}"))
        return {"kind": "approx", "amount": amount, "low": None, "high": None, "text": text}
    high = math.ceil(price * rng.uniform(1.0, 1.15) / step) * step
    if high < price:
        high += step
    low = max(0.0, math.floor(price * rng.uniform(0.6, 0.9) / step) * step)
    if low >= high:
        low = max(0.0, high - step)
    text = rng.choice((f"{_money(low)}-{high:.0f}" if high.is_integer() else f"{_money(low)}-{_money(high)}",
                       f"between {_money(low)} and {_money(high)}", f"in the {_money(low)} to {_money(high)} range"))
    return {"kind": "range", "amount": None, "low": low, "high": high, "text": text}


def option_phrase(axis: str, value: str) -> str:
    if axis == "color":
        return f"in {value}"
    if axis == "ink":
        return f"with {value} ink"
    if axis == "pieces":
        return f"with {value} pieces"
    if axis == "thickness":
        return f"{value} thick"
    if axis == "fit":
        return f"for the {value}"
    if axis == "pack":
        return "sold as a single unit" if value == "single" else f"in a {value}"
    if axis == "kit":
        return value
    return f"{axis} {value}"


def _join(items: list[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def make_goal(rng: random.Random, product: Product, *, n_attributes: int | None = None) -> dict[str, Any] | None:
    """A goal pointing at ``product``; None when the product cannot carry one."""
    if not product.attributes or not product.known_prices:
        return None
    k = n_attributes if n_attributes is not None else rng.choice((1, 2, 2, 3))
    attributes = rng.sample(list(product.attributes), min(k, len(product.attributes)))
    options: dict[str, str] = {}
    for axis, values in product.options:
        if axis == product.price_axis:
            priced = [v for v, p in zip(values, product.prices) if p is not None]
            options[axis] = rng.choice(priced)
        elif rng.random() < 0.75:
            options[axis] = rng.choice(values)
    price = product.sku_price(options)
    budget = make_budget(rng, price)
    return {
        "product_id": product.product_id,
        "title": product.title,
        "category": product.category,
        "kind": product.kind,
        "attributes": attributes,
        "options": options,
        "budget": budget,
        "price_limit": budget_limit(budget),
        "sku_price": price,
    }


def make_instruction(rng: random.Random, goal: dict[str, Any]) -> str:
    audience = _AUDIENCE.get(goal["category"], "")
    noun = f"{audience} {goal['kind']}" if audience else goal["kind"]
    opts = [option_phrase(axis, value) for axis, value in goal["options"].items()]
    rng.shuffle(opts)
    budget = goal["budget"]["text"]
    template = rng.choice(_TEMPLATES)
    text = template.format(
        attrs=_join(list(goal["attributes"])),
        noun=noun,
        be="are" if goal["kind"].endswith("s") else "is",
        opts=(", " + _join(opts)) if opts else "",
        budget=(", " + budget) if budget else "",
    )
    return text[:1].upper() + text[1:]
