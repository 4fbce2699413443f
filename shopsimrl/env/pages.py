"""The shop's pages as a state machine, and what each page shows and offers.

search home --search--> results --product id--> item --buy now--> done
     ^------- back to search -----+----------------+
Results page through ``< prev`` / ``next >``; an item goes back to its results
page with ``< prev``.  Every page yields a deterministic text (what a model
reads), a structured state and the tools that are valid on it.  An invalid
action raises :class:`InvalidAction` with one of the FEEDBACK_CODES and leaves
the state untouched.

The page text names what is valid *now* in terms of the two tools (``search`` with a
query, ``click`` with a value), so a model offered one fixed tool list for the whole
episode (:func:`all_tools`) still knows what each page takes.  It shows no turn
counter: the env counts env steps, while an agent's budget is its own turns (protocol
errors included), so the agent adds that line (``shopsimrl.agent.messages``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from shopsimrl.env.catalog import Product
from shopsimrl.env.search import MAX_QUERY_CHARS, PAGE_SIZE, SearchHits
from shopsimrl.env.types import QueryTooLongError
from shopsimrl.errors import ModelMistake

SEARCH, RESULTS, ITEM, DONE = "search", "results", "item", "done"
BACK, PREV, NEXT, BUY = "back to search", "< prev", "next >", "buy now"

# Longer actions are refused as feedback (``invalid_format``) by the env itself, so the
# in-process and the HTTP clients answer an over-long action identically.
MAX_ACTION_CHARS = 8192
_ACTION = re.compile(r"^\s*(search|click)\s*\[(.*)\]\s*$", re.IGNORECASE | re.DOTALL)


class InvalidAction(ModelMistake):
    """An action the current page does not accept; the step still counts."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class PageContext(Protocol):
    def search(self, query: str) -> SearchHits: ...

    def products(self, rowids: Sequence[int]) -> list[Product]: ...


@dataclass
class PageState:
    """Where one session is; mutated only by :func:`apply_action` under the session's lock."""

    page: str = SEARCH
    query: str = ""
    hits: SearchHits | None = None
    page_num: int = 1
    product: Product | None = None
    selected: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Purchase:
    product: Product
    selected: dict[str, str]
    price: float | None


def parse_action(action: str) -> tuple[str, str]:
    """``search[...]`` / ``click[...]`` -> (kind, argument); raises InvalidAction otherwise."""
    if not isinstance(action, str):
        raise InvalidAction("invalid_format", "an action must be a string such as search[...] or click[...]")
    if len(action) > MAX_ACTION_CHARS:
        raise InvalidAction("invalid_format",
                            f"the action is {len(action)} characters long; the limit is {MAX_ACTION_CHARS}")
    match = _ACTION.match(action)
    if not match:
        raise InvalidAction("invalid_format",
                            f"could not parse {action[:80]!r}; use search[<query>] or click[<value>]")
    kind, raw = match.group(1).lower(), match.group(2).strip()
    if not raw:
        raise InvalidAction("empty_argument", f"{kind}[] needs an argument")
    argument = " ".join(raw.split())
    return kind, argument


def option_clickable(axis: str, value: str) -> str:
    return f"{axis}={value}"


def missing_axes(state: PageState) -> list[str]:
    if state.product is None:
        return []
    return [axis for axis in state.product.axes if axis not in state.selected]


def clickables(state: PageState, ctx: PageContext) -> list[str]:
    """The exact values click[...] accepts on this page, in display order."""
    if state.page == RESULTS and state.hits is not None:
        out = [BACK]
        if state.page_num > 1:
            out.append(PREV)
        if state.page_num < state.hits.num_pages():
            out.append(NEXT)
        out.extend(p.product_id for p in ctx.products(state.hits.page(state.page_num)))
        return out
    if state.page == ITEM and state.product is not None:
        out = [BACK, PREV]
        out.extend(option_clickable(axis, v) for axis, values in state.product.options for v in values)
        if not missing_axes(state):
            out.append(BUY)
        return out
    return []


def _resolve(argument: str, allowed: list[str]) -> str | None:
    if argument in allowed:
        return argument
    folded = argument.casefold().replace(" = ", "=")
    for value in allowed:
        if value.casefold() == folded:
            return value
    return None


