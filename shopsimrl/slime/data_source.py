"""A data source for slime's ``--data-source-path`` backed by a selector (``sampling/source.py``).

slime builds it as ``cls(args)`` (``slime/ray/rollout.py``) and calls, as for its
own ``RolloutDataSourceWithBuffer`` (``slime/rollout/data_source.py``):
``get_samples(num_samples) -> list[list[Sample]]`` (groups of
``n_samples_per_prompt`` copies, ``group_index`` / ``index`` counting up),
``add_samples(groups)`` (aborted partial groups, served first next time),
``save(rollout_id)`` / ``load(rollout_id)`` with the checkpoints, and ``len()``.

What is ours: which prompts ``get_samples`` returns, and what the selector hears back.  Under our
rollout function the step's ``close()`` settles every group it started (``prompt_groups.DataSourceGroups``):
recorded, or released when unscored, surplus (with its evidence) or aborted.  On slime's own loop
there is no step: the all-samples hook (``shopsimrl.slime_metrics.record_generated_rollout_groups``,
which slime calls with this data source) hands us every completed group and we settle each from its
samples (:meth:`record_groups`; that hook cannot tell a surplus group from a trained one, so there
surplus groups are recorded), then release every prompt that did not complete (slime aborted it).
The log hook then tells us the step's trained prompts (:meth:`trained_metrics`): the concentration
figures (``sampling/concentration.py``).

Settings come from slime's ``args`` (``--custom-config-path`` keys):
``shopsim_selection`` (a :class:`~shopsimrl.sampling.modes.Selection`; the one default,
``seed``, is the shuffled-epoch order; an unknown name is refused, naming the choices),
``rollout_seed``, ``shopsim_cluster_key`` (a key of the prompts'
metadata whose value is the prompt's cluster label, e.g. ``category``, which ``shopsimrl
data export`` writes; none by default).  Under our adaptive rollout function (slime's
``args.rollout_function_path`` is ``ROLLOUT_FUNCTION_PATH``) the spread rule explores
over the adaptive waves' horizon (``horizon_for_waves``), as the main job does with
``--waves adaptive``.  The prompt file is ``--prompt-data`` (JSONL, ``--input-key`` /
``--metadata-key``, as ``shopsimrl data export`` writes it).
The selector's state is saved next to slime's checkpoint as
``<save>/rollout/shopsim_selector_<rollout_id>.json`` (atomically), as of the end of rollout
``rollout_id`` (:class:`StateAtRolloutEnd`): slime's ``train_async.py`` calls ``save(k)`` after
it started rollout k+1, which has drawn its prompts by then.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from shopsimrl.defaults import ROLLOUT_FUNCTION_PATH
from shopsimrl.io import atomic_write_json
from shopsimrl.sampling.concentration import concentration_line
from shopsimrl.sampling.modes import DEFAULT_SELECTION, Selection, WaveMode
from shopsimrl.sampling.selection_metrics import selector_step_metrics
from shopsimrl.sampling.source import new_selector, selector_from_state
from shopsimrl.slime.data import descriptions_of, read_prompts
from shopsimrl.slime.prompt_groups import DataSourceGroups
from shopsimrl.slime.samples import WEIGHT_KEY, reward_key, scored_rewards
from shopsimrl.slime.settings import slime_settings

log = logging.getLogger(__name__)


def state_path(directory: str | Path, rollout_id: int) -> Path:
    return Path(directory) / "rollout" / f"shopsim_selector_{rollout_id}.json"


#: Rollouts whose end-of-rollout state is kept: ``save(k)`` comes before rollout k+2 starts in both of slime's loops.
KEPT_ROLLOUT_STATES = 2


class StateAtRolloutEnd:
    """A data source's state as of the end of each rollout, for ``save(rollout_id)`` under ``train_async.py``.

    slime's ``train_async.py`` starts rollout k+1 before step k trains and saves the data source
    (``save(k)``) after step k trained: by then rollout k+1 has drawn its prompts (with real Ray too: the
    rollout manager is one actor, so ``save(k)`` runs after ``generate(k+1)``).  A resume from checkpoint k
    loads that state and starts at rollout k+1, which would draw rollout k+2's prompts: one step of prompts
    never trained.  So the log hook, which slime calls at the end of every rollout with its id
    (``enrich_rollout_metrics``), marks the rollout ended (:meth:`ended`); the next draw first keeps the state
    as it is then (:meth:`before_draw`), which is the state as of the end of that rollout; ``save(k)`` writes
    it when there is one (:meth:`state_for_save`).  Under ``train.py`` ``save(k)`` comes before rollout k+1
    draws: no state is kept for k, and the current one is saved, as before.
    """

    def __init__(self) -> None:
        self._ended: int | None = None
        self._states: dict[int, Any] = {}

    def ended(self, rollout_id: int) -> None:
        self._ended = int(rollout_id)

    def before_draw(self, state: Any) -> None:
        """Called with the current state before a draw: kept if a rollout ended since the last draw."""
        if self._ended is None:
            return
        self._states[self._ended] = state()
        self._ended = None
        for old in sorted(self._states)[:-KEPT_ROLLOUT_STATES]:
            del self._states[old]

    def state_for_save(self, rollout_id: int) -> Any | None:
        """The state as of the end of ``rollout_id`` if the next rollout has drawn since, else None (the current)."""
        return self._states.get(int(rollout_id))


def _sample_class() -> Any:
    from slime.utils.types import Sample  # slime's own class, imported only when slime runs us

    return Sample


def _clusters(metadata: dict[str, dict[str, Any]], cluster_key: str | None) -> dict[str, Any] | None:
    """Each prompt's cluster label from its metadata key ``cluster_key``; ``None`` (no labels) without a key, or when
    no prompt carries it (a prompt file written before ``data export`` wrote categories)."""
    if not cluster_key:
        return None
    labels = {t: meta.get(cluster_key) for t, meta in metadata.items()}
    if all(label is None for label in labels.values()):
        log.info("no prompt's metadata has %r: selecting without cluster labels", cluster_key)
        return None
    return labels


class SelectorDataSource:
    """slime's data-source interface over a selector (see the module docstring)."""

    def __init__(self, args: Any, *, sample_cls: type | None = None) -> None:
        if getattr(args, "partial_rollout", False):
            # slime builds the data source when it starts, before any episode: refuse here rather than mid-run
            raise ValueError(
                "--partial-rollout is not supported with the ShopSim data source: slime would hand aborted "
                "multi-turn episodes back to be resumed from a partial token stream, and the same prompt would be "
                "served twice in a step; drop the flag"
            )
        self.args = args
        self.n = int(args.n_samples_per_prompt)
        self._sample_cls = sample_cls
        task_ids, self._metadata = read_prompts(
            args.prompt_data, getattr(args, "input_key", None) or "prompt", getattr(args, "metadata_key", None) or "metadata"
        )
        settings = slime_settings(args)
        try:
            selection = Selection.parse(settings.selection or DEFAULT_SELECTION)
        except ValueError as exc:
            raise ValueError(f"shopsim_selection: {exc}") from None
        adaptive = getattr(args, "rollout_function_path", None) == ROLLOUT_FUNCTION_PATH  # our adaptive waves
        waves = WaveMode.ADAPTIVE if adaptive else WaveMode.FIXED
        descriptions = descriptions_of(self._metadata) if selection is Selection.FORECAST else None
        if descriptions is not None and not any(descriptions.values()):
            log.warning("no prompt of %s has an instruction or a label (write it with `shopsimrl data export`): the "
                        "forecast predicts from each prompt's history alone", args.prompt_data)
        self.selector = new_selector(
            selection, task_ids, self.n, settings.rollout_seed, waves=waves,
            clusters=_clusters(self._metadata, settings.cluster_key), descriptions=descriptions,
        )
        self._descriptions = descriptions
        self.sample_group_index = 0
        self.sample_index = 0
        self.buffer: list[list[Any]] = []
        self.metadata: dict[str, Any] = {}
        self.last_metrics: dict[str, float] = {}
        self.concentrated: str | None = None  # the first step's line saying the run concentrates (logged once)
        self.at_rollout_end = StateAtRolloutEnd()

    # -- slime's DataSource interface ---------------------------------------------------------
    def get_samples(self, num_samples: int) -> list[list[Any]]:
        groups = self.buffer[:num_samples]
        del self.buffer[:num_samples]
        wanted = num_samples - len(groups)
        if wanted <= 0:
            return groups
        self.at_rollout_end.before_draw(self._state)
        cls = self._sample_cls or _sample_class()
        for task_id in self.selector.next_prompts(wanted):
            metadata = dict(self._metadata[str(task_id)])
            weight = self.selector.weight(task_id)
            if weight != 1.0:  # the skip rule's importance weight (the seed order's samples are unchanged)
                metadata[WEIGHT_KEY] = weight
            prototype = cls(prompt=task_id, metadata=metadata)
            group = []
            for _ in range(self.n):
                sample = copy.deepcopy(prototype)
                sample.group_index = self.sample_group_index
                sample.index = self.sample_index
                self.sample_index += 1
                group.append(sample)
            self.sample_group_index += 1
            groups.append(group)
        return groups

    def add_samples(self, samples: list[list[Any]]) -> None:
        """Partial groups slime hands back (fully-async / partial rollouts): served first, as slime does."""
        if not samples:
            return
        for group in samples:
            if not isinstance(group, list) or len(group) != self.n:
                raise ValueError(f"add_samples takes groups of n_samples_per_prompt={self.n} samples")
            self.buffer.append(group)

    def _state(self) -> dict[str, Any]:
        """What :meth:`save` writes: a copy, unchanged by later draws and records."""
        return json.loads(json.dumps({
            "selector": self.selector.state_dict(),
            "sample_group_index": self.sample_group_index,
            "sample_index": self.sample_index,
        }))

    def rollout_ended(self, rollout_id: int) -> None:
        """Told by the log hook at the end of every rollout (see :class:`StateAtRolloutEnd`)."""
        self.at_rollout_end.ended(rollout_id)

    def save(self, rollout_id: int) -> None:
        """The state as of the end of rollout ``rollout_id``, even when the next rollout has drawn since."""
        save = getattr(self.args, "save", None)
        if not save:
            return
        state = self.at_rollout_end.state_for_save(rollout_id) or self._state()
        atomic_write_json(state_path(save, rollout_id), state, indent=None)

    def load(self, rollout_id: int | None = None) -> None:
        load = getattr(self.args, "load", None)
        if not load or rollout_id is None:
            return
        path = state_path(load, rollout_id)
        if not path.exists():
            log.info("no ShopSim selector state at %s: starting fresh", path)
            return
        state = json.loads(path.read_text(encoding="utf-8"))
        self.selector = selector_from_state(state["selector"])
        if hasattr(self.selector, "describe"):  # the forecast's saved state must match this prompt file's texts and labels
            self.selector.describe(self._descriptions)
        self.selector.release_in_flight()  # a resumed run cannot finish what was in flight
        self.sample_group_index = int(state["sample_group_index"])
        self.sample_index = int(state["sample_index"])

    def __len__(self) -> int:
        return len(self.selector)

    def get_buffer_length(self) -> int:
        return len(self.buffer)

    def update_metadata(self, metadata: dict[str, Any]) -> None:
        self.metadata.update(metadata)

    def get_metadata(self) -> dict[str, Any]:
        return self.metadata

    # -- fed by the all-samples hook ----------------------------------------------------------
    def record_groups(self, args: Any, all_samples: Sequence[Sequence[Any]]) -> dict[str, float]:
        """The step's completed groups; returns the selector metrics.

        Under our rollout function the step's ``close()`` has settled every group it started before this hook
        runs: nothing is in flight any more, and only the metrics are left.  On slime's own loop (no step) this
        hook is the only feedback: each completed group is settled from its samples (slime's hook cannot tell a
        surplus group from a trained one, so none is settled as surplus), and what was aborted is released."""
        key, groups = reward_key(args), DataSourceGroups(self)
        for group in all_samples:
            groups.settle(group, scored_rewards(group, key))
        self.selector.release_in_flight()
        # informative-per-1k needs the trained groups, which this hook does not see: left out here
        self.last_metrics = selector_step_metrics(
            self.selector.pop_stats(), informative=0, generated_episodes=0, coverage=self.selector.coverage()
        )
        return self.last_metrics

    def trained_metrics(self, task_ids: Sequence[str], rollout_id: int) -> dict[str, float]:
        """The step's trained prompts (from the log hook): the concentration figures; a concentrating run is
        logged once (``Concentration.concentrated``)."""
        known = self.selector.evidence.pos
        metrics = self.selector.trained([t for t in task_ids if t in known])
        if self.concentrated is None:
            self.concentrated = concentration_line(metrics, rollout_id + 1)
            if self.concentrated:
                log.warning("ShopSim prompt selection (%s): %s", self.selector.selection, self.concentrated)
        return metrics


