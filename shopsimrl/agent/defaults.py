"""The agent's defaults, each defined once: every module, CLI flag and script that needs one imports it
from here.  Imports nothing, so option parsers and the slime launcher read it without loading the agent."""

from __future__ import annotations

#: Turns per episode before the episode ends with ``action_limit`` (``--max-turns``, ``SHOPSIM_MAX_TURNS``).
#: A turn is one policy reply, whether it became an env step or a protocol error.
DEFAULT_MAX_TURNS = 30
