"""A script run against a selector, checking the contract at every call (the selector tests share it).

A script step is (k to ask for, how to finish each prompt in flight: ``same`` records an all-same group,
``varied`` one with spread, ``release`` gives it back, ``keep`` leaves it in flight).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from shopsimrl.sampling.evidence import NotEnoughPromptsError


def drive(sel: Any, actions: Any, trace: list | None = None, check: Callable[[list], None] | None = None) -> None:
    """Run ``actions`` against ``sel``: k refused when fewer are free (then the free ones asked for), k distinct
    prompts, never one already in flight; each call's prompts appended to ``trace`` and given to ``check`` (a
    rule's own checks) before the prompts in flight are finished."""
    for k, fates in actions:
        free = len(sel) - len(sel.in_flight)
        if k > free:
            with pytest.raises(NotEnoughPromptsError):
                sel.next_prompts(k)
            k = free
        before = set(sel.in_flight)
        got = sel.next_prompts(k)
        assert len(got) == k
        assert len(set(got)) == k, "k distinct prompts"
        assert not before & set(got), "never a prompt already in flight"
        if trace is not None:
            trace.append(got)
        if check is not None:
            check(got)
        for pid, fate in zip(sorted(sel.in_flight), fates):
            if fate == "same":
                sel.record(pid, [1.0] * 8)
            elif fate == "varied":
                sel.record(pid, [1.0, 0.0] * 4)
            elif fate == "release":
                sel.release(pid)
