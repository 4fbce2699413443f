"""Exploration by cluster for informative selection: which never-seen prompt to try, when prompts carry a label.

A cluster is a label a prompt may carry (a ShopSim task's category, a key of a slime
prompt's metadata, the simulated world's cluster).  How much of what the policy learns
in one cluster carries to another is not known in advance, so a cluster that is never
tried may never improve.  ``ClusterBook`` keeps the never-seen prompts in one line per
cluster and decides which line an exploring pick takes from:

- a cluster never tried first (in a seeded shuffled order): every cluster is tried
  within the first ``K`` explorations, so within ``K / N`` of the exploration horizon;
- otherwise the cluster whose never-seen prompts are the likeliest to give a group with
  spread: its *cluster q*, the decayed share of its prompts' first groups that had
  spread, shrunk toward the whole prompt set's share (``POPULATION_PRIOR_WEIGHT``
  pseudo-observations); ties go to the cluster least covered.

A never-seen prompt's predicted ``q`` is its cluster's q, and a never-seen cluster's is
the share of clusters whose very first group had spread: a cluster that learning has
not reached is worth more than a never-seen prompt of a cluster that is well learned,
and the adaptive sizer reads it so.  Pure: no I/O, no clock.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Hashable, Sequence
from statistics import median
from typing import Any

#: Decay of a cluster's first-observation counts (per first observation in that cluster), as for the whole set.
POPULATION_DECAY = 0.98
#: Pseudo-observations behind a cluster's q, at the whole set's (or, for never-seen clusters, at 50%).
POPULATION_PRIOR_WEIGHT = 2.0


def cluster_indices(ids: Sequence[Hashable], labels: Any) -> tuple[list[Hashable], list[int]]:
    """Labels per prompt (a mapping from prompt id, or a sequence in the order of ``ids``) as indices
    ``0 .. K−1`` in order of first appearance; a prompt with no label (missing, ``None``) gets the label ``None``."""
    if hasattr(labels, "get"):
        per_prompt = [labels.get(pid) for pid in ids]
    else:
        per_prompt = list(labels)
        if len(per_prompt) != len(ids):
            raise ValueError(f"clusters: {len(per_prompt)} labels for {len(ids)} prompts")
    names: dict[Hashable, int] = {}
    index = [names.setdefault(label, len(names)) for label in per_prompt]
    return list(names), index


class ClusterBook:
    """Never-seen prompts by cluster, first observations by cluster, coverage by cluster (see the module docstring)."""

    def __init__(self, cluster_of: Sequence[int], order: Sequence[int], seed: int) -> None:
        self.cluster_of = list(cluster_of)
        self.k = max(self.cluster_of, default=-1) + 1
        self.size = [0] * self.k
        for c in self.cluster_of:
            self.size[c] += 1
        self.unseen: list[deque[int]] = [deque() for _ in range(self.k)]
        for i in order:
            self.unseen[self.cluster_of[i]].append(i)
        self.chosen = [0] * self.k  # prompts of the cluster ever handed out
        self.first_zero = [0.0] * self.k  # decayed counts of the cluster's first observations with zero spread
        self.first_seen = [0.0] * self.k
        self.opened_zero = 0.0  # clusters whose very first observation had zero spread
        self.opened = 0.0  # clusters observed at all
        self.untried = list(range(self.k))
        random.Random(f"shopsimrl-clusters/{seed}").shuffle(self.untried)
        self.untried.reverse()  # popped from the end: the shuffled order

    # -- never-seen prompts ------------------------------------------------------------------------
    def unseen_count(self) -> int:
        return sum(len(line) for line in self.unseen)

    def explore(self) -> int:
        """The never-seen prompt an exploring pick takes (the caller checked that one is left)."""
        untried = self.untried
        while untried and (self.chosen[untried[-1]] or not self.unseen[untried[-1]]):
            untried.pop()
        if untried:
            c = untried[-1]
        else:
            c = min((c for c in range(self.k) if self.unseen[c]), key=lambda c: self.chosen[c] / self.size[c])
        return self.unseen[c].popleft()

    def put_back(self, i: int) -> None:
        """A never-seen prompt released unobserved: first in its cluster's line again."""
        self.unseen[self.cluster_of[i]].appendleft(i)

    def chose(self, i: int) -> None:
        """Prompt ``i`` was handed out for the first time."""
        self.chosen[self.cluster_of[i]] += 1

    # -- first observations ------------------------------------------------------------------------
    def first_observation(self, i: int, zero: bool) -> None:
        c = self.cluster_of[i]
        if not self.first_seen[c]:
            self.opened_zero += zero
            self.opened += 1.0
        self.first_zero[c] = POPULATION_DECAY * self.first_zero[c] + zero
        self.first_seen[c] = POPULATION_DECAY * self.first_seen[c] + 1.0

    def q(self, c: int, population_q: float) -> float:
        """Predicted chance that a never-seen prompt of cluster ``c`` gives a group with spread."""
        w = POPULATION_PRIOR_WEIGHT
        if not self.first_seen[c]:
            return 1.0 - (self.opened_zero + 0.5 * w) / (self.opened + w)
        return 1.0 - (self.first_zero[c] + (1.0 - population_q) * w) / (self.first_seen[c] + w)

    # -- figures ----------------------------------------------------------------------------------
    def coverage(self) -> tuple[float, float]:
        """Coverage per cluster (share of its prompts ever handed out): the minimum and the median."""
        shares = [chosen / size for chosen, size in zip(self.chosen, self.size)]
        return min(shares), float(median(shares))

    def tried(self) -> int:
        """Clusters with at least one prompt handed out."""
        return sum(1 for chosen in self.chosen if chosen)

    # -- checkpoint -------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"unseen": [list(line) for line in self.unseen], "chosen": list(self.chosen),
                "first": [list(self.first_zero), list(self.first_seen)], "opened": [self.opened_zero, self.opened],
                "untried": list(self.untried)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if len(state["unseen"]) != self.k:
            raise ValueError(f"selector state: {len(state['unseen'])} clusters for {self.k}")
        self.unseen = [deque(int(i) for i in line) for line in state["unseen"]]
        self.chosen = [int(x) for x in state["chosen"]]
        self.first_zero, self.first_seen = ([float(x) for x in xs] for xs in state["first"])
        self.opened_zero, self.opened = (float(x) for x in state["opened"])
        self.untried = [int(c) for c in state["untried"]]
