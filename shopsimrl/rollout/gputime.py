"""One time model of a GPU rollout, shared by the main job's modelled clock and the simulator.

An episode is a chain of turns.  A turn reads a page (prefill of its tokens), writes a reply
(decode of its tokens) and, when the reply is an action, waits for the env.  Its solo seconds::

    page_tokens / prefill_tokens_per_s + reply_tokens / decode_tokens_per_s + env_latency_s

Page tokens are the page's characters over ``chars_per_token``.  The heuristic and linear policies
write no text, so their reply has a modelled token count per action: ``reply_tokens`` times the
episode's verbosity, a log-normal factor drawn from the episode's seed (an LLM's replies are long or
short across episodes); a policy that reports its completion tokens (``--policy openai``) uses its own.

Episodes in flight share the engines' throughput (processor sharing, :class:`SharedThroughput`):
with ``m`` in flight each runs at ``min(1, C / m)`` of its solo speed, as an SGLang server's decode
slows per request as its batch grows.  ``C = capacity`` episodes run at full speed.  The env latency
is inside the shared work (a simplification: it is small beside the decode, see ``ENV_LATENCY_S``).

Training: a step trains for ``train_s_per_token`` seconds per trained response token, then syncs
the weights (``rollout/loops.py``: slime's two schedules).  Every constant says where it comes from;
the fitted ones are fitted by ``python -m benchmarks.bench_gpu_clock`` (docs/clock.md).

Pure: modelled seconds in, modelled seconds out; nothing here reads a clock.
"""

from __future__ import annotations

import hashlib
import heapq
import math
import random
from collections.abc import Hashable, Sequence
from dataclasses import asdict, dataclass, field

from shopsimrl.rollout.loops import CALIBRATED_TRAIN_S, CALIBRATED_WEIGHT_SYNC_S
from shopsimrl.sampling.modes import Choice


class Clock(Choice):
    """The clock a main job's step runs on (``--clock``)."""

    MACHINE = "machine"  # groups come back in the order this machine finishes them (the measured seconds)
    MODELLED = "modelled"  # groups come back in modelled GPU time (modelled.py): reproducible, never sleeps


DEFAULT_CLOCK = Clock.MACHINE

#: The release run's mean step time (s): ``perf/rollout_time`` over its 80 steps (tests/data, ``release_figures``).
RELEASE_MEAN_STEP_S = 227.94625
#: Samples the release trains per step: rollout_batch_size 16 x n_samples_per_prompt 8.
RELEASE_TRAINED_SAMPLES = 128

#: Solo decode speed of one episode (tokens/s).  Assumed: no public per-request figure exists for the release's
#: engines.  It cancels: the rollout time depends on ``reply_tokens / decode_tokens_per_s`` (fitted), and training
#: is scaled per modelled token (``TRAIN_S_PER_TOKEN``).
DECODE_TOKENS_PER_S = 50.0
#: Prefill speed of one episode (tokens/s): prefill runs about 20x decode on one GPU (assumed, same ratio as the
#: llama.cpp figures of docs/real-model.md, 68-93 prompt tokens/s against 4-16 generated); small beside decode.
PREFILL_TOKENS_PER_S = 1000.0
#: Characters per token of ShopSim's English pages (the usual rule of thumb for BPE tokenizers on English text).
CHARS_PER_TOKEN = 4.0
#: Env seconds per action: an HTTP env step on loopback is milliseconds (benchmarks/results/env.json); rounded up.
ENV_LATENCY_S = 0.05
#: Fitted to the release's per-step ``rollout_time_s`` (median and 10th-90th percentiles) by
#: ``benchmarks/bench_gpu_clock.py`` on the seed order with fixed waves (``benchmarks/results/gpu_clock.json``).
REPLY_TOKENS_PER_ACTION = 700.0
VERBOSITY_SIGMA = 0.5
CAPACITY_EPISODES = 192.0
#: Modelled response tokens of a release-like episode (the fitted model's mean over the calibration run's
#: episodes, benchmarks/results/gpu_clock.json): with it a release step (128 samples) trains ``CALIBRATED_TRAIN_S``.
CALIBRATION_TOKENS_PER_EPISODE = 3572.2
#: Training seconds per trained response token: the public figure (``CALIBRATED_TRAIN_S``, vllm-project/vime#244
#: scaled to the release's batch) spread over the release step's modelled tokens.
TRAIN_S_PER_TOKEN = CALIBRATED_TRAIN_S / (RELEASE_TRAINED_SAMPLES * CALIBRATION_TOKENS_PER_EPISODE)


def _positive(name: str, value: float | None, *, zero: bool = False) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and (
        value >= 0 if zero else value > 0)
    if not ok:
        raise ValueError(f"{name} must be a finite number {'>= 0' if zero else '> 0'}, got {value!r}")


