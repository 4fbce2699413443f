"""The spread forecast's form, measured against its alternatives on real runs' groups (tuning seeds only).

Reads the run folders ``bench_selection --keep DIR`` kept (``DIR/release/seed-fixed-<seed>``: seed/fixed over
the default catalog, 80 steps) and replays their groups in the order they were decided.  Every group of a
prompt observed at most once before (the forecast's domain) is predicted before it is learned from
(prequentially) by each form:

- ``base rate``: the decayed share of zero-spread groups (the reference every skill is measured against);
- ``history``: the chosen model fed the prompt's history alone (what prompt data without text or labels gives);
- ``labels``: history and the category;
- ``text+labels`` (the chosen form): the hashed logistic model of :mod:`shopsimrl.sampling.forecast`;
- ``similarity``: the zero-spread share of the ``NEIGHBOURS`` most similar prompts already observed (the Jaccard
  similarity of their instructions' word sets), shrunk toward the base rate;
- ``text+labels, fitted offline`` (the ceiling of the text): the same model fitted on every group of the *other*
  seeds' runs (``OFFLINE_PASSES`` passes) of prompts in the other ``FOLDS`` folds, so each prompt is predicted from
  five times the groups the online model has seen, but never from its own;
- with ``--labels FILE`` (a prompt file of each task's ``zero_spread_share`` on earlier runs, written by
  ``shopsimrl data export --zero-spread-from RUN ...``): ``reference label`` (that label and the history) and
  ``text+labels+reference``.

For each: the Brier score and its skill over the base rate, the area under the ROC curve, and the
share of groups with spread among those the ``forecast`` rule's skip (gate aside) would hand out, in
expectation, against the base share (the rule's informative-groups proxy).
"""

from __future__ import annotations

import argparse
import json
import zlib
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from benchmarks.common import machine, publish
from shopsimrl.learn.outcomes import LABEL
from shopsimrl.sampling.forecast import HISTORY, RARE_GROUPS, SCORE_DECAY, TEXT_KEY, SpreadForecast
from shopsimrl.sampling.skip import RETRY_FLOOR
from shopsimrl.slime.data import read_prompts

NEIGHBOURS = 20
SHRINK = 5.0  # pseudo-groups at the base rate behind a similarity prediction
FOLDS = 5  # the offline fit: prompts split by a hash of their id
OFFLINE_PASSES = 2


def decided_groups(run: Path) -> list[tuple[str, bool, str]]:
    """(task, zero spread, verdict as history) of every scored group, step by step in the order decided."""
    out = []
    steps = sorted(run.glob("step-*/events.jsonl"), key=lambda p: int(p.parent.name.split("-")[1]))
    for events in steps:
        for line in events.read_text().splitlines():
            event = json.loads(line) if line else {}
            if event.get("event") == "decision" and event["verdict"] != "technical":
                zero = event["verdict"] == "zero_std"
                kind = "spread" if not zero else "solved" if event["classification"] == "all_correct" else "failed"
                out.append((str(event["task_id"]), zero, kind))
    return out


def descriptions_of(products: int | None) -> dict[str, dict[str, str]]:
    """The train tasks' instructions and categories, as the main job's ``forecast`` rule reads them."""
    from shopsimrl.env.core import load_env  # lazily: the env is built only when the benchmark runs

    env = load_env(products) if products else load_env()
    out = {}
    for task_id in env.list_tasks("train"):
        task = env.get_task(task_id)
        out[task_id] = {TEXT_KEY: task.instruction, "category": str(task.goal["category"])}
    return out


class Similarity:
    """The zero-spread share of the most similar prompts observed so far (the alternative to a fitted model)."""

    def __init__(self, words: dict[str, frozenset[str]]) -> None:
        self.words = words
        self.seen: list[tuple[frozenset[str], float]] = []
        self.base = [1.0, 2.0]

    def predict(self, task: str) -> float:
        base = self.base[0] / self.base[1]
        if not self.seen:
            return base
        mine = self.words[task]
        near = sorted(self.seen, key=lambda s: -len(mine & s[0]) / max(1, len(mine | s[0])))[:NEIGHBOURS]
        return (sum(y for _w, y in near) + SHRINK * base) / (len(near) + SHRINK)

    def observe(self, task: str, zero: bool) -> None:
        self.seen.append((self.words[task], float(zero)))
        self.base = [SCORE_DECAY * self.base[0] + zero, SCORE_DECAY * self.base[1] + 1.0]


def auc(pairs: Sequence[tuple[float, float]]) -> float:
    """The chance a zero-spread group is predicted above a group with spread (ties count half)."""
    pos = sorted(p for p, y in pairs if y)
    neg = sorted(p for p, y in pairs if not y)
    if not pos or not neg:
        return 0.5
    import bisect  # lazily: only this figure needs it

    wins = sum(bisect.bisect_left(neg, p) + 0.5 * (bisect.bisect_right(neg, p) - bisect.bisect_left(neg, p))
               for p in pos)
    return wins / (len(pos) * len(neg))


def domain(groups: Sequence[tuple[str, bool, str]]) -> list[tuple[str, bool, str, str]]:
    """(task, zero spread, outcome, history before it) of every group of a prompt observed fewer than
    ``RARE_GROUPS`` times before: the groups the forecast predicts."""
    observed: dict[str, int] = {}
    history: dict[str, str] = {}
    out = []
    for task, zero, kind in groups:
        if observed.get(task, 0) < RARE_GROUPS:
            out.append((task, zero, kind, history.get(task, HISTORY[0])))
        observed[task] = observed.get(task, 0) + 1
        history[task] = kind
    return out


def fold_of(task: str) -> int:
    return zlib.crc32(task.encode()) % FOLDS


