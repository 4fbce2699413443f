"""``make mutate``: break one dynamic-sampling rule at a time and check that tests/sampling fails.

Each mutation is a small textual edit (one line where the rule is one line) of a file under
``shopsimrl/sampling``, paired with the example test of ``tests/sampling/test_rules.py`` written
to catch it; a second block breaks one shell's pump at a time (the driver, slime's rollout function,
the simulator, replay), each caught by the four-shell conformance test; a third breaks slime's
asynchronous loop, each caught by the train_async.py leg of tests/slime_harness/test_async_loop.py
(left out, in one line, without SLIME_SRC).  The runner copies ``shopsimrl/``, ``tests/`` and ``pyproject.toml`` into a
temporary directory once, checks that the copy imports its own ``shopsimrl`` and that
``tests/sampling`` passes there, then for each mutation edits the copy, runs the mutation's
example test and restores the copy's file.  The working tree is only read: an interrupted run
(Ctrl-C, a crash) cannot leave it mutated, and the temporary directory is removed on exit.

A mutation is *killed* when its example test fails (or hangs past ``--timeout``).  When the
example test passes, the whole folder is run to say whether anything else notices; the mutation
still counts as *survived*: every rule must have an example test that fails for it.  The run
exits 0 only if every mutation is killed, 1 if one survives, and 2 when the check cannot run
(a mutation's text no longer occurs exactly once in the code, or the unmutated suite fails).

    python scripts/mutate.py                 # all mutations
    python scripts/mutate.py --list          # what each mutation breaks, and its example test
    python scripts/mutate.py -k eviction     # only those whose name contains "eviction"
    python scripts/mutate.py --whole-folder  # all of tests/sampling per mutation; first failing test

Rule numbers refer to docs/dynamic-sampling.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COPIED = ("shopsimrl", "tests", "pyproject.toml")
TESTS = "tests/sampling"


@dataclass(frozen=True)
class Mutation:
    name: str
    rule: str
    witness: str  # the example test written to catch this rule's breakage: in tests/sampling/test_rules.py, or
    # "FILE::TEST" for another file of tests/sampling (the opt-in extensions' rules)

    @property
    def test_id(self) -> str:
        if self.witness.startswith("tests/"):  # a test outside tests/sampling, by its whole path
            return self.witness
        return f"{TESTS}/{self.witness}" if "::" in self.witness else f"{TESTS}/test_rules.py::{self.witness}"
    path: str  # relative to the repository root
    old: str  # must occur exactly once in the file
    new: str


SAMPLING = "shopsimrl/sampling/"

MUTATIONS = (
    # §2.1 technical
    Mutation("technical-if-any-sibling-scored", "R5",
             "test_r5_one_unscored_sibling_of_eight_makes_the_group_technical",
             SAMPLING + "verdict.py",
             "if not all(is_scored(s, reward_key) for s in samples):",
             "if not any(is_scored(s, reward_key) for s in samples):"),
    Mutation("technical-may-be-a-fallback", "R9",
             "test_r9_filter_outputs_and_reason_strings_are_exact",
             SAMPLING + "filter.py",
             "reason=REASON_TECHNICAL, keep_when_insufficient=False)",
             "reason=REASON_TECHNICAL, keep_when_insufficient=True)"),
    Mutation("stop-limit-default-9", "R6",
             "test_r6_eight_technical_groups_in_a_row_stop_and_a_scored_group_resets_the_count",
             "shopsimrl/defaults.py",
             "DEFAULT_MAX_CONSECUTIVE_FAILED_GROUPS = 8", "DEFAULT_MAX_CONSECUTIVE_FAILED_GROUPS = 9"),
    Mutation("stop-one-group-late", "R6",
             "test_r6_eight_technical_groups_in_a_row_stop_and_a_scored_group_resets_the_count",
             SAMPLING + "guard.py",
             "if self.count >= self.limit:", "if self.count > self.limit:"),
    Mutation("streak-not-reset-by-scored-group", "R6",
             "test_r6_eight_technical_groups_in_a_row_stop_and_a_scored_group_resets_the_count",
             SAMPLING + "guard.py",
             "if verdict is not Verdict.TECHNICAL:\n            if self.count:",
             "if verdict is not Verdict.TECHNICAL:\n            if False:"),
    # §2.2 zero-std
    Mutation("tolerance-2e-6", "R7",
             "test_r7_spread_tolerance_is_pinned_on_both_sides_of_1e_6",
             SAMPLING + "knobs.py", "ZERO_STD_EPSILON = 1e-6", "ZERO_STD_EPSILON = 2e-6"),
    Mutation("tolerance-5e-7", "R7",
             "test_r7_spread_tolerance_is_pinned_on_both_sides_of_1e_6",
             SAMPLING + "knobs.py", "ZERO_STD_EPSILON = 1e-6", "ZERO_STD_EPSILON = 5e-7"),
    Mutation("tolerance-exclusive", "R7",
             "test_r7_spread_tolerance_is_pinned_on_both_sides_of_1e_6",
             SAMPLING + "verdict.py",
             "max(values) - min(values) <= ZERO_STD_EPSILON", "max(values) - min(values) < ZERO_STD_EPSILON"),
    Mutation("rollout-id-ignored", "R8",
             "test_r8_segments_sharing_a_rollout_id_count_once",
             SAMPLING + "verdict.py",
             'return _field(sample, "index") if rid is None else rid', 'return _field(sample, "index")'),
    Mutation("zero-std-kept", "R9",
             "test_r9_filter_outputs_and_reason_strings_are_exact",
             SAMPLING + "filter.py", "Verdict.ZERO_STD: ZERO_STD_DROP", "Verdict.ZERO_STD: KEEP"),
    Mutation("zero-std-never-a-fallback", "R9",
             "test_r9_filter_outputs_and_reason_strings_are_exact",
             SAMPLING + "filter.py",
             "reason=REASON_ZERO_STD, keep_when_insufficient=True)",
             "reason=REASON_ZERO_STD, keep_when_insufficient=False)"),
    # §3 remaining, the drop rule, waves, abort
    Mutation("remaining-not-decremented-on-drop", "R12",
             "test_r12_r13_sixteen_zero_std_drops_then_the_seventeenth_zero_std_group_is_a_fallback_at_remaining_16",
             SAMPLING + "controller.py",
             "self.remaining -= 1", "self.remaining -= 0"),
    Mutation("fallback-threshold-strict", "R13",
             "test_r12_r13_sixteen_zero_std_drops_then_the_seventeenth_zero_std_group_is_a_fallback_at_remaining_16",
             SAMPLING + "filter.py",
             "if output.keep_when_insufficient and remaining <= target:",
             "if output.keep_when_insufficient and remaining < target:"),
    Mutation("new-wave-at-remaining-equal-target", "R14",
             "test_r14_no_new_wave_at_remaining_equal_to_target",
             SAMPLING + "controller.py",
             "while self.remaining < self.target:", "while self.remaining <= self.target:"),
    Mutation("needs-wave-at-remaining-equal-target", "R14",
             "test_r14_no_new_wave_at_remaining_equal_to_target",
             SAMPLING + "controller.py",
             "if self.remaining < self.target:\n            return State.NEEDS_WAVE",
             "if self.remaining <= self.target:\n            return State.NEEDS_WAVE"),
    Mutation("no-abort-once-target-kept", "R15",
             "test_r15_abort_once_target_kept_even_with_groups_of_two_waves_in_flight",
             SAMPLING + "controller.py",
             "return len(self.kept) >= self.target", "return len(self.kept) > self.target"),
    Mutation("replay-ignores-wave-submission-time", "R15",
             "test_r15_abort_once_target_kept_even_with_groups_of_two_waves_in_flight",
             SAMPLING + "replay.py",
             "heapq.heappush(self.pending, (t + self.supply[start.index][1], start.index))",
             "heapq.heappush(self.pending, (self.supply[start.index][1], start.index))"),
    # §4 no eviction
    Mutation("eviction", "R17",
             "test_r17_no_eviction_a_kept_fallback_stays_when_more_groups_with_spread_than_free_slots_finish_together",
             SAMPLING + "controller.py",
             "        else:\n            self.surplus.append(index)",
             "        elif output.keep and self.fallback:  # a group with spread evicts a fallback\n"
             "            self.kept.remove(self.fallback.pop()); self.kept.append(index); decision = Decision.ACCEPTED\n"
             "        else:\n            self.surplus.append(index)"),
    # §6 drop rates, success over all completed generations, update split, advantages
    Mutation("drop-rate-over-trained-only", "R19",
             "test_r19_each_drop_rate_is_its_count_over_trained_groups_plus_its_own_count",
             SAMPLING + "metrics.py",
             "denominator = train_group_count + drop_count", "denominator = train_group_count"),
    Mutation("zero-std-rate-over-all-drops", "R19",
             "test_r19_each_drop_rate_is_its_count_over_trained_groups_plus_its_own_count",
             SAMPLING + "metrics.py",
             "ZERO_STD_GROUP_DROP_RATE: drop_rate(zero_std, train_groups)",
             "ZERO_STD_GROUP_DROP_RATE: drop_rate(zero_std, train_groups + technical)"),
    Mutation("success-over-trained-groups-only", "R20",
             "test_r20_success_and_reward_means_count_dropped_and_surplus_groups_not_only_kept_ones",
             SAMPLING + "metrics.py",
             "scored = [t for t in all_trajectories if t.scored]",
             "scored = [t for g in trained for t in by_group[g].values() if t.scored]"),
    Mutation("update-split-one-group-too-many", "R21",
             "test_r21_sixteen_groups_of_eight_at_global_batch_64_make_two_updates_of_eight_groups",
             SAMPLING + "updates.py",
             "per_update = global_batch_size // n_samples_per_prompt",
             "per_update = global_batch_size // n_samples_per_prompt + 1"),
    Mutation("grpo-biased-std", "R22",
             "test_r22_grpo_advantages_written_out",
             SAMPLING + "advantages.py", "/ (n - 1)) if n > 1", "/ n) if n > 1"),
    # §7 metrics
    Mutation("all-wrong-over-all-groups", "R23",
             "test_r23_all_wrong_group_rate_is_over_fully_scored_groups",
             SAMPLING + "metrics.py",
             "/ len(fully_scored_groups)", "/ len(by_group)"),
    Mutation("metrics-segments-not-deduplicated", "R24",
             "test_r24_three_segments_of_one_trajectory_are_one_trajectory_in_the_metrics",
             SAMPLING + "metrics.py",
             "trajectories[t.rollout_id] = t", "trajectories[(t.rollout_id, len(trajectories))] = t"),
    # §8 batches
    Mutation("surplus-trained", "R26",
             "test_r26_groups_with_spread_beyond_target_in_the_filling_batch_are_surplus_never_kept",
             SAMPLING + "controller.py",
             "elif len(self.kept) < self.target:", "elif True:"),
    Mutation("batch-in-reverse-submission-order", "R27",
             "test_r27_simultaneous_completions_are_judged_in_submission_order_whatever_order_they_arrive_in",
             SAMPLING + "controller.py",
             "self._checked(sorted((int(i), Verdict.parse(v)) for i, v in completions))",
             "self._checked(sorted(((int(i), Verdict.parse(v)) for i, v in completions), reverse=True))"),
    # R29 staged siblings (opt-in)
    Mutation("staged-stops-where-the-fallback-could-keep", "R29",
             "test_staged.py::test_r29_agreement_but_the_fallback_could_keep_the_group_the_rest_starts",
             SAMPLING + "staged.py",
             "if remaining <= target or logit is None:", "if logit is None:"),
    Mutation("staged-stops-on-disagreement", "R29",
             "test_staged.py::test_r29_first_k_disagree_the_rest_starts",
             SAMPLING + "staged.py",
             "if reward_spread_verdict(rewards) is Verdict.VARIED:", "if False:"),
    Mutation("staged-stops-with-an-unscored-sibling", "R29",
             "test_staged.py::test_r29_an_unscored_sibling_among_the_first_k_the_rest_starts",
             SAMPLING + "staged.py",
             "if any(r is None for r in first):\n        return Next.REST, None",
             "if any(r is None for r in first):\n        first = [0.0 if r is None else r for r in first]"),
    Mutation("staged-stops-on-a-partial-agreement", "R29",
             "test_staged.py::test_r29_agreement_on_a_partial_reward_the_rest_starts",
             SAMPLING + "staged.py",
             "if abs(value - 1.0) > ZERO_STD_EPSILON and abs(value) > ZERO_STD_EPSILON:", "if False:"),
    Mutation("staged-threshold-inclusive", "R29",
             "test_staged.py::test_r29_the_threshold_is_strict_and_bounds_the_chance",
             SAMPLING + "staged.py",
             "(Next.DROP if chance < threshold else Next.REST)", "(Next.DROP if chance <= threshold else Next.REST)"),
    Mutation("staged-chance-not-conditioned-on-the-outcomes", "R29",
             "test_staged.py::test_r29_the_chance_is_conditioned_on_the_outcomes_seen",
             SAMPLING + "staged.py",
             "w = weight * agree**k", "w = weight"),
    Mutation("staged-chance-reads-failures-as-successes", "R29",
             "test_staged.py::test_r29_agreement_predicted_certain_is_a_zero_std_drop_after_k",
             SAMPLING + "staged.py",
             "agree = p if successes else 1.0 - p", "agree = p"),
    Mutation("staged-rest-never-started", "R29",
             "test_staged.py::test_r29_first_k_disagree_the_step_starts_the_rest_then_judges_the_whole_group",
             SAMPLING + "step.py",
             "return [Start(index, c.wave_of(index), prompt, staging.rest, self._spread_chance.get(index))]",
             "return []"),
    Mutation("staged-stop-not-a-zero-std-drop", "R29",
             "test_staged.py::test_r29_the_step_decides_a_certain_agreement_as_the_seeds_zero_std_drop_after_k",
             SAMPLING + "step.py",
             "*self.complete(index, Verdict.ZERO_STD, agreed)", "*self.complete(index, Verdict.TECHNICAL, agreed)"),
    Mutation("staged-skip-inverted", "R29",
             "test_staged.py::test_r29_a_staged_group_starts_its_first_k_and_a_prompt_predicted_to_spread_starts_whole",
             SAMPLING + "step.py",
             "if q >= staging.skip_q:", "if q < staging.skip_q:"),
    Mutation("staged-never-seen-at-the-wide-prior", "R29",
             "test_staged_population.py::test_r29_a_never_seen_prompts_logit_follows_recent_first_tries",
             SAMPLING + "evidence.py",
             "return self._first_tries_fit\n", "return self.model.logit(i, False)\n"),
    Mutation("staged-population-before-enough-first-tries", "R29",
             "test_staged_population.py::test_r29_a_never_seen_prompts_logit_is_the_wide_prior_until_enough_first_tries",
             SAMPLING + "evidence.py",
             "< POPULATION_FIT_MIN_GROUPS:", "< 0.0:"),
    Mutation("staged-first-tries-never-fade", "R29",
             "test_staged_population.py::test_r29_old_first_tries_fade",
             SAMPLING + "evidence.py",
             "tries[key] *= POPULATION_FIT_DECAY", "tries[key] *= 1.0"),
    Mutation("staged-population-ignores-groups-decided-after-k", "R29",
             "test_staged_population.py::test_r29_fit_population_counts_what_a_group_decided_after_k_showed",
             SAMPLING + "estimate.py",
             "        if count > 0.0:  # the binomial", "        if count > 0.0 and n >= max(n for n, _ in counts):  # the binomial"),
    # the forecast rule reads what a trainer has before rollout, never the env's hidden goal
    Mutation("forecast-reads-the-hidden-goal", "selection",
             "tests/rollout/test_forecast_descriptions.py::"
             "test_descriptions_are_the_instruction_and_the_category_and_nothing_of_the_hidden_goal",
             "shopsimrl/rollout/clusters.py",
             'return task_id, {"instruction": task.instruction,',
             'return task_id, {"instruction": task.instruction, "product": str(task.goal.get("product_id")),'),
    Mutation("forecast-reads-a-numeric-label-by-its-exact-value", "selection",
             "test_forecast.py::test_a_numeric_label_is_read_by_its_decile_so_a_never_seen_value_is_predicted",
             SAMPLING + "forecast.py",
             "        edges = numeric_edges(described)", "        edges: dict[str, list[float]] = {}"),
    # the skip selection rule (docs/selection.md)
    Mutation("skip-without-floor", "selection",
             "test_selector_skip.py::test_a_skipped_prompt_is_retried_at_least_at_the_floor",
             SAMPLING + "skip.py",
             "return min(1.0 - self.retry_floor, 1.0 - self.retry_base ** run)", "return 1.0 - self.retry_base ** run"),
    Mutation("skip-budget-ignored", "selection",
             "test_selector_skip.py::test_a_pass_skips_at_most_a_third_of_the_prompts",
             SAMPLING + "skip.py",
             "if self._skips_left > 0 and self._rng.random() < p:", "if self._rng.random() < p:"),
    Mutation("skip-released-prompt-back-in-its-pass", "selection",
             "test_selector_skip.py::test_a_released_prompt_is_consumed_and_comes_back_with_its_next_pass",
             SAMPLING + "skip.py",
             '"""Consumed: a prompt comes back only with its turn in a later pass."""',
             '"""Mutated: back to the front of its pass."""\n        if front:\n            self._order.appendleft(i)'),
    Mutation("skip-skips-what-the-model-predicts-to-spread", "selection",
             "test_selector_skip.py::test_a_prompt_the_model_predicts_to_spread_is_not_skipped",
             SAMPLING + "skip.py",
             "if run == 0 or 1.0 - self._predict(i) >= SKIP_Q:", "if run == 0:"),
    Mutation("skip-re-try-not-weighted", "selection",
             "test_selector_skip.py::test_a_prompt_handed_out_where_it_could_have_been_skipped_weighs_one_over_"
             "its_chance",
             SAMPLING + "skip.py",
             "self._weights[i] = 1.0 / (1.0 - p)", "self._weights[i] = 1.0"),
    Mutation("adaptive-skips-cost-nothing", "selection",
             "test_selector_adaptive.py::test_an_adaptive_step_over_a_skipping_source_walks_at_most_one_wave_of_turns",
             SAMPLING + "step.py",
             "lambda: source.skipped_turns - before)", "lambda: 0)"),
    Mutation("skip-skips-failed-runs", "selection",
             "test_selector_skip.py::test_a_prompt_on_a_run_of_failed_or_partial_groups_is_never_skipped",
             SAMPLING + "evidence.py",
             "+ 1 if zero and min(values) >= 1.0 else 0", "+ 1 if zero else 0"),
    Mutation("batch-advantages-not-weighted", "selection",
             "tests/rollout/test_driver.py::test_a_weighted_hand_out_multiplies_its_group_s_advantages_in_batch_jsonl",
             "shopsimrl/rollout/outputs.py",
             "advantages = [a * group.weight for a in advantages]", "advantages = list(advantages)"),
)


# Every shell is a shell of the one pump (sampling/pump.py): break the pump, or one shell at a time, and the pump's
# tests or the conformance test (every shell against the reference step, tests/sampling/test_conformance.py) must
# notice.  Kept apart from the rules' mutations above.
SHELLS = "test_conformance.py::test_every_shell_makes_the_reference_steps_decisions_drops_and_abort_point"
SHELL_MUTATIONS = (
    Mutation("pump-drops-the-cancel", "pump",
             "test_pump.py::test_a_pumped_step_ends_with_every_started_group_measured_or_cancelled",
             SAMPLING + "pump.py",
             "        shell.cancel(abort.indices)\n        return run.close(t)", "        return run.close(t)"),
    Mutation("driver-measures-the-batchs-first-group", "pump", SHELLS,
             "shopsimrl/rollout/driver.py",
             "group = self._back[index]\n", "group = self._back[min(self._back)]\n"),
    Mutation("driver-first-stage-reads-one-sibling", "pump", SHELLS,
             "shopsimrl/rollout/driver.py",
             "[e.reward if e.scored else None for e in self._back[index].episodes]",
             "[e.reward if e.scored else None for e in self._back[index].episodes[:1]] * 2"),
    Mutation("slime-judges-a-rest-without-its-first-k", "pump", SHELLS,
             "shopsimrl/slime/rollout_fn.py",
             "self.batch.judge(index, self.generation.whole(index, self._back.pop(index)))",
             "self.batch.judge(index, self._back.pop(index))"),
    Mutation("simulator-measures-the-previous-group", "pump", SHELLS,
             "shopsimrl/simulate/engine.py",
             "rewards = self.judged[index] = self.flight.rewards(index)",
             "rewards = self.judged[index] = self.flight.rewards(max(index - 1, 0))"),
    Mutation("replay-judges-the-previous-group", "pump", SHELLS,
             SAMPLING + "replay.py",
             "return self.supply[index][0], None", "return self.supply[max(index - 1, 0)][0], None"),
    Mutation("replay-recorded-reads-a-batch-backwards", "pump", SHELLS,
             SAMPLING + "recorded.py",
             "        return batch\n", "        return batch[::-1]\n"),
    Mutation("check-selector-forgets-what-it-started", "pump",
             "test_conformance.py::test_check_selector_names_the_promise_a_broken_source_breaks",
             SAMPLING + "conformance.py",
             "self.started.append(start.prompt)", "self.started.append(object())"),
)

# slime's asynchronous loop (train_async.py, ASYNC=1): break it, and its harness leg's checks must fail.  The witness
# runs slime's real train_async.py (tests/slime_harness/test_async_loop.py): left out, saying so, without SLIME_SRC.
ASYNC_LOOP = "tests/slime_harness/test_async_loop.py::"
ASYNC_MUTATIONS = (
    Mutation("async-save-writes-the-state-after-the-next-rollout-drew", "async",
             ASYNC_LOOP + "test_a_resume_of_the_async_loop_equals_the_uninterrupted_run",
             "shopsimrl/slime/data_source.py",
             "state = self.at_rollout_end.state_for_save(rollout_id) or self._state()", "state = self._state()"),
    Mutation("async-rollout-end-never-told-to-the-data-source", "async",
             ASYNC_LOOP + "test_a_resume_of_the_async_loop_equals_the_uninterrupted_run",
             "shopsimrl/slime/metrics.py",
             "            source.rollout_ended(rollout_id)", "            pass"),
    Mutation("async-legs-run-train-py", "async",
             ASYNC_LOOP + "test_the_checks_hold_in_the_async_loop[loop]",
             "shopsimrl/slime/launch_knobs.py",
             'return "train_async.py" if self.async_loop else "train.py"', 'return "train.py"'),
    Mutation("async-in-flight-prompt-handed-out-again", "async",
             ASYNC_LOOP + "test_the_checks_hold_in_the_async_loop[in_flight]",
             "shopsimrl/slime/data_source.py",
             "for task_id in self.selector.next_prompts(wanted):",
             "for task_id in ([*self.selector.next_prompts(wanted - 1), sorted(self.selector.in_flight)[0]]\n"
             "                        if self.selector.in_flight else self.selector.next_prompts(wanted)):"),
    Mutation("slime-advantages-not-weighted", "async",
             ASYNC_LOOP + "test_the_checks_hold_in_the_async_loop[weight]",
             "shopsimrl/slime/rewards.py",
             "advantages[position] = value * weight", "advantages[position] = value"),
    Mutation("async-selector-never-fed", "async",
             ASYNC_LOOP + "test_the_checks_hold_in_the_async_loop[feedback]",
             "shopsimrl/slime/metrics.py",
             "    if record_groups is not None:\n", "    if False:\n"),
)
MUTATIONS = MUTATIONS + SHELL_MUTATIONS + ASYNC_MUTATIONS


def check_applies(mutations: tuple[Mutation, ...]) -> list[str]:
    """Every mutation's text must occur exactly once in the working tree's file (read only)."""
    problems = []
    for mu in mutations:
        text = (ROOT / mu.path).read_text(encoding="utf-8")
        if text.count(mu.old) != 1:
            problems.append(f"{mu.name}: {mu.old!r} occurs {text.count(mu.old)} times in {mu.path} (expected once); "
                            f"update scripts/mutate.py to the current code")
    return problems


def copy_tree(dest: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", ".hypothesis", ".pytest_cache", "*.pyc")
    for name in COPIED:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=ignore)
        else:
            shutil.copy2(src, dest / name)


def run_pytest(copy: Path, targets: list[str], timeout: float) -> tuple[str, str, float]:
    """pytest -x on the copy: ("pass" | "fail" | "timeout" | "error: ...", first failed test, seconds)."""
    env = {**os.environ, "PYTHONPATH": str(copy), "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *targets]
    start = time.perf_counter()
    try:
        done = subprocess.run(cmd, cwd=copy, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", "", time.perf_counter() - start
    elapsed = time.perf_counter() - start
    if done.returncode == 0:
        return "pass", "", elapsed
    if done.returncode == 1:
        failed = [line.split()[1] for line in done.stdout.splitlines() if line.startswith("FAILED ")]
        return "fail", (failed[0].removeprefix(TESTS + "/").split("[")[0] if failed else ""), elapsed
    tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
    return f"error: pytest exit {done.returncode}: {' | '.join(tail)}", "", elapsed


def folder(copy: Path) -> list[str]:
    """tests/sampling, rule examples first and property tests last (-x stops at the first failure,
    and a failing hypothesis test spends seconds shrinking its example)."""
    files = sorted(p.relative_to(copy).as_posix() for p in (copy / TESTS).glob("test_*.py"))
    files.sort(key=lambda f: (not f.endswith("test_rules.py"), f.endswith("test_properties.py")))
    return files


def imports_from(copy: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(copy), "PYTHONDONTWRITEBYTECODE": "1"}  # no cached bytecode of the copy
    out = subprocess.run([sys.executable, "-c", "import shopsimrl.sampling as s; print(s.__file__)"], cwd=copy,
                         env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-k", dest="match", help="only the mutations whose name contains this text")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--whole-folder", action="store_true",
                        help="run all of tests/sampling on each mutation (not just its rule's example test) "
                        "and report the first test that fails")
    parser.add_argument("--timeout", type=float, default=900.0,
                        help="seconds per test run (default 900: the whole folder, on a loaded 2-core machine)")
    args = parser.parse_args(argv)

    from rich.console import Console
    from rich.table import Table

    console = Console() if sys.stdout.isatty() else Console(width=170)  # logs keep whole test names
    mutations = tuple(mu for mu in MUTATIONS if not args.match or args.match in mu.name)
    if not mutations:
        console.print(f"[red]error:[/] no mutation name contains {args.match!r}; see --list")
        return 2
    if not os.environ.get("SLIME_SRC") and not args.list and any(mu in ASYNC_MUTATIONS for mu in mutations):
        console.print(f"left out: the {sum(mu in ASYNC_MUTATIONS for mu in mutations)} async-loop mutations "
                      "(their tests run slime's train_async.py: set SLIME_SRC)")
        mutations = tuple(mu for mu in mutations if mu not in ASYNC_MUTATIONS)
        if not mutations:
            return 2
    if args.list:
        table = Table("mutation", "rule", "file", "edit", "its example test")
        for mu in mutations:
            table.add_row(mu.name, mu.rule, mu.path.removeprefix(SAMPLING), f"{mu.old.strip()}  ->  {mu.new.strip()}",
                          mu.witness)
        console.print(table)
        return 0
    problems = check_applies(mutations)
    if problems:
        for p in problems:
            console.print(f"[red]error:[/] {p}")
        return 2

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="shopsimrl-mutate-") as tmp:
        copy = Path(tmp)
        copy_tree(copy)
        where = imports_from(copy)
        if not where.startswith(str(copy)):
            console.print(f"[red]error:[/] the copy imports shopsimrl from {where}, not from {copy}")
            return 2
        outcome, _, seconds = run_pytest(copy, folder(copy), args.timeout)
        if outcome != "pass":
            console.print(f"[red]error:[/] {TESTS} does not pass without any mutation ({outcome}); fix that first")
            return 2
        console.print(f"baseline: {TESTS} passes on the unmutated copy ({seconds:.1f} s)")
        caught_by = "first failing test" if args.whole_folder else "caught by"
        table = Table("mutation", "rule", "file", "result", caught_by, "seconds",
                      title=f"mutations of shopsimrl/sampling vs {TESTS}")
        survived = 0
        for n, mu in enumerate(mutations, 1):
            target = copy / mu.path
            original = target.read_text(encoding="utf-8")
            try:
                target.write_text(original.replace(mu.old, mu.new, 1), encoding="utf-8")
                if args.whole_folder:
                    outcome, first, seconds = run_pytest(copy, folder(copy), args.timeout)
                else:
                    outcome, first, seconds = run_pytest(copy, [mu.test_id], args.timeout)
                    if outcome == "pass":  # its own test missed it: does anything else in the folder notice?
                        outcome, other, more = run_pytest(copy, folder(copy), args.timeout)
                        first, seconds = f"not {mu.witness}" + (f"; only {other}" if other else ""), seconds + more
                        outcome = "pass" if outcome in ("fail", "timeout") else outcome
            finally:
                target.write_text(original, encoding="utf-8")
            result = {"fail": "[green]killed[/]", "timeout": "[green]killed (timeout)[/]",
                      "pass": "[red]SURVIVED[/]"}.get(outcome, f"[red]{outcome}[/]")
            survived += outcome not in ("fail", "timeout")
            table.add_row(mu.name, mu.rule, mu.path.removeprefix(SAMPLING), result, first, f"{seconds:.1f}")
            console.print(f"[{n}/{len(mutations)}] {mu.name}: {result} ({seconds:.1f} s)")
    console.print(table)
    total = time.perf_counter() - started
    killed = len(mutations) - survived
    console.print(f"{killed}/{len(mutations)} mutations killed in {total:.0f} s")
    return 0 if survived == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
