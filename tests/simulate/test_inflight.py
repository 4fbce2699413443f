"""``GroupsInFlight``: the simulator's groups on the capacity clock, each group's draw made once."""

from __future__ import annotations

import pytest

from shopsimrl.sampling.step import Start
from shopsimrl.simulate.inflight import GroupsInFlight


def until_ended(flight: GroupsInFlight) -> tuple[float, list[int]]:
    """Advance episode by episode (each finish is an instant) until some group's job has ended."""
    while True:
        now, ended = flight.next()
        if ended:
            return now, ended


class FixedWorld:
    """A world whose groups draw known rewards and durations (and that counts its draws)."""

    def __init__(self, draws: dict[str, tuple[list[float] | None, list[float]]]) -> None:
        self.draws, self.played = draws, []

    def play_siblings(self, prompt_id: str, n: int):
        self.played.append(prompt_id)
        return self.draws[prompt_id]


def test_a_whole_group_ends_once_at_its_slowest_sibling_without_capacity():
    world = FixedWorld({"a": ([1.0, 0.0, 1.0], [2.0, 5.0, 3.0]), "b": (None, [1.0, 1.0, 4.0])})
    flight = GroupsInFlight(world, 3, None)  # type: ignore[arg-type]
    assert flight.start(Start(0, 1, "a", range(3), None)) and flight.start(Start(1, 1, "b", range(3), None))
    assert flight.next() == (1.0, [])  # an episode finished, no group yet
    assert until_ended(flight) == (4.0, [1]) and flight.rewards(1) is None
    assert until_ended(flight) == (5.0, [0]) and flight.rewards(0) == [1.0, 0.0, 1.0]
    assert flight.episodes == 6
    with pytest.raises(IndexError):
        until_ended(flight)


def test_a_staged_groups_rest_is_the_rest_of_the_same_draw():
    world = FixedWorld({"a": ([1.0, 1.0, 0.0, 1.0], [1.0, 2.0, 7.0, 3.0])})
    flight = GroupsInFlight(world, 4, None)  # type: ignore[arg-type]
    assert flight.start(Start(0, 1, "a", range(2), None))  # new group: drawn now
    assert until_ended(flight) == (2.0, [0]) and flight.first_rewards(0) == [1.0, 1.0]
    assert not flight.start(Start(0, 1, "a", range(2, 4), None))  # its rest: no second draw
    assert until_ended(flight) == (2.0 + 7.0, [0])
    assert world.played == ["a"] and flight.episodes == 4


def test_an_unscored_groups_first_stage_is_unscored_and_cancel_stops_its_episodes():
    world = FixedWorld({"a": (None, [1.0, 2.0, 3.0, 4.0]), "b": ([0.0] * 4, [9.0] * 4)})
    flight = GroupsInFlight(world, 4, None)  # type: ignore[arg-type]
    flight.start(Start(0, 1, "a", range(2), None))
    flight.start(Start(1, 1, "b", range(4), None))
    assert until_ended(flight) == (2.0, [0]) and flight.first_rewards(0) == [None, None]
    flight.cancel((1,))  # aborted: group 1 never ends
    with pytest.raises(IndexError):
        until_ended(flight)
