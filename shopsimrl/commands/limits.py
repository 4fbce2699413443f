"""Upper bounds on sizes given on the command line, defined once.

Beyond them a command would run for months or exhaust memory before it says anything, which is
never what the value meant (``--steps 1e23`` is a typo); refused while parsing, with the bound
and why.  Each is far above any run the docs describe.
"""

from __future__ import annotations

#: Rollout and simulated steps: the release run has 80; a rollout step takes seconds to minutes.
MAX_STEPS = 100_000
#: Sibling episodes of one group (``measure --siblings``): the release run uses 8.
MAX_SIBLINGS = 1024
#: Tasks measured (``measure --tasks``): a split holds at most 2,000 (``env build --tasks``).
MAX_TASKS = 100_000
#: Prompts (and clusters) of a simulated world, each held in memory: the release run's set has 1,600.
MAX_PROMPTS = 1_000_000
#: Simulated worlds of one ``simulate`` (one per seed): the docs use 3 to 5.
MAX_SEEDS = 100
#: ``env serve --processes`` on one machine.
MAX_SERVER_PROCESSES = 256

WHY_STEPS = "a larger run would not finish"
WHY_SIBLINGS = "episodes per group; more would not fit in memory"
WHY_PROMPTS = "each is held in memory"
WHY_PROCESSES = "server processes on one machine"
