"""``shopsimrl rollout`` with a heuristic policy that thinks ``SHOPSIMRL_TURN_SECONDS`` per turn (a model's pace).

Run as a script by the fault tests, so signals, kill -9 and exit codes are those of a real process.
"""

from __future__ import annotations

import asyncio
import os
import sys

from shopsimrl.agent.heuristic import _HeuristicEpisode
from shopsimrl.commands.rollout import main

_act = _HeuristicEpisode.act
_PACE = float(os.environ.get("SHOPSIMRL_TURN_SECONDS", "0"))


async def _paced_act(self, observation, feedback):  # type: ignore[no-untyped-def]
    await asyncio.sleep(_PACE)
    return await _act(self, observation, feedback)


_HeuristicEpisode.act = _paced_act  # type: ignore[method-assign]

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