def apply_action(state: PageState, action: str, ctx: PageContext) -> Purchase | None:
    """Apply one action in place; returns the purchase when it was ``buy now``."""
    kind, argument = parse_action(action)
    if kind == "search":
        if state.page != SEARCH:
            raise InvalidAction("search_unavailable",
                                "search is only available on the search page; click 'back to search' first")
        if len(argument) > MAX_QUERY_CHARS:  # after the page check: a search the page can't take is feedback
            raise QueryTooLongError(f"query is {len(argument)} characters; the limit is {MAX_QUERY_CHARS}")
        state.hits = ctx.search(argument)
        state.query, state.page, state.page_num = argument, RESULTS, 1
        state.product, state.selected = None, {}
        return None
    allowed = clickables(state, ctx)
    value = _resolve(argument, allowed)
    if value is None:
        _explain_unavailable(state, argument, allowed)
    if value == BACK:
        state.page, state.query, state.hits, state.page_num = SEARCH, "", None, 1
        state.product, state.selected = None, {}
    elif value == PREV and state.page == RESULTS:
        state.page_num -= 1
    elif value == NEXT:
        state.page_num += 1
    elif value == PREV:  # item -> its results page
        state.page, state.product, state.selected = RESULTS, None, {}
    elif value == BUY:
        assert state.product is not None
        return Purchase(state.product, dict(state.selected), state.product.sku_price(state.selected))
    elif state.page == RESULTS:
        state.product = ctx.products([_rowid_of(state, value, ctx)])[0]
        state.page, state.selected = ITEM, {}
    else:
        axis, _, chosen = value.partition("=")
        if state.selected.get(axis) == chosen:
            raise InvalidAction("already_selected", f"{axis}={chosen} is already selected")
        state.selected[axis] = chosen
    return None


def _rowid_of(state: PageState, product_id: str, ctx: PageContext) -> int:
    assert state.hits is not None
    for rowid, product in zip(state.hits.page(state.page_num), ctx.products(state.hits.page(state.page_num))):
        if product.product_id == product_id:
            return rowid
    raise InvalidAction("unavailable_action", f"{product_id} is not on this page")


def _explain_unavailable(state: PageState, argument: str, allowed: list[str]) -> None:
    folded = argument.casefold()
    if state.page == ITEM and folded == BUY:
        raise InvalidAction("incomplete_options",
                            f"choose {', '.join(missing_axes(state))} before clicking 'buy now'")
    if state.page == SEARCH:
        raise InvalidAction("unavailable_action", "nothing to click on the search page; search with a query")
    shown = ", ".join(allowed[:12]) + (" ..." if len(allowed) > 12 else "")
    raise InvalidAction("unavailable_action", f"{argument[:80]!r} is not clickable here; options: {shown}")


# -- rendering ---------------------------------------------------------------------------
def money(value: float | None) -> str:
    return "unavailable" if value is None else f"${value:,.2f}"


def price_range(product: Product) -> str:
    low, high = product.price_min, product.price_max
    if low is None or high is None:
        return "price unavailable"
    return money(low) if low == high else f"{money(low)} to {money(high)}"


def _product_summary(product: Product) -> dict[str, Any]:
    return {"product_id": product.product_id, "title": product.title, "price_min": product.price_min,
            "price_max": product.price_max}


def render(state: PageState, ctx: PageContext, *, instruction: str, steps: int, action_limit: int,
           done_info: dict[str, Any] | None = None) -> tuple[str, dict[str, Any], list[str]]:
    """(text, observation_state, clickables) for the current page."""
    clicks = [] if state.page == DONE else clickables(state, ctx)
    data: dict[str, Any] = {
        "page": state.page,
        "instruction": instruction,
        "clickables": clicks,
        "search_available": state.page == SEARCH,
        "steps": steps,
        "steps_left": max(0, action_limit - steps),  # env steps; an agent's turn budget is its own
        "action_limit": action_limit,
    }
    lines = [f"Instruction: {instruction}", ""]
    if state.page == SEARCH:
        lines += ["[Search page]", "Search the catalog with a query.", "", "Valid now: search(query)"]
    elif state.page == RESULTS:
        lines += _render_results(state, ctx, data, clicks)
    elif state.page == ITEM:
        lines += _render_item(state, data)
    else:
        lines += _render_done(data, done_info or {})
    return "\n".join(lines).rstrip() + "\n", data, clicks


def _render_results(state: PageState, ctx: PageContext, data: dict[str, Any], clicks: list[str]) -> list[str]:
    hits = state.hits
    assert hits is not None
    products = ctx.products(hits.page(state.page_num))
    total, pages = len(hits.rowids), hits.num_pages()
    data.update(query=state.query, normalized_query=hits.query, page_num=state.page_num, num_pages=pages,
                total_results=total, products=[_product_summary(p) for p in products])
    lines = [f'[Results page] query "{state.query}": page {state.page_num} of {pages} ({total} results)']
    if not products:
        lines.append("No products match this query. Try other words.")
    start = (state.page_num - 1) * PAGE_SIZE
    for i, p in enumerate(products, start=start + 1):
        lines.append(f"{i}. [{p.product_id}] {p.title} | {price_range(p)}")
    values = [f"'{c}'" for c in clicks if c in (BACK, PREV, NEXT)]
    if products:
        values.append("a product id from the list, e.g. '" + products[0].product_id + "'")
    lines += ["", "Valid now: click(value), value one of: " + ", ".join(values)]
    return lines


