"""Play ShopSim in a terminal: read the page, type ``search ...`` / ``click ...``.

Works with piped stdin too (the tests drive it that way): lines are read one by
one, end of input quits.  A person sees exactly the text a model reads.
"""

from __future__ import annotations

import random
import sys
from typing import TextIO

from rich.console import Console
from rich.table import Table

from shopsimrl.env.core import ShopSimEnv
from shopsimrl.env.types import EnvError, StepResult

HELP = ("Commands: search <words> | click <value> (also search[...] / click[...]) | help | quit\n"
        "Clickable values are listed in the page's Actions line and on the page itself.")

_DETAIL_ROWS = ("reward", "r_type", "r_att", "r_option", "r_price", "r_strict", "r_loose", "r_success",
                "n_att", "m_att", "n_opt", "m_opt", "purchased_product_id", "chosen_options", "sku_price",
                "budget", "budget_kind", "end_reason")


def to_action(line: str) -> str | None:
    """A typed line as an env action; None for a line that is no action (blank)."""
    text = line.strip()
    if not text:
        return None
    low = text.lower()
    if low.startswith(("search[", "click[")):
        return text
    verb, _, rest = text.partition(" ")
    if verb.lower() in ("search", "click", "s", "c"):
        kind = "search" if verb.lower() in ("search", "s") else "click"
        return f"{kind}[{rest.strip()}]"
    return text  # let the env explain what is wrong with it


def reward_table(detail: dict[str, object]) -> Table:
    table = Table(title="Reward detail")
    table.add_column("component")
    table.add_column("value", justify="right")
    for key in _DETAIL_ROWS:
        if key in detail:
            value = detail[key]
            shown = f"{value:.3f}" if isinstance(value, float) else str(value)
            table.add_row(key, shown)
    return table


def play(env: ShopSimEnv, task_id: str | None = None, split: str = "train", *, stdin: TextIO | None = None,
         console: Console | None = None) -> int:
    """Run one interactive episode; returns 0 after a purchase or quit, 1 on an unknown task."""
    stdin = stdin or sys.stdin
    console = console or Console(highlight=False, soft_wrap=True)
    try:
        task_id = task_id or random.choice(env.list_tasks(split))
        start = env.reset(task_id)
    except EnvError as exc:
        console.print(f"error: {exc.message}", markup=False)
        return 1
    console.print(f"Task {task_id} ({start.task.split}). {HELP}", markup=False)
    console.print(start.observation.text, markup=False)
    lease = start.lease_id
    try:
        while True:
            console.print("> ", end="", markup=False)
            line = stdin.readline()
            if not line:
                console.print("\n(end of input) bye.", markup=False)
                return 0
            command = line.strip().lower()
            if command in ("quit", "exit", "q"):
                console.print("bye.", markup=False)
                return 0
            if command in ("help", "?"):
                console.print(HELP, markup=False)
                continue
            action = to_action(line)
            if action is None:
                continue
            try:
                result: StepResult = env.step(lease, action)
            except EnvError as exc:
                console.print(f"error ({exc.code}): {exc.message}", markup=False)
                continue
            console.print(result.observation.text, markup=False)
            if result.done:
                console.print(reward_table(result.info.get("reward_detail", {})))
                return 0
    finally:
        env.release(lease)