@dataclass(frozen=True)
class TimeModel:
    """The constants of one modelled GPU rollout and its training (defaults: the calibrated model)."""

    reply_tokens: float = REPLY_TOKENS_PER_ACTION
    verbosity_sigma: float = VERBOSITY_SIGMA
    decode_tokens_per_s: float = DECODE_TOKENS_PER_S
    prefill_tokens_per_s: float = PREFILL_TOKENS_PER_S
    chars_per_token: float = CHARS_PER_TOKEN
    env_latency_s: float = ENV_LATENCY_S
    capacity: float | None = CAPACITY_EPISODES  # None: no sharing
    train_s_per_token: float = TRAIN_S_PER_TOKEN
    weight_sync_s: float = CALIBRATED_WEIGHT_SYNC_S

    def __post_init__(self) -> None:
        for name in ("reply_tokens", "decode_tokens_per_s", "prefill_tokens_per_s", "chars_per_token"):
            _positive(name, getattr(self, name))
        for name in ("verbosity_sigma", "env_latency_s", "train_s_per_token", "weight_sync_s"):
            _positive(name, getattr(self, name), zero=True)
        if self.capacity is not None:
            _positive("capacity (episodes at full speed)", self.capacity)

    def as_dict(self) -> dict[str, float | None]:
        return asdict(self)

    def verbosity(self, seed: int) -> float:
        """The episode's reply-length factor: log-normal, median 1, drawn from its seed alone."""
        digest = hashlib.blake2b(f"shopsimrl-gputime/{seed}".encode(), digest_size=8).digest()
        return math.exp(self.verbosity_sigma * random.Random(int.from_bytes(digest, "big")).gauss(0.0, 1.0))

    def episode(self, seed: int, turns: int, page_chars: Sequence[int],
                completion_tokens: int | None = None) -> EpisodeTime:
        """One episode's turns on the model: turn ``i`` reads page ``i`` (the reset page first)."""
        if completion_tokens is not None and turns:
            reply = completion_tokens / turns  # a policy that counts its tokens
        else:
            reply = self.reply_tokens * self.verbosity(seed)
        ends, t = [], 0.0
        for i in range(turns):
            page = page_chars[i] / self.chars_per_token if i < len(page_chars) else 0.0
            t += page / self.prefill_tokens_per_s + reply / self.decode_tokens_per_s + self.env_latency_s
            ends.append(t)
        return EpisodeTime(ends, reply * turns)

    def train_seconds(self, trained_tokens: float) -> float:
        return trained_tokens * self.train_s_per_token


@dataclass(frozen=True)
class EpisodeTime:
    """An episode's solo seconds at the end of each turn, and the response tokens it wrote."""

    turn_ends: list[float] = field(default_factory=list)
    tokens: float = 0.0

    @property
    def solo_seconds(self) -> float:
        return self.turn_ends[-1] if self.turn_ends else 0.0

    def turns_by(self, solo_seconds: float) -> int:
        """Turns finished after ``solo_seconds`` of its own work (an abort cuts the episode there)."""
        return sum(1 for end in self.turn_ends if end <= solo_seconds)


class SharedThroughput:
    """Processor sharing: ``start`` episodes, ``next`` gives the time and keys of the next to finish.

    Virtual time advances at the common rate ``min(1, C / in_flight)``; an episode of solo
    duration ``w`` started at virtual time ``v`` finishes when virtual time reaches ``v + w``.
    """

    def __init__(self, capacity: float | None) -> None:
        if capacity is not None and not capacity > 0.0:
            raise ValueError(f"capacity must be > 0 episodes (or None: no sharing), got {capacity!r}")
        self.capacity = capacity
        self.now = 0.0
        self._virtual = 0.0
        self._heap: list[tuple[float, int, Hashable]] = []
        self._seq = 0
        self._cancelled: set[Hashable] = set()
        self.in_flight = 0

    @property
    def virtual(self) -> float:
        """Solo seconds of work every episode in flight since the start has done (an episode's progress is
        this minus its value when it started)."""
        return self._virtual

    def rate(self) -> float:
        c, m = self.capacity, self.in_flight
        return 1.0 if c is None or m <= c else c / m

    def start(self, key: Hashable, solo_seconds: float) -> None:
        heapq.heappush(self._heap, (self._virtual + solo_seconds, self._seq, key))
        self._seq += 1
        self.in_flight += 1

    def cancel(self, keys: Sequence[Hashable]) -> None:
        """Stop these episodes (aborted): they stop sharing the throughput at once."""
        fresh = set(keys) - self._cancelled
        self._cancelled |= fresh
        self.in_flight -= len(fresh)

    def next(self) -> tuple[float, list[Hashable]]:
        """Advance to the next finish; every episode finishing at that instant (``IndexError``: none in flight)."""
        heap, cancelled = self._heap, self._cancelled
        while heap and heap[0][2] in cancelled:
            cancelled.discard(heapq.heappop(heap)[2])
        if not heap:
            raise IndexError("no episode in flight")
        finish = heap[0][0]
        # no sharing: simulated time is virtual time (set, not summed, so it carries no rounding drift)
        self.now = finish if self.capacity is None else self.now + (finish - self._virtual) / self.rate()
        self._virtual = finish
        done: list[Hashable] = []
        while heap and (heap[0][0] == finish or heap[0][2] in cancelled):
            _f, _s, key = heapq.heappop(heap)
            if key in cancelled:
                cancelled.discard(key)
                continue
            done.append(key)
        self.in_flight -= len(done)
        return self.now, done


def makespan(durations: Sequence[float], capacity: float | None) -> float:
    """Wall time until every episode of one wave (all started at once) is done."""
    clock = SharedThroughput(capacity)
    for i, d in enumerate(durations):
        clock.start(i, d)
    end = 0.0
    while clock.in_flight:
        end, _ = clock.next()
    return end
