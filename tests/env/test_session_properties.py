"""SlotPool as a state machine (hypothesis): slots are never lost or shared, idle leases expire
exactly after the TTL, an abandoned acquire takes nothing, a stale id frees nothing."""

from __future__ import annotations

import threading

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from shopsimrl.env.sessions import AcquireAbandoned, SlotPool
from shopsimrl.env.types import LeaseConflictError, NoFreeSlotError

SLOTS = 3
TTL = 10.0


class PoolMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.pool: SlotPool[int] = SlotPool(SLOTS, idle_timeout=TTL, clock=lambda: self.now)
        self.live: dict[str, float] = {}  # lease id -> last use, as the model sees it
        self.slot_of: dict[str, int] = {}
        self.dead: list[str] = []  # released or expired ids
        self.expired = 0

    def _expire(self) -> None:
        """The model of reclaiming: a lease unused for more than TTL is gone."""
        for lease_id, used in list(self.live.items()):
            if used < self.now - TTL:
                del self.live[lease_id]
                self.dead.append(lease_id)
                self.expired += 1

    @rule(seconds=st.sampled_from([0.0, 1.0, 4.0, TTL - 0.5, TTL + 0.5]))
    def wait(self, seconds: float) -> None:
        self.now += seconds

    @rule()
    def acquire(self) -> None:
        self._expire()
        if len(self.live) < SLOTS:
            lease = self.pool.acquire(0, timeout=0)
            self.live[lease.lease_id] = self.now
            self.slot_of[lease.lease_id] = lease.slot
        else:
            with pytest.raises(NoFreeSlotError):
                self.pool.acquire(0, timeout=0)

    @rule()
    def abandoned_acquire(self) -> None:
        gone = threading.Event()
        gone.set()
        free_before = self.pool.counters()["free_slots"]
        self._expire()
        with pytest.raises(AcquireAbandoned):
            self.pool.acquire(0, timeout=0, cancelled=gone)
        assert self.pool.counters()["free_slots"] >= free_before  # took nothing (expiry may free some)

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def use(self, data: st.DataObject) -> None:
        lease_id = data.draw(st.sampled_from(list(self.live)))  # insertion order: the ids are random
        self.pool.get(lease_id)
        self.live[lease_id] = self.now

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        lease_id = data.draw(st.sampled_from(list(self.live)))  # insertion order: the ids are random
        self.pool.release(lease_id)
        del self.live[lease_id]
        self.dead.append(lease_id)

    @precondition(lambda self: self.dead)
    @rule(data=st.data())
    def stale_release(self, data: st.DataObject) -> None:
        self._expire()
        before = self.pool.counters()["free_slots"]
        lease_id = data.draw(st.sampled_from(self.dead))
        with pytest.raises(LeaseConflictError):
            self.pool.release(lease_id)
        assert self.pool.counters()["free_slots"] == before

    @invariant()
    def slots_are_conserved_and_never_shared(self) -> None:
        self._expire()
        counters = self.pool.counters()
        assert counters["leased"] == len(self.live)
        assert counters["free_slots"] + counters["leased"] == SLOTS
        assert counters["expired"] == self.expired
        slots = [self.slot_of[i] for i in self.live]
        assert len(set(slots)) == len(slots)


TestSlotPool = PoolMachine.TestCase
TestSlotPool.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)
