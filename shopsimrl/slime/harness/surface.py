"""slime's call sites ShopSim relies on: each name where we expect it, with the parameters we pass.

``python -m shopsimrl.slime.harness.surface SLIME_SRC`` prints a JSON list of mismatches
(a module or name that moved, a changed signature, a missing field); empty: all found.
Runs with the stand-ins installed (slime's modules import torch at module level).
"""

from __future__ import annotations

import importlib
import inspect
import json
import sys
import tempfile
from typing import Any

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
        except (ImportError, AttributeError) as exc:
            found.append(f"{module_name}.{name}: not found ({type(exc).__name__}: {exc})")
            continue
        have = _parameters(fn)
        if have[: len(wanted)] != list(wanted):
            found.append(f"{module_name}.{name}: signature changed: ({', '.join(have)}), ShopSim passes ({', '.join(wanted)})")
    for module_name, name, attributes in CLASSES:
        try:
            cls = getattr(importlib.import_module(module_name), name)
        except (ImportError, AttributeError) as exc:
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
    except (ImportError, AttributeError) as exc:
        found.append(f"slime.utils.types.Sample.Status: not found ({exc})")
    return found


def main() -> None:
    from shopsimrl.slime.harness import stand_ins

    try:
        stand_ins.install(sys.argv[1], tempfile.mkdtemp(prefix="shopsim-surface-"))
        result = problems()
    except Exception as exc:  # the checkout itself does not import: that is the mismatch
        result = [f"slime does not import with the stand-ins: {type(exc).__name__}: {exc}"]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
