"""A literal, unoptimised transcription of slime's ``generate_rollout_async`` loop (docs/dynamic-sampling.md §8).

Independent of ``WaveController`` on purpose: the property tests check that the
state machine and ``replay`` decide exactly as this loop does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any


def slime_loop(supply: Sequence[tuple[str, float]], target: int, wave_size: int, failure_limit: int = 10**9,
               order: Callable[[Iterable[int]], Iterable[int]] = sorted) -> dict[str, Any]:
    """supply: [(verdict_str, duration)]. Returns dict of outcome lists, or raises RuntimeError on the stop.

    ``order(done)``: the order a batch is filtered in (slime: its done set's; ShopSimRL: submission order);
    ``batches`` in the result are the batches as filtered, [(index, verdict_str), ...] each.
    """
    data: list[int] = []
    fallback: list[int] = []
    dropped: list[int] = []
    surplus: list[int] = []
    decisions: list[tuple[int, str]] = []
    batches: list[list[tuple[int, str]]] = []
    remaining, submitted, now, streak = 0, 0, 0.0, 0
    pending: dict[int, float] = {}  # index -> completion time
    while len(data) < target:
        while remaining < target:
            if submitted + wave_size > len(supply):
                raise LookupError("supply exhausted")
            for i in range(submitted, submitted + wave_size):
                pending[i] = now + supply[i][1]
            submitted += wave_size
            remaining += wave_size
        now = min(pending.values())
        done = list(order(i for i, t in pending.items() if t == now))
        for i in done:
            del pending[i]
        batches.append([(i, supply[i][0]) for i in done])
        for i in done:
            verdict = supply[i][0]
            streak = streak + 1 if verdict == "technical" else 0
            if streak >= failure_limit:
                raise RuntimeError("stop")
            keep = verdict == "varied"
            keep_when_insufficient = verdict == "zero_std"
            if not keep and not (keep_when_insufficient and remaining <= target):
                remaining -= 1
                dropped.append(i)
                decisions.append((i, "dropped"))
                continue
            if len(data) < target:
                data.append(i)
                if not keep:
                    fallback.append(i)
                decisions.append((i, "accepted" if keep else "fallback"))
            else:
                surplus.append(i)
                decisions.append((i, "surplus"))
    return {
        "kept": data,
        "fallback": fallback,
        "dropped": sorted(dropped),
        "surplus": surplus,
        "aborted": sorted(pending),
        "submitted": submitted,
        "remaining": remaining,
        "decisions": decisions,
        "batches": batches,
    }
