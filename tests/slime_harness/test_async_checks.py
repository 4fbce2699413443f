"""The asynchronous loop's checks on recorded legs (no slime needed): each fails on the defect it names.

- ``in_flight``: a draw that hands out a prompt the data source still has in flight, or one the step
  already handed out, fails; NOT RUN without draws;
- ``loop`` in a ``train_async.py`` leg: a run whose rollout k+1 began after step k trained is not the
  asynchronous loop, and fails;
- ``feedback``: a trained step whose groups never reached the selector fails; its PASS says whether step k's
  feedback reached step k+1's picks or only step k+2's.
"""

from __future__ import annotations

from shopsimrl.slime.harness.checks import check_feedback, check_in_flight, check_loop
from shopsimrl.slime.harness.loop import LoopSettings
from shopsimrl.slime.harness.outcome import Status

SELECTOR = "shopsimrl.slime.data_source.SelectorDataSource"


def leg(**recorded) -> dict:
    return {"status": 0, "trained": {"0": {}, "1": {}}, "args": {"data_source_path": SELECTOR}, **recorded}


def test_a_draw_of_a_prompt_in_flight_fails_the_in_flight_check():
    clean = [[0, ["a", "b"], []], [0, ["c"], ["a", "b"]], [1, ["a", "d"], []]]  # a: back in step 1, once released
    assert check_in_flight(leg(draws=clean)).status is Status.PASS
    in_flight = [[0, ["a", "b"], []], [1, ["c"], []], [1, ["b"], ["b", "c"]]]
    outcome = check_in_flight(leg(draws=in_flight))
    assert outcome.status is Status.FAIL
    assert outcome.problems == ("step 1: 1 prompt(s) in flight handed out again in the step, e.g. b",)


def test_a_prompt_handed_out_twice_in_a_step_fails_even_when_the_data_source_does_not_know_it_in_flight():
    """slime's own data source has no in-flight set: the step's earlier draws are what is in flight."""
    twice = [[1, ["a", "b"], []], [1, ["b"], []]]
    assert check_in_flight(leg(draws=twice)).problems == (
        "step 1: 1 prompt(s) in flight handed out again in the step, e.g. b",)
    within = [[1, ["a", "a"], []]]
    assert check_in_flight(leg(draws=within)).status is Status.FAIL


def test_the_in_flight_check_needs_draws():
    assert check_in_flight(leg(draws=[])).status is Status.NOT_RUN
    assert check_in_flight(leg(draws=[[-1, ["a"], []]])).status is Status.NOT_RUN  # eval only
    assert check_in_flight({"status": None, "error": "exited early"}).status is Status.NOT_RUN


SETTINGS = LoopSettings(steps=3, save_interval=1, crash_at=2)


def test_an_async_leg_whose_rollouts_do_not_overlap_training_fails_the_loop_check():
    overlapped = [["hand", 0], ["hand", 1], ["train", 0], ["hand", 2], ["train", 1], ["train", 2]]
    trained = {"0": {}, "1": {}, "2": {}}
    full = {"status": 0, "trained": trained, "feedback": overlapped}
    assert check_loop({"full": full}, SETTINGS.asynchronous()).status is Status.PASS
    serial = [["hand", 0], ["train", 0], ["hand", 1], ["train", 1], ["hand", 2], ["train", 2]]  # train.py's order
    outcome = check_loop({"full": {**full, "feedback": serial}}, SETTINGS.asynchronous())
    assert outcome.problems == ("rollout 1 began after step 0 trained (2 such steps): not slime's asynchronous order",)
    assert check_loop({"full": {**full, "feedback": serial}}, SETTINGS).status is Status.PASS  # train.py: its order


def test_the_feedback_pass_says_which_picks_it_reached():
    next_step = [["hand", 0], ["record", 0], ["hand", 1], ["record", 1], ["hand", 2], ["record", 2]]
    assert check_feedback(leg(feedback=next_step)).note == "step k's feedback reached step k+1's picks in every step"
    one_later = [["hand", 0], ["hand", 1], ["record", 0], ["hand", 2], ["record", 1], ["record", 2]]
    outcome = check_feedback(leg(feedback=one_later))
    assert outcome.status is Status.PASS
    assert outcome.note == ("step k's feedback reached step k+2's picks; step k+1 picked before it in 2 step(s), "
                            "e.g. step 1")


def test_a_trained_step_that_fed_the_selector_nothing_fails_the_feedback_check():
    """No feedback is the latest feedback: without this, a selector never fed passed (nothing recorded, nothing late)."""
    unfed = [["hand", 0], ["record", 0], ["hand", 1], ["hand", 2]]
    assert check_feedback(leg(feedback=unfed)).problems == ("1 trained step(s) fed the selector nothing, e.g. step 1",)
