"""The ``weight`` check: slime's training actor gets each trained group's GRPO advantages times the importance weight
its samples were drawn with (the skip rule's, ``shopsim_weight``; 1 without one)."""

from __future__ import annotations

from typing import Any

from shopsimrl.sampling import grpo_advantages
from shopsimrl.sampling.modes import DEFAULT_SELECTION, Selection
from shopsimrl.slime.harness.outcome import Outcome, Status
from shopsimrl.slime.harness.recorded_leg import nothing_to_compare, trained_groups

#: The selections that skip prompts in their order, and so weigh the groups they hand out (``shopsim_weight``).
SKIPPING = frozenset({Selection.SKIP, Selection.FORECAST})


def check_weights(leg: dict[str, Any]) -> Outcome:
    if missing := nothing_to_compare(leg):
        return missing
    args = leg["args"]
    if not args.get("rewards_normalization", True) or args.get("advantage_estimator", "grpo") != "grpo":
        return Outcome.not_applicable("the advantages are not GRPO's group-normalized rewards in this run")
    if any("advantages" not in row for row in leg["trained"].values()):
        return Outcome.not_run("the training actor's advantages were not recorded")
    weights = {int(k): float(v) for k, v in leg.get("weights", {}).items()}
    std = bool(args.get("grpo_std_normalization", True))
    problems: list[str] = []
    weighted = 0
    for step in sorted(leg["trained"], key=int):
        row = leg["trained"][step]
        at = {index: position for position, index in enumerate(row["sample_indices"])}
        for group, members in sorted(trained_groups(leg, step).items()):
            drawn = {weights.get(i, 1.0) for i in members}
            if len(drawn) != 1:
                problems.append(f"step {step} group {group}: its samples were drawn with weights {sorted(drawn)}")
                continue
            weight = drawn.pop()
            weighted += weight > 1.0
            plain = grpo_advantages(members, [row["raw_reward"][at[i]] for i in members], std_normalization=std)
            got = [row["advantages"][at[i]] for i in members]
            if any(abs(g - weight * a) > 1e-4 * max(1.0, abs(weight * a)) for g, a in zip(got, plain)):
                problems.append(f"step {step} group {group} (weight {weight:g}): advantages {got} != "
                                f"{weight:g} x {[round(a, 4) for a in plain]}")
    if problems:
        return Outcome.of(problems[:5])
    if not weighted and Selection.parse(args.get("shopsim_selection") or DEFAULT_SELECTION) in SKIPPING:
        return Outcome.not_run("no trained group carried an importance weight above 1: the weight went untested")
    return Outcome(Status.PASS, note=f"{weighted} trained group(s) with an importance weight above 1")
