"""Adaptive wave size: submit what is predicted to fill the batch, and top up in small refills.

slime's loop submits a whole wave of ``over_sampling_batch_size`` groups whenever
``remaining < rollout_batch_size``.  With per-prompt predictions of zero spread
(:class:`~shopsimrl.sampling.selector.PromptSelector`) we can instead keep just
enough groups in flight that, with probability ``confidence``, at least the
missing number of them will have reward spread:

    P( #informative among the in-flight groups  >=  target − kept )  >=  confidence

Each group is informative independently with probability ``q = 1 − ẑ``, so the
count is Poisson-binomial; :func:`prob_at_least` computes its tail exactly.
After every decision the driver asks :meth:`AdaptiveWaves.refill_size` how many
groups to add (usually 0, 1 or 2) and submits them with
:meth:`WaveController.refill`.  The step's submissions stay within
``over_sampling_batch_size`` (what slime's first wave submits), except where slime
itself would open a new wave: when ``remaining`` would fall below the target.

Everything else is the controller's, unchanged: the filter, ``remaining``, the
fallback (a zero-std group is kept once ``remaining <= target``), abort at
``target`` kept, the consecutive-failure stop.  Because the rule keeps more
groups in flight than are missing whenever some ``q < 1``, ``remaining =
kept + in_flight`` stays above ``target`` and the fallback fires only when the
cap binds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

#: The default probability that the groups in flight fill the batch with informative groups.
DEFAULT_CONFIDENCE = 0.9
WAVE_MODES = ("fixed", "adaptive")
DEFAULT_WAVES = "fixed"


def prob_at_least(qs: Sequence[float], k: int) -> float:
    """P(at least ``k`` successes) for independent Bernoulli(``q``) trials (Poisson-binomial tail), O(len·k)."""
    if k <= 0:
        return 1.0
    if k > len(qs):
        return 0.0
    # dist[j] = P(exactly j successes) for j < k; dist[k] accumulates "k or more".
    dist = [1.0] + [0.0] * k
    for q in qs:
        q = min(1.0, max(0.0, q))
        dist[k] = dist[k] + dist[k - 1] * q
        for j in range(k - 1, 0, -1):
            dist[j] = dist[j] * (1.0 - q) + dist[j - 1] * q
        dist[0] *= 1.0 - q
    return dist[k]


class AdaptiveWaves:
    """How many groups to add now (the controller decides everything else)."""

    def __init__(self, target: int, max_in_flight: int, confidence: float = DEFAULT_CONFIDENCE) -> None:
        if not 0.0 < confidence < 1.0:
            raise ValueError(f"confidence must be within (0, 1), got {confidence!r}")
        if target < 1 or max_in_flight < target:
            raise ValueError(f"need 1 <= target ({target}) <= max_in_flight ({max_in_flight})")
        self.target = target
        self.max_in_flight = max_in_flight
        self.confidence = confidence

    def refill_size(
        self,
        kept: int,
        in_flight_q: Sequence[float],
        next_q: Callable[[int], float],
        submitted: int = 0,
    ) -> int:
        """Groups to submit now.

        ``in_flight_q``: the informative probability of each group in flight;
        ``next_q(j)``: that of the ``j``-th group we add (the driver takes the
        selector's next prompt there); ``submitted``: groups already submitted this
        step.  Always enough to keep ``kept + in_flight >= target`` (slime's
        invariant ``remaining >= target``: where slime opens a new wave); beyond
        that, more while the confidence is not reached, as long as the step's
        submissions stay within ``max_in_flight`` (one wave's worth, slime's
        ``over_sampling_batch_size``).  Past that budget the fallback takes over,
        exactly as after slime's first wave.
        """
        needed = self.target - kept
        if needed <= 0:
            return 0
        qs = list(in_flight_q)
        add = 0
        while True:
            if len(qs) < needed:  # the invariant: never let remaining fall below target
                pass
            elif submitted + add >= self.max_in_flight or prob_at_least(qs, needed) >= self.confidence:
                break
            qs.append(next_q(add))
            add += 1
        return add
