"""Page transitions, observations, tools and every feedback code."""

from __future__ import annotations

import pytest

from shopsimrl.env.core import ShopSimEnv
from shopsimrl.env.pages import parse_action, tool_call_to_action
from shopsimrl.env.types import FEEDBACK_CODES, QueryTooLongError, StepResult

from .conftest import first_task


def _open_goal(env: ShopSimEnv, task_id: str) -> tuple[str, StepResult]:
    """Reset, search the instruction, page to the goal product and open it."""
    start = env.reset(task_id)
    goal_id = env.goal_product(task_id).product_id
    result = env.step(start.lease_id, f"search[{start.task.instruction}]")
    while goal_id not in result.observation.state["clickables"]:
        result = env.step(start.lease_id, "click[next >]")
    return start.lease_id, env.step(start.lease_id, f"click[{goal_id}]")


def _multi_axis_task(env: ShopSimEnv) -> str:
    for task_id in env.list_tasks("train"):
        if len(env.goal_product(task_id).axes) >= 2:
            return task_id
    raise AssertionError("no multi-axis task")


def test_search_home_offers_only_search(env: ShopSimEnv) -> None:
    start = env.reset(first_task(env))
    obs = start.observation
    assert obs.state["page"] == "search" and obs.state["clickables"] == [] and obs.state["search_available"]
    assert [t["function"]["name"] for t in obs.tools] == ["search"]
    assert obs.text.startswith(f"Instruction: {start.task.instruction}\n")
    assert "Valid now: search(query)" in obs.text
    assert "[<" not in obs.text and "steps left" not in obs.text  # no text-action placeholders, no env counter


def test_results_page_state_text_and_click_tool(env: ShopSimEnv) -> None:
    lease = env.reset(first_task(env)).lease_id
    result = env.step(lease, "search[black]")
    state, tools = result.observation.state, result.observation.tools
    assert state["page"] == "results" and state["page_num"] == 1 and state["num_pages"] == 8
    assert state["total_results"] == 150 and len(state["products"]) == 20
    ids = [p["product_id"] for p in state["products"]]
    assert state["clickables"] == ["back to search", "next >", *ids]
    assert tools == [{"type": "function", "function": {
        "name": "click", "description": tools[0]["function"]["description"],
        "parameters": {"type": "object", "properties": {"value": {"type": "string", "enum": state["clickables"]}},
                       "required": ["value"]}}}]
    assert f"[{ids[0]}] {state['products'][0]['title']}" in result.observation.text
    assert result.reward is None and not result.done and result.info["feedback"] is None
    assert result.info["steps"] == 1


def test_paging_back_and_forth(env: ShopSimEnv) -> None:
    lease = env.reset(first_task(env)).lease_id
    first = env.step(lease, "search[black]").observation.state
    second = env.step(lease, "click[next >]").observation.state
    assert second["page_num"] == 2 and "< prev" in second["clickables"]
    assert second["products"] != first["products"]
    back = env.step(lease, "click[< prev]").observation.state
    assert back["products"] == first["products"]
    for _ in range(7):
        last = env.step(lease, "click[next >]").observation.state
    assert last["page_num"] == 8 and "next >" not in last["clickables"] and len(last["products"]) == 10
    home = env.step(lease, "click[back to search]").observation.state
    assert home["page"] == "search"


def test_item_page_options_selection_and_buy(env: ShopSimEnv) -> None:
    task_id = _multi_axis_task(env)
    lease, result = _open_goal(env, task_id)
    product = env.goal_product(task_id)
    state = result.observation.state
    assert state["page"] == "item" and state["product"]["product_id"] == product.product_id
    expected = ["back to search", "< prev"] + [f"{a}={v}" for a, vs in product.options for v in vs]
    assert state["clickables"] == expected  # no buy now yet
    assert state["missing_axes"] == list(product.axes) and not state["buy_enabled"]
    assert state["selected_options"] == {}
    text = result.observation.text
    assert product.title in text and "Attributes:" in text and product.bullets[0] in text
    axis, values = product.options[0]
    result = env.step(lease, f"click[{axis}={values[0]}]")
    assert result.observation.state["selected_options"] == {axis: values[0]}
    assert f"[{values[0]}]" in result.observation.text
    result = env.step(lease, f"click[{axis}={values[1]}]")  # choosing again replaces
    assert result.observation.state["selected_options"] == {axis: values[1]}
    for other, other_values in product.options[1:]:
        result = env.step(lease, f"click[{other}={other_values[0]}]")
    state = result.observation.state
    assert state["missing_axes"] == [] and state["buy_enabled"] and state["clickables"][-1] == "buy now"
    prev = env.step(lease, "click[< prev]").observation.state
    assert prev["page"] == "results" and product.product_id in prev["clickables"]


def test_purchase_ends_the_episode_with_a_reward(env: ShopSimEnv) -> None:
    task_id = first_task(env)
    lease, _ = _open_goal(env, task_id)
    product = env.goal_product(task_id)
    goal = env.get_task(task_id).goal
    for axis, values in product.options:
        env.step(lease, f"click[{axis}={goal['options'].get(axis, values[0])}]")
    result = env.step(lease, "click[buy now]")
    assert result.terminated and not result.truncated and result.done
    assert result.reward == 1.0 and result.info["end_reason"] == "purchase"
    assert result.info["reward_detail"]["r_success"] == 1.0
    assert result.observation.state["page"] == "done" and result.observation.tools == []
    assert "[Done]" in result.observation.text


