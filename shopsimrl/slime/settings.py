"""ShopSim's settings on slime's ``args``, read in one place into a typed, frozen :class:`SlimeSettings`.

slime hands every hook its parsed ``args``; ShopSim's keys arrive there from the launcher's custom config
(``--custom-config-path``: ``shopsim_*``) next to a few of slime's own flags we read (``--reward-key``,
``--group-rm``, ``--rollout-seed``).  :func:`slime_settings` reads them all, with their defaults, once per
call; every hook takes what it needs from the result instead of reading ``args`` itself.

The turn cap's old key ``shopsim_max_steps`` (a custom config written by an older launcher) is still read
when ``shopsim_max_turns`` is absent, with a ``FutureWarning`` naming the new key; Python's default warning
filter shows it on stderr once per process, not once per episode.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

from shopsimrl.defaults import (
    DEFAULT_MAX_CONSECUTIVE_FAILED_GROUPS,
    DEFAULT_MAX_TURNS,
    DEFAULT_SLOTS,
    DEFAULT_TRACE_DIR,
    DEFAULT_URL,
)
from shopsimrl.sampling.verdict import DEFAULT_REWARD_KEY

#: The custom-config key of the turn cap before it was named in turns; read for one more release.
DEPRECATED_MAX_TURNS_KEY = "shopsim_max_steps"


@dataclass(frozen=True)
class SlimeSettings:
    """What the hooks read from slime's ``args`` (unset keys: their defaults; ``None``: the reader's own default)."""

    reward_key: str  # --reward-key (our rewards are dicts); "reward" when unset
    max_consecutive_failed_groups: int
    trace_dir: str
    env_url: str
    env_slots: int  # episodes that may hold an env slot at once
    env_token_file: str | None
    turns: int | None  # shopsim_max_turns (read through :attr:`max_turns`)
    old_turns: int | None  # shopsim_max_steps, the turn cap's old key
    action_format: str | None  # the generate hook checks it (agent.constrained); None: its default
    selection: str | None  # the data source's Selection name; None: the default selection
    cluster_key: str | None  # the prompts' metadata key holding their cluster label
    wave_cushion: float | None  # adaptive waves; 0 is a valid cushion, None: the rule's default
    siblings: str | None  # "staged" or "all"; None: all
    stage_size: int | None
    group_rm: bool  # slime's --group-rm
    rollout_seed: int
    world_seed: int  # the slime harness's seeded world

    @property
    def max_turns(self) -> int:
        """Turns per episode; the old key still read (and warned about, where it is read) when the new one is absent."""
        value = self.turns
        if value is None and self.old_turns is not None:
            warnings.warn(f"the custom-config key {DEPRECATED_MAX_TURNS_KEY} is deprecated and will be removed in the "
                          f"next release: use shopsim_max_turns", FutureWarning, stacklevel=2)
            value = self.old_turns
        return DEFAULT_MAX_TURNS if value is None else int(value)


def slime_settings(args: Any) -> SlimeSettings:
    """Every ShopSim setting on slime's ``args`` (the one place they are read)."""
    def get(name: str) -> Any:
        return getattr(args, name, None)

    failed = get("shopsim_max_consecutive_failed_groups")
    slots = get("shopsim_env_slots")
    cushion = get("shopsim_wave_cushion")
    stage_size = get("shopsim_stage_size")
    return SlimeSettings(
        reward_key=get("reward_key") or DEFAULT_REWARD_KEY,
        max_consecutive_failed_groups=DEFAULT_MAX_CONSECUTIVE_FAILED_GROUPS if failed is None else failed,
        trace_dir=str(get("shopsim_trace_dir") or DEFAULT_TRACE_DIR),
        env_url=str(get("shopsim_env_url") or DEFAULT_URL),
        env_slots=DEFAULT_SLOTS if slots is None else int(slots),
        env_token_file=get("shopsim_env_token_file"),
        turns=get("shopsim_max_turns"),
        old_turns=get(DEPRECATED_MAX_TURNS_KEY),
        action_format=get("shopsim_action_format") or None,
        selection=get("shopsim_selection") or None,
        cluster_key=get("shopsim_cluster_key") or None,
        wave_cushion=None if cushion is None else float(cushion),
        siblings=get("shopsim_siblings") or None,
        stage_size=None if stage_size is None else int(stage_size),
        group_rm=bool(get("group_rm") or False),
        rollout_seed=int(get("rollout_seed") or 0),
        world_seed=int(get("shopsim_world_seed") or 0),
    )
