"""Shopping agents for ShopSim: policies and the episode loop that plays and scores one episode.

``run_episode`` drives any :class:`Policy` against any
:class:`~shopsimrl.env.types.EnvClient` and returns an :class:`EpisodeResult`
(scored, or unscored with the failing stage) plus a JSON trace.  Two policies ship:
``heuristic`` (a fast, seeded, stochastic agent that plays through the same tool
calls a model would) and ``openai`` (any OpenAI-compatible chat-completions server).
"""

from __future__ import annotations

from typing import Any

from shopsimrl.agent.defaults import DEFAULT_MAX_TURNS
from shopsimrl.agent.episode import EpisodeResult, run_episode, run_shielded
from shopsimrl.agent.heuristic import HeuristicPolicy
from shopsimrl.agent.openai_policy import OpenAIPolicy
from shopsimrl.agent.policy import Policy, PolicyEpisode, PolicyTurn, ToolCall, TurnFeedback
from shopsimrl.agent.protocol import PROTOCOL_ERROR_CODES, GenerationCut, ProtocolError, parse_turn
from shopsimrl.agent.trace import TRACE_SCHEMA

POLICY_NAMES = ("heuristic", "openai")


def make_policy(name: str, **options: Any) -> Policy:
    """Build a policy by name; unknown options raise ``TypeError`` naming them."""
    if name == "heuristic":
        return HeuristicPolicy(**options)
    if name == "openai":
        return OpenAIPolicy(**options)
    raise ValueError(f"unknown policy {name!r}; expected one of {', '.join(POLICY_NAMES)}")


__all__ = [
    "DEFAULT_MAX_TURNS",
    "POLICY_NAMES",
    "PROTOCOL_ERROR_CODES",
    "TRACE_SCHEMA",
    "EpisodeResult",
    "GenerationCut",
    "HeuristicPolicy",
    "OpenAIPolicy",
    "Policy",
    "PolicyEpisode",
    "PolicyTurn",
    "ProtocolError",
    "ToolCall",
    "TurnFeedback",
    "make_policy",
    "parse_turn",
    "run_episode",
    "run_shielded",
]