def _render_item(state: PageState, data: dict[str, Any]) -> list[str]:
    product = state.product
    assert product is not None
    missing = missing_axes(state)
    price = product.sku_price(state.selected)
    data.update(
        query=state.query, page_num=state.page_num,
        product={**_product_summary(product), "brand": product.brand, "category": product.category,
                 "attributes": list(product.attributes), "bullets": list(product.bullets),
                 "options": {axis: list(values) for axis, values in product.options},
                 "price_axis": product.price_axis},
        selected_options=dict(state.selected), missing_axes=missing, price=price, buy_enabled=not missing)
    if price is not None:
        price_line = f"Price: {money(price)}"
    elif product.price_axis and product.price_axis not in state.selected:
        price_line = f"Price: {price_range(product)} (choose {product.price_axis} to see the exact price)"
    else:
        price_line = "Price: unavailable for this selection"
    lines = [f"[Product page] {product.product_id}", product.title,
             f"Brand: {product.brand} | Category: {product.category}", price_line,
             f"Attributes: {', '.join(product.attributes)}", "About this item:"]
    lines += [f"- {b}" for b in product.bullets]
    if product.options:
        lines.append("Options (selected in brackets):")
        for axis, values in product.options:
            shown = [f"[{v}]" if state.selected.get(axis) == v else v for v in values]
            lines.append(f"  {axis}: {' | '.join(shown)}")
        chosen = ", ".join(f"{a}={v}" for a, v in state.selected.items()) or "nothing yet"
        lines.append(f"Selected: {chosen}" + (f"; still to choose: {', '.join(missing)}" if missing else ""))
    values = [f"'{BACK}'", f"'{PREV}'"]
    if product.options:
        values.append("an option as <option>=<value>, e.g. '" + option_clickable(*_first_option(product)) + "'")
    values.append(f"'{BUY}'" if not missing else f"'{BUY}' once every option is chosen")
    lines += ["", "Valid now: click(value), value one of: " + ", ".join(values)]
    return lines


def _first_option(product: Product) -> tuple[str, str]:
    axis, values = product.options[0]
    return axis, values[0]


def _render_done(data: dict[str, Any], info: dict[str, Any]) -> list[str]:
    data.update(info)
    reason = info.get("end_reason")
    if reason == "purchase":
        chosen = ", ".join(f"{a}={v}" for a, v in (info.get("selected_options") or {}).items()) or "no options"
        lines = [f"[Done] You bought {info.get('purchased_product_id')} ({chosen}) for "
                 f"{money(info.get('price'))}."]
    else:
        lines = [f"[Done] The episode ended without a purchase: {reason}."]
    lines.append(f"Reward: {info.get('reward', 0.0):.3f}")
    return lines


# -- tools -------------------------------------------------------------------------------
def search_tool() -> dict[str, Any]:
    return {"type": "function", "function": {
        "name": "search",
        "description": "Search the shop's catalog with keywords; only available on the search page.",
        "parameters": {"type": "object", "properties": {"query": {
            "type": "string", "description": "keywords, e.g. the product type and its key attributes",
            "maxLength": MAX_QUERY_CHARS}}, "required": ["query"]}}}


def click_tool(values: list[str] | None = None) -> dict[str, Any]:
    """``click``; with ``values``, the page's exact clickables as an enum."""
    value: dict[str, Any] = {"type": "string"} if values is None else {"type": "string", "enum": list(values)}
    if values is None:
        value["description"] = "one of the clickable values the current page lists"
    return {"type": "function", "function": {
        "name": "click",
        "description": "Click a button, link or option on the current page: one of the listed values.",
        "parameters": {"type": "object", "properties": {"value": value}, "required": ["value"]}}}


def all_tools() -> list[dict[str, Any]]:
    """Every tool an episode can use, without page-specific enums: for a prompt rendered once."""
    return [search_tool(), click_tool()]


def tools_for(state: PageState, clicks: list[str]) -> list[dict[str, Any]]:
    if state.page == SEARCH:
        return [search_tool()]
    if state.page == DONE or not clicks:
        return []
    return [click_tool(clicks)]


def tool_call_to_action(name: str, arguments: dict[str, Any]) -> str:
    """Turn an OpenAI-style tool call into the action string step() takes."""
    if name == "search":
        return f"search[{arguments.get('query', '')}]"
    if name == "click":
        return f"click[{arguments.get('value', '')}]"
    return f"{name}[{arguments}]"