def _feedback(result: StepResult) -> str:
    assert result.info["feedback"] is not None
    return str(result.info["feedback"]["code"])


def test_every_feedback_code_leaves_the_page_unchanged(env: ShopSimEnv) -> None:
    task_id = _multi_axis_task(env)
    start = env.reset(task_id)
    lease = start.lease_id
    seen = set()

    def invalid(action: str) -> StepResult:
        result = env.step(lease, action)
        seen.add(_feedback(result))
        assert result.info["feedback"]["message"]
        assert result.observation.text.startswith("Invalid action")
        return result

    home_text = start.observation.text
    r = invalid("buy the boots")
    assert _feedback(r) == "invalid_format" and r.observation.state["page"] == "search"
    assert r.observation.text.endswith(home_text) and r.observation.state["steps_left"] == 29
    assert _feedback(invalid("search[   ]")) == "empty_argument"
    assert _feedback(invalid("click[]")) == "empty_argument"
    assert _feedback(invalid("click[next >]")) == "unavailable_action"
    results = env.step(lease, f"search[{start.task.instruction}]").observation.state
    r = invalid("search[more boots]")
    assert _feedback(r) == "search_unavailable" and r.observation.state["products"] == results["products"]
    assert _feedback(invalid("click[B0NOTTHERE]")) == "unavailable_action"
    goal_id = env.goal_product(task_id).product_id
    state = results
    while goal_id not in state["clickables"]:
        state = env.step(lease, "click[next >]").observation.state
    product = env.goal_product(task_id)
    env.step(lease, f"click[{goal_id.lower()}]")  # ids are matched case-insensitively
    r = invalid("click[buy now]")
    assert _feedback(r) == "incomplete_options" and r.observation.state["page"] == "item"
    axis, values = product.options[0]
    env.step(lease, f"click[{axis}={values[0]}]")
    r = invalid(f"click[{axis}={values[0]}]")
    assert _feedback(r) == "already_selected" and r.observation.state["selected_options"] == {axis: values[0]}
    assert _feedback(invalid("click[color=not-a-color]")) == "unavailable_action"
    assert seen == set(FEEDBACK_CODES)


def test_invalid_actions_count_as_steps_and_hit_the_action_limit(small_db: object) -> None:
    with ShopSimEnv(small_db, slots=1, action_limit=3) as shop:  # type: ignore[arg-type]
        lease = shop.reset(first_task(shop)).lease_id
        assert shop.step(lease, "nonsense").info["steps"] == 1
        assert shop.step(lease, "click[x]").info["steps"] == 2
        last = shop.step(lease, "search[boots]")
        assert last.truncated and not last.terminated and last.reward == 0.0
        assert last.info["end_reason"] == "action_limit"
        assert last.info["reward_detail"]["end_reason"] == "action_limit"
        assert last.info["reward_detail"]["r_strict"] == 0.0


def test_query_over_512_characters_is_a_bad_request(env: ShopSimEnv) -> None:
    lease = env.reset(first_task(env)).lease_id
    with pytest.raises(QueryTooLongError):
        env.step(lease, "search[" + "a" * 513 + "]")
    assert env.step(lease, "search[" + "boots " * 80 + "]").observation.state["page"] == "results"
    assert env.step(lease, "click[back to search]").info["steps"] == 2  # the rejected query did not count


def test_parse_and_tool_call_helpers() -> None:
    assert parse_action("  Search[ waterproof   boots ] ") == ("search", "waterproof boots")
    assert parse_action("click[size=10]") == ("click", "size=10")
    assert tool_call_to_action("search", {"query": "boots"}) == "search[boots]"
    assert tool_call_to_action("click", {"value": "buy now"}) == "click[buy now]"


_OBSERVE = """
import json, sys
from shopsimrl.env.core import ShopSimEnv
with ShopSimEnv(sys.argv[1], slots=1) as shop:
    lease = shop.reset(shop.list_tasks("train")[0]).lease_id
    r = shop.step(lease, "search[black boots]")
    r2 = shop.step(lease, f"click[{r.observation.state['products'][3]['product_id']}]")
    print(json.dumps([r.observation.text, r2.observation.text, r2.observation.state], sort_keys=True))
"""


def test_observations_are_the_same_in_processes_with_different_hash_seeds(small_db: object) -> None:
    """Search results and pages do not depend on set/dict iteration order of str hashes (PYTHONHASHSEED)."""
    import json
    import os
    import subprocess
    import sys

    outputs = []
    for seed in ("0", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run([sys.executable, "-c", _OBSERVE, str(small_db)], env=env, capture_output=True,
                              text=True, timeout=120, check=True)
        outputs.append(json.loads(done.stdout))
    assert outputs[0] == outputs[1]
    text, page_text, state = outputs[0]
    assert "black" in text.lower() and state["page"] == "item"
