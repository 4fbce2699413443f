"""slime's call sites ShopSim relies on: each name where we expect it, with the parameters we pass.

``python -m shopsimrl.slime.harness.surface SLIME_SRC SCRATCH`` writes ``SCRATCH/surface.json``
(and prints it): ``{"imported": ..., "problems": [...]}``, whether slime imports at all with
the stand-ins installed (slime's modules import torch at module level; files they need go to SCRATCH),
and the mismatches (a module or name that moved, a changed signature, a missing field);
no problems: all found.
"""

from __future__ import annotations

import importlib
import inspect
import json
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

from shopsimrl.io import atomic_write_text
from shopsimrl.slime.harness.children import die_with_parent

RESULT = "surface.json"

#: (module, name, parameters our code passes, in order).  None: a class, checked for ``fields``.
FUNCTIONS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("slime.rollout.sglang_rollout", "generate_rollout", ("args", "rollout_id", "data_source", "evaluation")),
    ("slime.rollout.sglang_rollout", "generate_rollout_async", ("args", "rollout_id", "data_source")),
    ("slime.rollout.sglang_rollout", "generate_and_rm_group", ("args", "group", "sampling_params", "evaluation")),
    ("slime.rollout.sglang_rollout", "generate_and_rm", ("args", "sample", "sampling_params", "evaluation")),
    ("slime.rollout.sglang_rollout", "abort", ("args", "rollout_id")),
    ("slime.rollout.filter_hub.base_types", "call_dynamic_filter", ("fn", "args")),
    ("slime.utils.misc", "load_function", ("path",)),
    ("slime.utils.async_utils", "run", ("coro",)),
    ("slime.observability.rollout_metrics", "log_rollout_data",
     ("rollout_id", "args", "samples", "rollout_extra_metrics", "rollout_time")),
    ("slime.observability.rollout_metrics", "log_eval_rollout_data", ("rollout_id", "args", "data", "extra_metrics")),
    ("slime.rollout.base_types", "call_rollout_fn", ("fn",)),
)
#: (module, class, attributes or dataclass fields we read or write)
CLASSES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("slime.rollout.sglang_rollout", "GenerateState", ("reset", "submit_generate_tasks")),
    ("slime.rollout.filter_hub.base_types", "DynamicFilterOutput", ("keep", "reason", "keep_when_insufficient")),
    ("slime.rollout.filter_hub.base_types", "MetricGatherer", ("on_dynamic_filter_drop", "collect")),
    ("slime.rollout.base_types", "RolloutFnTrainOutput", ("samples", "metrics")),
    ("slime.rollout.base_types", "RolloutFnEvalOutput", ("data", "metrics")),
    ("slime.utils.types", "Sample", ("group_index", "index", "rollout_id", "prompt", "tokens", "response",
                                      "response_length", "reward", "loss_mask", "rollout_log_probs", "remove_sample",
                                      "status", "metadata")),
    ("slime.rollout.data_source", "RolloutDataSourceWithBuffer", ("get_samples", "add_samples", "save", "load")),
)


def _parameters(fn: Any) -> list[str]:
    return list(inspect.signature(inspect.unwrap(fn)).parameters)


def problems() -> list[str]:
    found: list[str] = []
    for module_name, name, wanted in FUNCTIONS:
        try:
            fn = getattr(importlib.import_module(module_name), name)
        except Exception as exc:  # moved, renamed, or its module fails to import
            found.append(f"{module_name}.{name}: not found ({type(exc).__name__}: {exc})")
            continue
        have = _parameters(fn)
        if have[: len(wanted)] != list(wanted):
            found.append(f"{module_name}.{name}: signature changed: ({', '.join(have)}), ShopSim passes ({', '.join(wanted)})")
    for module_name, name, attributes in CLASSES:
        try:
            cls = getattr(importlib.import_module(module_name), name)
        except Exception as exc:  # moved, renamed, or its module fails to import
            found.append(f"{module_name}.{name}: not found ({type(exc).__name__}: {exc})")
            continue
        have = set(getattr(cls, "__dataclass_fields__", {})) | set(dir(cls))
        missing = [a for a in attributes if a not in have]
        if missing:
            found.append(f"{module_name}.{name}: no {', '.join(missing)}")
    try:
        status = importlib.import_module("slime.utils.types").Sample.Status
        missing = [s for s in ("PENDING", "COMPLETED", "TRUNCATED", "ABORTED") if not hasattr(status, s)]
        if missing:
            found.append(f"slime.utils.types.Sample.Status: no {', '.join(missing)}")
    except Exception as exc:  # moved, renamed, or its module fails to import
        found.append(f"slime.utils.types.Sample.Status: not found ({exc})")
    return found + double_problems()


