"""The figures of the documentation: each a function of ``benchmarks/results/*.json`` returning Markdown.

``benchmarks/render_docs.py`` fills a page's ``<!-- render: NAME -->`` region with ``FIGURES[NAME]``. A new figure is
one function here, registered with ``@figure("name")`` (or one more name in a loop below, for a results file shaped
like one already shown), and one region in a page.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


class Results:
    """The results folder, each ``<name>.json`` read once."""

    def __init__(self, folder: Path = RESULTS) -> None:
        self.folder = folder
        self._read: dict[str, Any] = {}

    def __call__(self, name: str) -> Any:
        if name not in self._read:
            self._read[name] = json.loads((self.folder / f"{name}.json").read_text())
        return self._read[name]


Figure = Callable[[Results], str]
FIGURES: dict[str, Figure] = {}


def figure(name: str) -> Callable[[Figure], Figure]:
    def register(fn: Figure) -> Figure:
        FIGURES[name] = fn
        return fn

    return register


# ---- formats -----------------------------------------------------------------------------------------------------


def num(x: float, digits: int = 2) -> str:
    """A number with thousands separators; the minus is the typographic one."""
    return f"{x:,.{digits}f}".replace("-", "−")


def signed(x: float, digits: int = 3) -> str:
    """A difference with its sign; one that rounds to zero is shown as 0 (never "−0.000")."""
    text = num(x, digits)
    if not text.strip("−0.,"):
        return text.lstrip("−")
    return text if text.startswith("−") else "+" + text


def times(x: float, digits: int = 2) -> str:
    return f"{num(x, digits)}×"


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join([*lines, *("| " + " | ".join(row) + " |" for row in rows)])


def verdict(met: object) -> str:
    return "met" if met else "**not met**"


# ---- the figures ---------------------------------------------------------------------------------------------------


@figure("core.decisions")
def core_decisions(r: Results) -> str:
    s = r("sampling")
    one, batch, rep = s["controller_one_at_a_time"], s["controller_batches_of_32"], s["replay"]
    return table(["what", "result", "target"], [
        [f"`WaveController`, one decision at a time ({one['decisions']:,} decisions, median of {one['rounds']})",
         f"**{num(one['us_per_decision'])} µs**/decision (runs {num(one['fastest_us_per_decision'])} to "
         f"{num(one['slowest_us_per_decision'])})", f"≤ {num(s['target_us_per_decision'], 0)} µs"],
        ["the same, batches of 32 simultaneous completions", f"{num(batch['us_per_decision'])} µs/decision", ""],
        [f"`replay` of {rep['groups']:,} groups (CPU time), against the minimal heap-and-decide loop",
         f"{num(rep['seconds'], 1)} s: **{times(rep['ratio_to_minimal_loop'])}**",
         f"≤ {times(s['target_replay_ratio'], 0)}"],
        ["… against the same loop throwing its decisions away", times(rep["ratio_to_discarding_loop"]), ""],
    ])


@figure("env.speed")
def env_speed(r: Results) -> str:
    e = r("env")
    rows = [[f"catalog build, {b['products']:,} products", f"{num(b['seconds'], 1)} s, {num(b['db_mb'], 1)} MB"]
            for b in e["build"]]
    rows += [[f"search, {s['products']:,} products, {s['queries']:,} distinct queries, cold cache",
              f"p50 {num(s['p50_ms'], 1)} ms, p99 {num(s['p99_ms'], 1)} ms (cached: "
              f"{s['cached_hit_mean_ms'] * 1000:.0f} µs)"] for s in e["search"]]
    for kind, what in (("agent_paced", "agent-paced"), ("closed_loop", "closed loop, no pause")):
        h = e["http"][kind]
        rows.append([f"env HTTP server, {h['sessions']} sessions, {what}",
                     f"{h['steps_per_s']:.0f} steps/s, step p50 {num(h['step_p50_ms'], 1)} ms, "
                     f"p99 {num(h['step_p99_ms'], 1)} ms"])
    return table(["what", "result"], rows)


@figure("load.abuse")
def load_abuse(r: Results) -> str:
    d = r("load")
    s, o, g = d["sessions"], d["oversized_bodies"], d["idle_gaps"]
    new, old = g["defaults_keepalive_75s_client_30s_retries"], g["old_keepalive_5s_client_5s_no_retries"]
    return table(["what", "result"], [
        [f"{s['concurrent_sessions']:,} concurrent sessions at `--slots {s['slots']}`, {s['repeats']} runs",
         f"**{s['errors_total']} errors, {s['leaked_slots_total']} leaked slots**"],
        ["step latency under that load (median of the runs' p50 / p99)",
         f"{ms(s['step_p50_ms_median'] / 1000)} / {ms(s['step_p99_ms_median'] / 1000)}"],
        ["`/healthz`, idle server (p50 / p99)",
         f"{num(o['idle']['healthz_p50_ms'], 1)} / {num(o['idle']['healthz_p99_ms'], 0)} ms"],
        ["`/healthz` while 8 clients send bodies announced as 200 MB",
         f"{num(o['under_abuse_8_clients']['healthz_p50_ms'], 1)} / "
         f"{num(o['under_abuse_8_clients']['healthz_p99_ms'], 0)} ms; "
         f"{o['under_abuse_8_clients']['oversized_bodies_refused_413']:,} refused with 413 unread"],
        [f"{new['episodes']} episodes, {new['seconds_between_steps']} s between steps, default keep-alive and retries",
         f"{new['technical_failures']} technical failures, {new['leaked_slots']} leaked slots"],
        ["the same, both sides 5 s and no retry",
         f"{old['technical_failures']} of {old['episodes']} failed, {old['leaked_slots']} leaked slots"],
    ])


@figure("scale.servers")
def scale_servers(r: Results) -> str:
    d = r("scale")
    loops = d["closed_loop"]
    many = d["sessions_1000"]
    return table(["what", "result"], [
        ["closed loop, 64 sessions, " + " / ".join(str(c["servers"]) for c in loops) + " server processes",
         " / ".join(f"{c['steps_per_s']:.0f}" for c in loops) + " steps/s"],
        [f"{many['sessions']:,} agent-paced sessions over {many['servers']} server processes",
         f"**{many['errors']} errors, {many['pool_leases_after']} slots leaked** ({many['steps']:,} steps in "
         f"{num(many['seconds'], 0)} s)"],
    ])


@figure("rollout.speed")
def rollout_speed(r: Results) -> str:
    d = r("rollout")
    c, z, e = d["completion_path"], d["zero_cost_steps"], d["env_steps"]
    return table(["what", "result", "target"], [
        [f"completion path, {c['in_flight']:,} groups in flight: `CompletionQueue` vs a naive `asyncio.wait` loop",
         f"{ms(c['driver_seconds'])} vs {num(c['naive_asyncio_wait_seconds'])} s: **{times(c['speedup'], 0)}**",
         f"≥ {times(c['target_speedup'], 0)}"],
        ["full rollout step (16/8/32/64, heuristic policy), in-process env",
         f"{e['in_process']['episodes_per_second']:.0f} episodes/s, "
         f"{num(e['in_process']['step_seconds_mean'])} s/step", ""],
        ["the same through the HTTP env server (same process)",
         f"{e['http']['episodes_per_second']:.0f} episodes/s", ""],
        ["driver alone (zero-cost episodes, every output written and fsync'd)",
         f"{num(z['driver_ms_per_group'])} ms per group", ""],
    ])


@figure("slime.abort")
def slime_abort(r: Results) -> str:
    d = r("slime_abort")
    rows = []
    for key, what in (("decoding", "every slot decoding"), ("turns", "episodes taking 100 ms turns"),
                      ("turns_abort_ignored", "the same, the abort ignored (the hook before)")):
        x = d[key]
        rows.append([what, f"{num(x['abort_to_idle_seconds'])} s", str(x["generate_after_abort"]),
                     str(x["leased_after"])])
    return table([f"{d['episodes_in_flight']} episodes in flight on {d['env_slots']} env slots", "abort to idle",
                  "`/generate` after abort", "slots leased after"], rows)


@figure("costs")
def costs(r: Results) -> str:
    sel, learn, mem = r("selector"), r("learner")["summary"], r("memory")["runs"]
    now, before = mem["this checkout"], mem["--code /tmp/relcli-base"]
    return table(["what", "result", "target"], [
        [f"the spread rule, {sel['selector_100k']['prompts']:,} prompts, per chosen prompt",
         f"{num(sel['selector_100k']['us_per_chosen_prompt_median'], 1)} µs",
         f"≤ {num(sel['target_us_per_chosen_prompt'], 0)} µs"],
        ["`--learner grpo` against `--learner none`, median step",
         f"{num(learn['step_seconds_median_grpo'])} s vs {num(learn['step_seconds_median_none'])} s: "
         f"**{times(learn['ratio_grpo_over_none'])}** (the update: {num(learn['learner_seconds_per_step_median'])} s)",
         f"≤ {times(learn['target_ratio'])}"],
        ["resident memory of a 200-step rollout, growth per step",
         f"{num(now['growth_kb_per_step'], 0)} kB (the code before: {num(before['growth_kb_per_step'], 0)} kB)", ""],
    ])


@figure("view.pages")
def view_pages(r: Results) -> str:
    d = r("view")
    rows = [[page, ms(p["median_seconds"]), ms(p["worst_seconds"])] for page, p in d["pages"].items()]
    rss = d["server_rss_mb"]
    rows.append(["server memory (RSS), start → after every page",
                 f"{rss['after_start']:.0f} MB", f"{rss['after_all_pages']:.0f} MB"])
    return table([f"page ({d['steps']} steps × {d['traces']:,} traces, {d['pages']['runs']['requests']} requests)",
                  "median", "worst"], rows)


SELECTION_COLUMNS = ["selection/waves", "informative groups per 1k generated episodes", "held-out success at the budget",
                     "vs seed/fixed at equal episodes: worst median from 2,500 on",
                     "episodes to reach seed/fixed's final (median)", "most trainings of one prompt"]


def selection_rows(regime: dict[str, Any]) -> list[list[str]]:
    rows = []
    for name, s in regime["summary"].items():
        p = regime["paired"].get(name)
        ratio = f" ({times(p['informative_per_1k_ratio']['median'])})" if p else ""
        reach = p["episodes_to_reach_seed_fixed_final"]["median_ratio"] if p else None
        rows.append([name, num(s["informative_per_1k_generated_episodes"], 1) + ratio,
                     num(s["final_eval_success"], 3), signed(p["at_equal_episodes"]["worst_median"]) if p else "",
                     (times(reach) if reach is not None else "not reached") if p else "",
                     f"{s['max_trainings_per_prompt']:.0f}"])
    return rows


def selection_table(stem: str, regime: str, r: Results) -> str:
    return table(SELECTION_COLUMNS, selection_rows(r(stem)["regimes"][regime]))


def targets_table(stem: str, r: Results) -> str:
    rows = []
    for name, t in r(stem)["targets"].items():
        value = t["value"]
        shown = "—" if value is None else num(value, 3)
        if "worst_interval_low" in t:
            shown += f" (lowest 95% bound {signed(t['worst_interval_low'])})"
        rows.append([name.replace(">=", "≥").replace("<=", "≤"), shown, verdict(t["met"])])
    return table(["target", "value", ""], rows)


for _stem, _regime in (("selection", "products_2000"), ("selection_release", "release"),
                       ("selection_forecast_products_2000", "products_2000"), ("selection_release_labels", "release")):
    FIGURES[f"{_stem}.{_regime}"] = partial(selection_table, _stem, _regime)
# One line per results file whose "targets" block a page shows.
for _stem in ("selection_clock",):
    FIGURES[f"{_stem}.targets"] = partial(targets_table, _stem)


def paired(r: Results, name: str, regime: str = "products_2000") -> dict[str, Any]:
    return r("selection")["regimes"][regime]["paired"][name]


for _name, _fn in {
    "selection.adaptive_worst_median": lambda r: signed(paired(r, "skip/adaptive")["at_equal_episodes"]
                                                        ["worst_median"]),
    "selection.adaptive_episodes_to_final": lambda r: times(paired(r, "skip/adaptive")
                                                            ["episodes_to_reach_seed_fixed_final"]["median_ratio"]),
    "selection.adaptive_informative_ratio": lambda r: times(paired(r, "skip/adaptive")
                                                            ["informative_per_1k_ratio"]["median"]),
    "selection.spread_fixed_final_diff": lambda r: signed(paired(r, "spread/fixed")["final_eval_success_diff"]
                                                          ["median"]),
}.items():
    FIGURES[_name] = _fn


@figure("forecast.forms")
def forecast_forms(r: Results) -> str:
    d = r("forecast")
    rows = [[form, num(s["brier"], 3), signed(s["brier_skill"]), num(s["auc"], 3),
             f"{num(s['spread_share_handed_out'], 2)} ({num(s['handed_out_share'], 2)} handed out)"]
            for form, s in d["summary_median"].items()]
    return table([f"what predicts a never-seen prompt's spread (seeds {', '.join(map(str, d['seeds']))})",
                  "Brier score", "skill over the base rate", "AUC", "spread share of what the rule hands out"],
                 rows)


for _name, _form in (("offline_auc", "text+labels, fitted offline"), ("online_auc", "text+labels"),
                     ("reference_auc", "reference label")):
    FIGURES[f"forecast.{_name}"] = partial(lambda form, r: num(r("forecast")["summary_median"][form]["auc"], 3), _form)


def clock_summary(stem: str, r: Results) -> str:
    d = r(stem)
    rows = [[name, f"{s['steps']:.0f}", f"{s['generated_episodes']:,.0f}", num(s["model_total_h"]),
             num(s["budget_final_eval_success"], 3), num(s["budget_informative_per_1k"], 1)]
            for name, s in d["summary"].items()]
    return table(["selection/waves", "steps", "generated episodes", "modelled wall time, h", "held-out success at the end",
                  "informative groups per 1k episodes"], rows)


def clock_verdict(stem: str, r: Results) -> str:
    """Each configuration against seed/fixed of the same seeds, on the bill: time to reach its final, and the held-out
    difference at equal modelled wall time (the worst mean over its evaluations, and the worst 95% bound)."""
    d = r(stem)
    rows = []
    for name, v in d["against_seed_fixed"].items():
        reach, at = v["to_reach_seed_fixed_final"], v["at_equal_model_time"]
        ratio = reach["median_ratio_model_s"]
        rows.append([name, "not at the median" if ratio is None else times(ratio), f"{reach['reached']} of {len(reach['per_seed'])}",
                     signed(at["worst_mean"]), signed(at["worst_low"]),
                     signed(at["interval_at_common_last"]["mean"])])
    return table(["vs seed/fixed, paired by seed", "modelled wall time to reach its final (median)", "seeds that reach it",
                  "at equal time: worst mean", "worst 95% bound", "at the last common time"], rows)


# One line per results file of the judge on the modelled clock.
FIGURES["selection_clock.summary"] = partial(clock_summary, "selection_clock")
for _stem in ("selection_clock_forecast", "selection_clock_release"):
    FIGURES[f"{_stem}.verdict"] = partial(clock_verdict, _stem)
FIGURES["selection_clock_release.fixed_async_reach"] = lambda r: times(
    r("selection_clock_release")["against_seed_fixed"]["forecast/fixed+async"]["to_reach_seed_fixed_final"]
    ["median_ratio_model_s"])
FIGURES["selection_release_labels.labels_low"] = lambda r: signed(
    r("selection_release_labels")["regimes"]["release"]["paired"]["forecast/adaptive+labels"]["at_equal_episodes"]
    ["worst_low"])
FIGURES["selection_release_labels.labels_reached"] = lambda r: str(
    r("selection_release_labels")["regimes"]["release"]["paired"]["forecast/adaptive+labels"]
    ["episodes_to_reach_seed_fixed_final"]["reached"])
FIGURES["selection_clock_release.labels_time"] = lambda r: times(
    r("selection_clock_release")["summary"]["forecast/fixed+async+labels"]["model_total_h"]
    / r("selection_clock_release")["summary"]["seed/fixed"]["model_total_h"])
FIGURES["selection_clock_release.labels_low"] = lambda r: signed(
    r("selection_clock_release")["against_seed_fixed"]["forecast/fixed+async+labels"]["at_equal_model_time"]
    ["worst_low"])
FIGURES["selection_clock_release_labels.labels_low"] = lambda r: signed(
    r("selection_clock_release_labels")["against_seed_fixed"]["forecast/fixed+async+labels"]["at_equal_model_time"]
    ["worst_low"])
for _name, _config in (("labels", "forecast/fixed+async+labels"), ("plain", "forecast/fixed+async")):
    FIGURES[f"selection_clock_release_labels.{_name}_last"] = partial(lambda config, r: "{} [{}, {}]".format(*(
        signed(r("selection_clock_release_labels")["against_seed_fixed"][config]["at_equal_model_time"]
               ["interval_at_common_last"][k]) for k in ("mean", "low", "high"))), _config)
FIGURES["selection_clock_forecast.fixed_async_time"] = lambda r: times(
    r("selection_clock_forecast")["summary"]["forecast/fixed+async"]["model_total_h"]
    / r("selection_clock_forecast")["summary"]["seed/fixed"]["model_total_h"])
FIGURES["selection_clock_forecast.seeds_needed"] = lambda r: str(r("selection_clock_forecast")["seeds_needed"]
                                                                ["seeds_for_half_width"])


@figure("clock.fit")
def clock_fit(r: Results) -> str:
    d = r("gpu_clock")
    rows = [[what, num(x["median_s"], 1), num(x["p10_s"], 1), num(x["p90_s"], 1), num(x["mean_s"], 1)]
            for what, x in (("the release run (`perf/rollout_time`)", d["release"]),
                            ("the main job, modelled clock", d["main_job"]["modelled"]))]
    return table(["step time, s", "median", "p10", "p90", "mean"], rows)


@figure("clock.cost")
def clock_cost(r: Results) -> str:
    d = r("clock_cost")
    rows = [[name, num(s["machine_s"]["machine"], 1), num(s["machine_s"]["modelled"], 1),
             times(s["modelled_over_machine"])] for name, s in d["configs"].items()]
    return table([f"machine seconds for {d['steps']} steps (median of {d['repeats']})", "machine clock",
                  "modelled clock", "modelled / machine"], rows)


@figure("async_loop.calibrated")
def async_loop(r: Results) -> str:
    d = r("async_loop")
    rows = [[name, num(s["sync"]["loop_wall_s_per_informative_group"]),
             num(s["async"]["loop_wall_s_per_informative_group"]), f"**{num(s['async_over_sync'], 3)}**",
             num(s["overlap_only_over_sync"], 3)] for name, s in d["summary"].items()]
    return table([f"selection/waves ({d['timing']['train_s']} s training, {d['timing']['weight_sync_s']} s weight sync)",
                  "sync: s per informative group", "async: s per informative group", "async / sync",
                  "overlap alone / sync"], rows)


@figure("simulate.learner_world")
def learner_world(r: Results) -> str:
    d = r("selection_sim")
    names = list(d["learner"]["summary"])
    learner = {n: sorted(v)[len(v) // 2] for n, v in d["learner_final_by_seed"].items()}
    return table(["selection/waves", "learner world", "learner (`--products 2000`, median)", "calibrated world, 160 prompts"],
                 [[n, num(d["learner"]["summary"][n]["final_mean_pass_rate"], 3), num(learner[n], 3),
                   num(d["calibrated_160_prompts"]["summary"][n]["final_mean_pass_rate"], 3)] for n in names])


@figure("simulate.fit")
def simulate_fit(r: Results) -> str:
    d = r("simulate_fit")
    rows = [[("**" + k + " (chosen)**") if float(k) == d["chosen"]["eta_prompt"] else k, num(w["release_loss"], 3),
             num(w["zero_had_zero_before"]), num(w["zero_comes_back"], 3), num(w["joint_loss"], 4)]
            for k, w in d["best_per_eta_prompt"].items()]
    return table(["`eta_prompt` (logits per prompt trained on)", "release loss", "had zero before (GRESO > 0.90)",
                  "comes back (GRESO ≈ 0.20)", "joint loss"], rows)
