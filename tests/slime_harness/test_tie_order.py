"""Why a leg fixes the order of the groups that finished in one event-loop turn (``harness/tie_order.py``), and that it
does: slime's own drop rule makes the number of waves of a step depend on that order, which ``asyncio.wait``'s done
set leaves to the tasks' memory addresses."""

from __future__ import annotations

import asyncio
import importlib.util

from shopsimrl.sampling import Verdict, filter_output
from shopsimrl.slime.harness.tie_order import CreationOrdered, creation_number, wait_in_creation_order


def _slimes_drop_rule(slime_src):
    """slime's ``should_drop_dynamic_filter_output``, loaded from its file alone (stdlib imports only)."""
    spec = importlib.util.spec_from_file_location(
        "slime_filter_base_types", slime_src / "slime" / "rollout" / "filter_hub" / "base_types.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _drops(slime, order, remaining, target):
    """slime's loop over one turn's done groups (``generate_rollout_async``): how many it drops."""
    dropped = 0
    for verdict in order:
        ours = filter_output(verdict)
        output = slime.DynamicFilterOutput(keep=ours.keep, reason=ours.reason,
                                           keep_when_insufficient=ours.keep_when_insufficient)
        if slime.should_drop_dynamic_filter_output(output, remaining_batch_size=remaining, target_data_size=target):
            remaining -= 1
            dropped += 1
    return dropped, remaining


def test_slimes_waves_depend_on_the_order_of_a_turns_zero_spread_and_technical_groups(slime_src):
    """One zero-spread and one technical group in a turn, one candidate above the batch: zero-spread first drops
    both and leaves slime short (another wave is drawn); technical first keeps the zero-spread group."""
    slime = _slimes_drop_rule(slime_src)
    target = 8
    assert _drops(slime, [Verdict.ZERO_STD, Verdict.TECHNICAL], target + 1, target) == (2, target - 1)
    assert _drops(slime, [Verdict.TECHNICAL, Verdict.ZERO_STD], target + 1, target) == (1, target)


def test_the_groups_of_one_turn_come_in_creation_order():
    """Tasks that finish in the same turn are met in the order they were created, whatever the set's order."""

    async def main():
        async def group(i):
            await asyncio.sleep(0)
            return i

        tasks = [asyncio.create_task(group(i)) for i in range(64)]
        done, pending = await wait_in_creation_order(set(reversed(tasks)), return_when=asyncio.FIRST_COMPLETED)
        return [task.result() for task in done], pending, isinstance(done, set)

    results, pending, is_set = asyncio.run(main())
    assert results == list(range(64)) and not pending and is_set


def test_a_named_task_comes_before_the_numbered_ones():
    async def main():
        async def nothing():
            return None

        named = asyncio.create_task(nothing(), name="eval")
        numbered = asyncio.create_task(nothing())
        await asyncio.gather(named, numbered)
        return [creation_number(t) for t in CreationOrdered({numbered, named})], list(CreationOrdered({numbered, named}))

    numbers, ordered = asyncio.run(main())
    assert numbers[0] == -1 and numbers[1] > 0 and ordered[0].get_name() == "eval"
