"""The rollout's defaults, each defined once: :class:`~shopsimrl.rollout.run.RolloutConfig` and the
``shopsimrl rollout`` flags both take them from here.  Imports nothing."""

from __future__ import annotations

from pathlib import Path

#: Rollout steps per run (``--steps``).
DEFAULT_STEPS = 1
#: Seeds the task order, the episode seeds and fault injection (``--seed``).
DEFAULT_SEED = 0
#: Where run folders go (``--out``): ``runs/<name>/``.
DEFAULT_OUT = Path("runs")
#: Episodes running at once, over all groups (``--episode-concurrency``).
DEFAULT_EPISODE_CONCURRENCY = 64
#: The most ``--episode-concurrency`` accepts: the in-process env gets one slot per concurrent episode, and a
#: billion slots is a MemoryError, not a rollout (no wave comes near this many episodes).
MAX_EPISODE_CONCURRENCY = 100_000