def double_problems() -> list[str]:
    """The rollout double (:mod:`.double.rollout`, which the in-process tests drive the hook with) against this slime.

    Each of its ``Sample`` fields and statuses exists on slime's, and slime's parameters of
    ``generate_and_rm``, ``generate_and_rm_group`` and ``abort`` start the double's: tests that
    pass against the double then test what slime does.
    """
    # the double loads httpx: only in the child that compares it with slime
    from shopsimrl.slime.harness.double import rollout as double

    found: list[str] = []
    try:
        real = importlib.import_module("slime.utils.types").Sample
        rollout = importlib.import_module("slime.rollout.sglang_rollout")
    except Exception as exc:  # reported above, as not found
        return [f"the slime double could not be compared: {type(exc).__name__}: {exc}"]
    extra = [f.name for f in fields(double.Sample) if f.name not in getattr(real, "__dataclass_fields__", {})]
    if extra:
        found.append(f"the slime double's Sample has fields slime's has not: {', '.join(extra)}")
    statuses = [s.name for s in double.Sample.Status if not hasattr(getattr(real, "Status", None), s.name)]
    if statuses:
        found.append(f"the slime double's Sample.Status has members slime's has not: {', '.join(statuses)}")
    for name in ("generate_and_rm", "generate_and_rm_group", "abort"):
        ours, theirs = _parameters(getattr(double, name)), _parameters(getattr(rollout, name, None) or (lambda: None))
        if ours[: len(theirs)] != theirs:
            found.append(f"the slime double's {name}({', '.join(ours)}) does not take slime's ({', '.join(theirs)})")
    return found + _package_problems()


def _package_problems() -> list[str]:
    """The rest of the double's slime package (:mod:`.double.slime_modules`) against this slime: the same dataclass
    fields, methods and parameters."""
    # the double's package: only in the child that compares it with slime
    from shopsimrl.slime.harness.double import slime_modules as double

    found: list[str] = []
    for module_name, name in (("slime.rollout.filter_hub.base_types", "DynamicFilterOutput"),
                              ("slime.rollout.base_types", "RolloutFnTrainOutput"),
                              ("slime.rollout.base_types", "RolloutFnEvalOutput")):
        real = getattr(importlib.import_module(module_name), name, None)
        theirs = list(getattr(real, "__dataclass_fields__", {}))
        ours = [f.name for f in fields(getattr(double, name))]
        if ours != theirs:
            found.append(f"the slime double's {name} has fields ({', '.join(ours)}), slime's ({', '.join(theirs)})")
    gatherer = getattr(importlib.import_module("slime.rollout.filter_hub.base_types"), "MetricGatherer", None)
    missing = [m for m in ("on_dynamic_filter_drop", "collect") if not hasattr(gatherer, m)]
    if missing:
        found.append(f"slime's MetricGatherer has no {', '.join(missing)}, which the slime double restates")
    for module_name, name in (("slime.rollout.filter_hub.base_types", "call_dynamic_filter"),
                              ("slime.utils.misc", "load_function"), ("slime.utils.async_utils", "run")):
        real = getattr(importlib.import_module(module_name), name, None) or (lambda: None)
        ours, theirs = _parameters(getattr(double, name)), _parameters(real)
        if ours != theirs:
            found.append(f"the slime double's {name}({', '.join(ours)}) differs from slime's ({', '.join(theirs)})")
    return found


def main(argv: list[str] | None = None) -> None:
    # the stand-ins belong in the child only, never in the check's own process
    from shopsimrl.slime.harness.double import stand_ins

    die_with_parent()
    src, scratch = sys.argv[1:3] if argv is None else argv[:2]
    try:
        stand_ins.install(src, scratch)
    except Exception as exc:  # the checkout itself does not import: nothing else can run
        result = {"imported": False, "problems": [f"slime does not import with the stand-ins: {type(exc).__name__}: {exc}"]}
    else:
        result = {"imported": True, "problems": problems()}
    atomic_write_text(Path(scratch) / RESULT, json.dumps(result))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
