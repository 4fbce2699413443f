"""The chat wording every model-driven policy uses: one copy, so the OpenAI policy and the
token-exact slime policy show a model the same conversation."""

from __future__ import annotations

from shopsimrl.agent.policy import TurnFeedback
from shopsimrl.env.types import Observation, Task

DEFAULT_SYSTEM_PROMPT = (
    "You are a shopping agent in the ShopSim web shop. Buy the product the user's instruction "
    "describes, with the requested options and within the budget.\n"
    "You act only through the tools offered on each page: search(query) on the search page, and "
    "click(value) to click a link, a product id, an option value or 'buy now'.\n"
    "Every reply must be exactly one tool call and nothing else: no text before or after it. "
    "Each tool result shows the page you are now on."
)


def first_user_message(task: Task, observation: Observation) -> str:
    """The task instruction and the first page (ShopSim pages already start with the instruction)."""
    if task.instruction in observation.text:
        return observation.text
    return f"Instruction: {task.instruction}\n\n{observation.text}"


def observation_message(observation: Observation, feedback: TurnFeedback | None) -> str:
    """What the model reads after its turn: the new page, or why its turn was refused."""
    if feedback is not None and feedback.source == "protocol":
        return f"Error: {feedback.message} The page has not changed."
    if feedback is not None and feedback.message not in observation.text:
        return f"Error: {feedback.message}\n\n{observation.text}"
    return observation.text  # ShopSim pages already start with the env's "Invalid action (...)" line