#: The attributes slime's own ``RolloutDataSource.save`` writes (``slime/rollout/data_source.py``).
SLIME_STATE_FIELDS = ("sample_offset", "epoch_id", "sample_group_index", "sample_index", "metadata")


def slime_order_data_source(args: Any) -> Any:
    """slime's own data source (``RolloutDataSourceWithBuffer``: its prompt order, its files), saving its state as of
    the end of each rollout (:class:`StateAtRolloutEnd`): what ``ASYNC=1`` runs where ``train.py`` runs slime's
    own (``SELECTION=seed WAVES=fixed``).  slime builds it as ``cls(args)``; a function builds the subclass, so
    that slime is imported only when slime runs us."""
    # slime's own class: imported only when slime builds its data source
    from slime.rollout.data_source import RolloutDataSourceWithBuffer

    class SlimeOrderAtRolloutEnd(RolloutDataSourceWithBuffer):  # type: ignore[misc, valid-type]
        def __init__(self, args: Any) -> None:
            super().__init__(args)
            self.at_rollout_end = StateAtRolloutEnd()

        def _state(self) -> dict[str, Any]:
            return copy.deepcopy({name: getattr(self, name) for name in SLIME_STATE_FIELDS})

        def rollout_ended(self, rollout_id: int) -> None:
            self.at_rollout_end.ended(rollout_id)

        def get_samples(self, num_samples: int) -> list[list[Any]]:
            self.at_rollout_end.before_draw(self._state)
            return super().get_samples(num_samples)

        def save(self, rollout_id: int) -> None:
            """slime's own save, of the state as of the end of rollout ``rollout_id``."""
            kept = self.at_rollout_end.state_for_save(rollout_id)
            if kept is None:
                return super().save(rollout_id)
            current = self._state()
            vars(self).update(kept)
            try:
                super().save(rollout_id)
            finally:
                vars(self).update(current)

    return SlimeOrderAtRolloutEnd(args)
