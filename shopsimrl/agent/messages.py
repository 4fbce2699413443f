"""The chat wording every model-driven policy uses: one copy, so the OpenAI policy and the
token-exact slime policy show a model the same conversation.

A conversation only ever grows at its end (system prompt, first page, then assistant
replies and tool results), and the tool list is fixed for the episode
(:data:`EPISODE_TOOLS`), so each prompt is the previous prompt plus the new turn: a server's
prefix cache reuses all of it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Final

from shopsimrl.agent.policy import TurnFeedback
from shopsimrl.env.pages import all_tools
from shopsimrl.env.types import Observation, Task

DEFAULT_SYSTEM_PROMPT = (
    "You are a shopping agent in the ShopSim web shop. Buy the product the user's instruction "
    "describes, with the requested options and within the budget.\n"
    "You act only through two tools: search(query) on the search page, and click(value) to click "
    "a link, a product id, an option value or 'buy now'. Each page says which calls are valid now.\n"
    "Every reply must be exactly one tool call and nothing else: no text before or after it. "
    "Each tool result shows the page you are now on."
)

# With constrained actions (``--action-format constrained``, agent/constrained.py) the reply is the
# action's JSON itself, no tool call: the prompt says so, with each kind of click's key, and offers no tools.
CONSTRAINED_SYSTEM_PROMPT = (
    "You are a shopping agent in the ShopSim web shop. Buy the product the user's instruction "
    "describes, with the requested options and within the budget.\n"
    "Reply with one JSON action and nothing else. On the search page, search with words from the "
    'instruction: {"name": "search", "arguments": {"query": "..."}}. On a results page, open a product by its '
    'id: {"name": "click", "arguments": {"product_id": "..."}}. On a product page, choose each option: '
    '{"name": "click", "arguments": {"option": "size=large"}}, then buy it: '
    '{"name": "click", "arguments": {"value": "buy now"}}. To leave a page: '
    '{"name": "click", "arguments": {"link": "back to search"}}.\n'
    "Each message after yours shows the page you are now on."
)


def default_system_prompt(action_format: str) -> str:
    """The built-in system prompt of an action format (``tools``, or a constrained one)."""
    return DEFAULT_SYSTEM_PROMPT if action_format == "tools" else CONSTRAINED_SYSTEM_PROMPT


# The tools offered on every request of an episode: the same list on every page (what a
# page accepts is in its text), so the rendered prompt never changes in front of the new turn.
EPISODE_TOOLS: Final[list[dict[str, Any]]] = all_tools()

# Key of the turn budget the episode loop puts into ``Observation.state``.
TURNS_LEFT: Final = "turns_left"


def with_turns_left(observation: Observation, turns_left: int) -> Observation:
    """The page as the policy sees it: the env's page plus the agent's own turn budget.

    The env counts env steps; the agent's budget is its turns, protocol-error turns included,
    capped by ``max_turns`` (and by the env's own action limit when that is closer).
    """
    text = observation.text.rstrip("\n") + f"\n{_turns_note(turns_left)}\n"
    return dataclasses.replace(observation, text=text, state={**observation.state, TURNS_LEFT: turns_left})


def _turns_note(turns_left: int) -> str:
    return f"(turns left: {turns_left})"


def first_user_message(task: Task, observation: Observation) -> str:
    """The task instruction and the first page (ShopSim pages already start with the instruction)."""
    if task.instruction in observation.text:
        return observation.text
    return f"Instruction: {task.instruction}\n\n{observation.text}"


def observation_message(observation: Observation, feedback: TurnFeedback | None) -> str:
    """What the model reads after its turn: the new page, or why its turn was refused."""
    if feedback is not None and feedback.source == "protocol":
        turns_left = observation.state.get(TURNS_LEFT)
        note = f" {_turns_note(turns_left)}" if isinstance(turns_left, int) else ""
        return f"Error: {feedback.message} The page has not changed.{note}"
    if feedback is not None and feedback.message not in observation.text:
        return f"Error: {feedback.message}\n\n{observation.text}"
    return observation.text  # ShopSim pages already start with the env's "Invalid action (...)" line
