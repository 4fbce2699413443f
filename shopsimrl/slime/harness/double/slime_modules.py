"""The double's slime package: every slime module ShopSim's hooks and rollout function import, for ``sys.modules``.

:func:`shopsimrl.slime.harness.double.rollout.install` registers them (``slime``, ``slime.rollout``,
``slime.rollout.sglang_rollout`` from :mod:`.rollout`, and the ones below), so an in-process test
runs the hooks and the rollout function against one restatement of slime.  Each name is read from
slime's source (THUDM/slime); the ``surface`` check of ``shopsimrl slime check`` holds the same names
against the user's slime:

- ``slime/rollout/filter_hub/base_types.py``: ``DynamicFilterOutput`` (``keep``, ``reason``,
  ``keep_when_insufficient``), ``call_dynamic_filter`` (``None`` keeps; a value that is not a
  ``DynamicFilterOutput`` is wrapped as ``keep=<value>``), ``MetricGatherer`` (drops counted per truthy
  reason, collected as ``rollout/dynamic_filter/drop_<reason>``);
- ``slime/rollout/base_types.py``: ``RolloutFnTrainOutput(samples, metrics)``, ``RolloutFnEvalOutput(data, metrics)``;
- ``slime/rollout/sample_hooks.py``: ``_current_rollout_id`` (``None`` until a rollout sets it);
- ``slime/utils/async_utils.py``: ``run(coro)``, the coroutine run to its end (slime: on its background
  loop's thread; the double: on a fresh event loop in the caller's thread);
- ``slime/utils/misc.py``: ``load_function(path)``;
- ``slime/utils/types.py``: ``Sample``.

slime's ``generate_rollout`` (``sglang_rollout``) is not restated: the double refuses it, and a test
that needs slime's own evaluation to be called puts its own in its place.
"""

from __future__ import annotations

import asyncio
import importlib
import types
from collections import defaultdict
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any


@dataclass
class DynamicFilterOutput:
    keep: bool
    reason: str | None = None
    keep_when_insufficient: bool = False


def call_dynamic_filter(fn: Any, *args: Any, **kwargs: Any) -> DynamicFilterOutput:
    if fn is None:
        return DynamicFilterOutput(keep=True)
    output = fn(*args, **kwargs)
    if not isinstance(output, DynamicFilterOutput):
        output = DynamicFilterOutput(keep=output)
    return output


class MetricGatherer:
    def __init__(self) -> None:
        self._dynamic_filter_drop_reason_count: defaultdict[str, int] = defaultdict(int)

    def on_dynamic_filter_drop(self, reason: str | None) -> None:
        if not reason:
            return
        self._dynamic_filter_drop_reason_count[reason] += 1

    def collect(self) -> dict[str, int]:
        return {f"rollout/dynamic_filter/drop_{reason}": count
                for reason, count in self._dynamic_filter_drop_reason_count.items()}


@dataclass
class RolloutFnTrainOutput:
    samples: list[list[Any]]
    metrics: dict[str, Any] | None = None


@dataclass
class RolloutFnEvalOutput:
    data: dict[str, dict[str, Any]]
    metrics: dict[str, Any] | None = None


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coro)


def load_function(path: str) -> Any:
    module_path, _, attr = path.rpartition(".")
    return getattr(importlib.import_module(module_path), attr)


def generate_rollout(args: Any, rollout_id: int, data_source: Any, evaluation: bool = False) -> Any:
    raise NotImplementedError("the slime double does not restate slime's generate_rollout: a test that needs it "
                              "puts its own in slime.rollout.sglang_rollout")


def _module(name: str, **attributes: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    for key, value in attributes.items():
        setattr(module, key, value)
    return module


def modules(sglang_rollout: types.ModuleType, sample_cls: type) -> dict[str, types.ModuleType]:
    """slime's package, by module name, around the double's ``sglang_rollout`` (parents before children, each
    child also an attribute of its parent, as after a real import)."""
    built = {
        "slime": _module("slime"),
        "slime.rollout": _module("slime.rollout"),
        "slime.rollout.sglang_rollout": sglang_rollout,
        "slime.rollout.base_types": _module("slime.rollout.base_types", RolloutFnTrainOutput=RolloutFnTrainOutput,
                                            RolloutFnEvalOutput=RolloutFnEvalOutput),
        "slime.rollout.filter_hub": _module("slime.rollout.filter_hub"),
        "slime.rollout.filter_hub.base_types": _module(
            "slime.rollout.filter_hub.base_types", DynamicFilterOutput=DynamicFilterOutput,
            MetricGatherer=MetricGatherer, call_dynamic_filter=call_dynamic_filter),
        "slime.rollout.sample_hooks": _module("slime.rollout.sample_hooks", _current_rollout_id=None),
        "slime.utils": _module("slime.utils"),
        "slime.utils.async_utils": _module("slime.utils.async_utils", run=run),
        "slime.utils.misc": _module("slime.utils.misc", load_function=load_function),
        "slime.utils.types": _module("slime.utils.types", Sample=sample_cls),
    }
    for name, module in built.items():
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(built[parent], child, module)
    return built
