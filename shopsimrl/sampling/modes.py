"""The choices a run makes about sampling, as enums, each with its default (defined here, once).

- :class:`Selection`: which prompts start.  ``seed`` is the faithful data order (the prompt set shuffled
  once per epoch with the seed, :class:`~shopsimrl.sampling.order.SeedOrder`); ``informative`` walks the
  same order and skips prompts whose recent groups had no reward spread, never handing a prompt out more
  than once per epoch pass (:class:`~shopsimrl.sampling.skip.SkipOrder`); ``spread`` is the
  former informative rule, the prompts predicted nearest 50% (:class:`~shopsimrl.sampling.spread.SpreadSelector`),
  measured to train a worse policy (docs/selection.md); ``forecast`` is the skip rule that also
  skips never- and rarely-seen prompts forecast from their text and labels to have no spread
  (:class:`~shopsimrl.sampling.forecast_order.ForecastOrder`).
- :class:`WaveMode`: how many groups start.  ``fixed`` is slime's whole waves of
  ``over_sampling_batch_size``; ``adaptive`` keeps the predicted number in flight
  (:class:`~shopsimrl.sampling.adaptive.AdaptiveWaves`).
- :class:`Siblings`: how a group's siblings start.  ``all`` at once is the seed; ``staged`` starts ``K``
  first (:class:`~shopsimrl.sampling.staged.StagedSiblings`).

All are ``str`` enums: they compare equal to their values, print as them and go into JSON as them.
"""

from __future__ import annotations

from enum import Enum


class Choice(str, Enum):
    """A string choice: ``str()`` and ``format()`` give the value (as argparse and JSON show it)."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @classmethod
    def parse(cls, value: object) -> Choice:
        """The member named by ``value`` (a member or its string); ``ValueError`` names the choices."""
        if isinstance(value, cls):
            return value
        try:
            return cls(str(value))
        except ValueError:
            names = ", ".join(m.value for m in cls)
            raise ValueError(f"{cls.__name__.lower()} must be one of {names}, got {value!r}") from None


class Selection(Choice):
    """Which prompts a step starts."""

    SEED = "seed"  # the faithful shuffled-epoch order
    SKIP = "skip"  # the seed order, skipping prompts on a run of zero-spread groups (at most once a pass)
    SPREAD = "spread"  # the prompts predicted nearest 50% pass rate: concentrates, trains a worse policy
    FORECAST = "forecast"  # informative, plus skips of rarely-seen prompts forecast from their text and labels

    @classmethod
    def _missing_(cls, value: object) -> Selection | None:
        """``informative``, the skip rule's name until 2026-12-07, still names it (older run folders and scripts)."""
        return cls.SKIP if value == "informative" else None


class WaveMode(Choice):
    """How many groups a step starts."""

    FIXED = "fixed"  # slime's whole waves of over_sampling_batch_size
    ADAPTIVE = "adaptive"  # the predicted number to fill the batch plus a cushion, topped up per completion


DEFAULT_SELECTION = Selection.SEED
DEFAULT_WAVE_MODE = WaveMode.FIXED
SELECTIONS: tuple[str, ...] = tuple(s.value for s in Selection)  # argparse choices
WAVE_MODES: tuple[str, ...] = tuple(m.value for m in WaveMode)


def is_faithful(selection: Selection | str, waves: WaveMode | str) -> bool:
    """The seed's own sampling: the seed order and whole waves (no prompt-selection lever on)."""
    return Selection.parse(selection) is Selection.SEED and WaveMode.parse(waves) is WaveMode.FIXED


class Siblings(Choice):
    """How a group's siblings start: all at once (the seed), or staged (:mod:`~shopsimrl.sampling.staged`)."""

    ALL = "all"
    STAGED = "staged"


DEFAULT_SIBLINGS = Siblings.ALL
SIBLINGS: tuple[str, ...] = tuple(s.value for s in Siblings)