def offline(rare: Sequence[tuple[str, bool, str, str]], others: Sequence[Sequence[tuple[str, bool, str]]],
            ids: list[str], descriptions: dict[str, dict[str, str]]) -> list[float]:
    """Each of the ``rare`` groups (:func:`domain`) predicted by the text+labels model fitted on the ``others`` runs'
    domain groups of the prompts in the other folds (never its own prompt's)."""
    index = {t: i for i, t in enumerate(ids)}
    train = [g for run in others for g in domain(run)]
    models = []
    for fold in range(FOLDS):
        model = SpreadForecast(ids, descriptions)
        for _ in range(OFFLINE_PASSES):
            for task, _zero, kind, history in train:
                if fold_of(task) != fold:
                    model.observe(index[task], history, kind)
        models.append(model)
    return [models[fold_of(task)].predict(index[task], history) for task, _z, _k, history in rare]


def replay(groups: Sequence[tuple[str, bool, str]], ids: list[str], descriptions: dict[str, dict[str, str]],
           others: Sequence[Sequence[tuple[str, bool, str]]] = (),
           reference: dict[str, dict[str, Any]] | None = None) -> dict[str, dict[str, float]]:
    index = {t: i for i, t in enumerate(ids)}
    labels_only = {t: {k: v for k, v in d.items() if k != TEXT_KEY} for t, d in descriptions.items()}
    models = {"history": SpreadForecast(ids, None), "labels": SpreadForecast(ids, labels_only),
              "text+labels": SpreadForecast(ids, descriptions)}
    if reference is not None:
        models["reference label"] = SpreadForecast(ids, reference)
        models["text+labels+reference"] = SpreadForecast(
            ids, {t: {**d, **reference.get(t, {})} for t, d in descriptions.items()})
    rare = domain(groups)
    fitted = offline(rare, others, ids, descriptions) if others else None
    words = {t: frozenset(d[TEXT_KEY].lower().replace(",", " ").replace(".", " ").split()) for t, d in descriptions.items()}
    similar = Similarity(words)
    base = [1.0, 2.0]
    offline_form = ["text+labels, fitted offline"] if fitted is not None else []
    preds: dict[str, list[tuple[float, float, float]]] = {name: [] for name in [*models, "similarity", *offline_form,
                                                                                 "base rate"]}
    for k, (task, zero, kind, h) in enumerate(rare):
        i = index[task]
        rate = base[0] / base[1]
        guesses = {name: m.predict(i, h) for name, m in models.items()}
        guesses["similarity"] = similar.predict(task) if h == "new" else rate
        if fitted is not None:
            guesses["text+labels, fitted offline"] = fitted[k]
        guesses["base rate"] = rate
        for name, guess in guesses.items():
            preds[name].append((guess, float(zero), rate))
        for m in models.values():
            m.observe(i, h, kind)
        if h == "new":
            similar.observe(task, zero)
        base = [SCORE_DECAY * base[0] + zero, SCORE_DECAY * base[1] + 1.0]
    out = {}
    ref = sum((p - y) ** 2 for p, y, _r in preds["base rate"])
    for name, rows in preds.items():
        brier = sum((p - y) ** 2 for p, y, _r in rows)
        kept = [(1.0 - min(1.0 - RETRY_FLOOR, max(0.0, 1.0 - (1.0 - p) / (1.0 - r))) if r < 1.0 else 1.0, y)
                for p, y, r in rows]
        handed = sum(k for k, _y in kept)
        out[name] = {"groups": float(len(rows)), "brier": brier / len(rows), "brier_skill": 1.0 - brier / ref,
                     "auc": auc([(p, y) for p, y, _r in rows]),
                     "spread_share_handed_out": sum(k * (1.0 - y) for k, y in kept) / handed,
                     "spread_share_all": sum(1.0 - y for _k, y in kept) / len(kept),
                     "handed_out_share": handed / len(kept)}
    return out


def main(root: Path, seeds: Sequence[int], out: str, products: int | None = None,
         labels: Path | None = None) -> dict[str, Any]:
    descriptions = descriptions_of(products)
    ids = list(descriptions)
    reference = None
    if labels is not None:
        known, metadata = read_prompts(labels)
        reference = {t: {LABEL: metadata[t][LABEL]} for t in known if LABEL in metadata[t]}
    runs = {seed: decided_groups(root / f"seed-fixed-{seed}") for seed in seeds}
    per_seed = {str(seed): replay(groups, ids, descriptions, [g for s, g in runs.items() if s != seed], reference)
                for seed, groups in runs.items()}
    forms = next(iter(per_seed.values()))
    summary = {name: {key: sorted(r[name][key] for r in per_seed.values())[len(per_seed) // 2] for key in forms[name]}
               for name in forms}
    results = {"machine": machine(), "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"), "root": str(root),
               "seeds": list(seeds), "products": products or "default",
               **({"labels": str(labels)} if labels is not None else {}), "summary_median": summary,
               "per_seed": per_seed}
    publish(out, results, summary)
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", type=Path, help="the regime's folder of kept runs (bench_selection --keep DIR/release)")
    parser.add_argument("--seeds", type=int, nargs="+", required=True, help="tuning seeds (100+)")
    parser.add_argument("--products", type=int, default=None, help="the catalog's products (default: embedded)")
    parser.add_argument("--out", default="benchmarks/results/forecast.json")
    parser.add_argument("--labels", type=Path, default=None,
                        help="a prompt file with each task's zero_spread_share on earlier runs (data export "
                        "--zero-spread-from) to judge as a label")
    a = parser.parse_args()
    main(a.root, a.seeds, a.out, a.products, a.labels)
