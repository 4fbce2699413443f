"""Each prompt's record on earlier runs, as a difficulty label the ``forecast`` rule reads.

A trainer who ran the same prompts before (a sweep, an earlier seed) knows which ones ended with every sibling
agreeing.  ``shopsimrl data export --zero-spread-from RUN ...`` writes that as a numeric label of the prompt file
(``zero_spread_share``: the share of a prompt's scored groups with zero spread), which the main job reads with
``--prompt-labels`` and slime's data source from the same file; the rule reads it by its decile
(docs/forecast.md).  Only complete steps count (``complete.json``), every file is read bounded, and a folder that is
not a run, or a run of another in-process catalog, is refused in one line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from shopsimrl.io import BadFileError, read_json_object, read_jsonl_objects
from shopsimrl.learn.resume import step_number
from shopsimrl.rollout.journal import MARKER
from shopsimrl.sampling.verdict import Verdict

#: The label written into the prompt file's metadata.
LABEL = "zero_spread_share"
RUN_LIMIT = 1 << 20
EVENTS_LIMIT = 64 << 20
SCORED = (Verdict.ZERO_STD.value, Verdict.VARIED.value)


class NotARunError(BadFileError):
    """A folder given as an earlier run that is not one, holds no complete step, or ran on another catalog."""


def zero_spread_shares(runs: Sequence[Path], catalog: Mapping[str, Any] | None = None) -> dict[str, float]:
    """Each task's share of zero-spread groups over the complete steps of ``runs`` (technical drops do not count;
    tasks never scored are absent), to three decimals.  ``catalog`` (``products``, ``catalog_seed``): the in-process
    catalog the prompt file lists; a run recorded on another one is refused."""
    counts: dict[str, list[int]] = {}
    for run in runs:
        if not (run / "run.json").is_file():
            raise NotARunError(f"{run}: not a run folder of shopsimrl rollout (no run.json)")
        record = read_json_object(run / "run.json", RUN_LIMIT, "run.json")
        if catalog is not None and record.get("env") == "inprocess":
            theirs = {key: record.get(key) for key in catalog}
            if theirs != dict(catalog):
                raise NotARunError(f"{run}: ran on the in-process catalog {theirs}, not this export's {dict(catalog)}: "
                                   "its task ids name other tasks")
        steps = [p for p in run.iterdir() if step_number(p.name) is not None and (p / MARKER).is_file()]
        if not steps:
            raise NotARunError(f"{run}: no complete step ({MARKER}) to read outcomes from")
        for step in steps:
            for _line, event in read_jsonl_objects(step / "events.jsonl", EVENTS_LIMIT, "events.jsonl"):
                task = event.get("task_id")
                if event.get("event") == "decision" and event.get("verdict") in SCORED and isinstance(task, str):
                    pair = counts.setdefault(task, [0, 0])
                    pair[0] += event["verdict"] == Verdict.ZERO_STD.value
                    pair[1] += 1
    return {task: round(zero / total, 3) for task, (zero, total) in sorted(counts.items())}
