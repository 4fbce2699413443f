"""Speed of the decision core: controller decisions per second and a 1,000,000-group replay.

Target (2-core machine): <= 2 µs per decision.
"""

from __future__ import annotations

import random
import time

from benchmarks.common import command_line, machine, publish
from shopsimrl.sampling import Verdict, WaveController, replay

VERDICTS = (Verdict.VARIED, Verdict.ZERO_STD, Verdict.TECHNICAL)
WEIGHTS = (0.45, 0.45, 0.10)


def _verdict_stream(n: int, seed: int) -> list[Verdict]:
    rng = random.Random(seed)
    return rng.choices(VERDICTS, WEIGHTS, k=n)


def bench_decisions(n: int, *, batch: int, seed: int = 0) -> dict[str, float]:
    """One long step (target n//2, wave n) fed in batches of ``batch`` simultaneous completions."""
    verdicts = _verdict_stream(n, seed)
    ctrl = WaveController(n // 2, n, 10**9)
    ctrl.submit()
    decided = 0
    start = time.perf_counter()
    if batch == 1:
        complete = ctrl.complete
        for i, v in enumerate(verdicts):
            if ctrl.done:
                break
            complete(i, v)
            decided += 1
    else:
        for lo in range(0, n, batch):
            if ctrl.done:
                break
            decided += len(ctrl.complete_batch([(i, verdicts[i]) for i in range(lo, min(n, lo + batch))]))
    seconds = time.perf_counter() - start
    return {"decisions": decided, "seconds": seconds, "us_per_decision": seconds / decided * 1e6,
            "decisions_per_second": decided / seconds}


def bench_replay(n: int, *, seed: int = 1) -> dict[str, float]:
    """Replay a supply of n groups that one step consumes entirely.

    With target = the number of varied groups, every other group is decided while
    ``remaining > target`` (it is dropped), so all n groups get a decision in one wave.
    """
    rng = random.Random(seed)
    verdicts = _verdict_stream(n, seed)
    # varied groups finish last, so every one of the n groups gets a decision before the step ends
    supply = [(v, rng.random() * 100.0 + (100.0 if v is Verdict.VARIED else 0.0)) for v in verdicts]
    varied = sum(v is Verdict.VARIED for v in verdicts)
    start = time.perf_counter()
    result = replay(supply, rollout_batch_size=varied, over_sampling_batch_size=n, max_consecutive_failed_groups=10**9)
    seconds = time.perf_counter() - start
    return {"groups": n, "decisions": result.completed, "seconds": seconds,
            "us_per_decision": seconds / result.completed * 1e6}


def main(quick: bool = False) -> dict[str, object]:
    n = 100_000 if quick else 1_000_000
    results = {
        "machine": machine(),
        "controller_one_at_a_time": bench_decisions(n, batch=1),
        "controller_batches_of_32": bench_decisions(n, batch=32),
        "replay": bench_replay(n),
        "target_us_per_decision": 2.0,
    }
    results["meets_target"] = results["controller_one_at_a_time"]["us_per_decision"] <= 2.0
    publish("benchmarks/results/sampling.json", results)
    return results


if __name__ == "__main__":
    command_line(main, __doc__)
