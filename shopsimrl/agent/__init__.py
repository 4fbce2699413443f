"""Shopping agents for ShopSim: policies and the episode loop that plays and scores one episode.

``run_episode`` drives any :class:`Policy` against any
:class:`~shopsimrl.env.types.EnvClient` and returns an :class:`EpisodeResult`
(scored, or unscored with the failing stage) plus a JSON trace.  Two policies ship:
``heuristic`` (a fast, seeded, stochastic agent that plays through the same tool
calls a model would) and ``openai`` (any OpenAI-compatible chat-completions server).

Names load on first use, so a module that only needs the episode record
(``shopsimrl.agent.result``, e.g. the rollout) does not load the policies.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from shopsimrl.lazy import lazy_names

if TYPE_CHECKING:
    from shopsimrl.agent.episode import run_episode, run_shielded
    from shopsimrl.agent.heuristic import HeuristicPolicy
    from shopsimrl.agent.openai_policy import OpenAIPolicy
    from shopsimrl.agent.policy import Policy, PolicyEpisode, PolicyTurn, ToolCall, TurnFeedback
    from shopsimrl.agent.protocol import PROTOCOL_ERROR_CODES, GenerationCut, ProtocolError, parse_turn
    from shopsimrl.agent.result import EpisodeResult
    from shopsimrl.agent.trace import TRACE_SCHEMA

POLICY_NAMES = ("heuristic", "openai")

_LAZY = {
    "run_episode": "shopsimrl.agent.episode",
    "run_shielded": "shopsimrl.agent.episode",
    "EpisodeResult": "shopsimrl.agent.result",
    "HeuristicPolicy": "shopsimrl.agent.heuristic",
    "OpenAIPolicy": "shopsimrl.agent.openai_policy",
    "Policy": "shopsimrl.agent.policy",
    "PolicyEpisode": "shopsimrl.agent.policy",
    "PolicyTurn": "shopsimrl.agent.policy",
    "ToolCall": "shopsimrl.agent.policy",
    "TurnFeedback": "shopsimrl.agent.policy",
    "PROTOCOL_ERROR_CODES": "shopsimrl.agent.protocol",
    "GenerationCut": "shopsimrl.agent.protocol",
    "ProtocolError": "shopsimrl.agent.protocol",
    "parse_turn": "shopsimrl.agent.protocol",
    "TRACE_SCHEMA": "shopsimrl.agent.trace",
}


def make_policy(name: str, **options: Any) -> Policy:
    """Build a policy by name; unknown options raise ``TypeError`` naming them."""
    if name == "heuristic":
        # only the policy asked for is loaded
        from shopsimrl.agent.heuristic import HeuristicPolicy

        return HeuristicPolicy(**options)
    if name == "openai":
        # only the policy asked for is loaded
        from shopsimrl.agent.openai_policy import OpenAIPolicy

        return OpenAIPolicy(**options)
    raise ValueError(f"unknown policy {name!r}; expected one of {', '.join(POLICY_NAMES)}")


__all__ = ["POLICY_NAMES", "make_policy", *_LAZY]


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
