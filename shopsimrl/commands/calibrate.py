"""``shopsimrl calibrate RELEASE_STEPS_CSV OUT_JSON``: fit the simulated world to the release run.

Prints the fit, and writes it with every grid row and the best row per ``eta_prompt``
(``simulate/calibrate.py`` holds the fit; docs/simulate.md its figures).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from shopsimrl.argtypes import in_file, out_file
from shopsimrl.commands.dispatch import handled_by
from shopsimrl.io import atomic_write_json


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("calibrate", help="fit the simulated world to the release run: RELEASE_CSV OUT_JSON",
                              description="Fit the simulated world to the public release run's per-step figures "
                              "and GRESO's zero-spread persistence; write the fit and every grid row to OUT_JSON.")
    p.add_argument("release_csv", type=in_file, metavar="RELEASE_STEPS_CSV",
                   help="the release run's per-step CSV (tests/data/shopsimrl_release_steps.csv)")
    p.add_argument("out_json", type=out_file, metavar="OUT_JSON", help="the JSON file to write, atomically")
    handled_by(p, handle)


def handle(args: argparse.Namespace) -> int:
    # the simulator (numpy) loads only when the command runs: --help stays fast
    from shopsimrl.simulate.calibrate import (
        FIT_GRID,
        FIT_SEEDS,
        GRESO_ZERO_COMES_BACK,
        GRESO_ZERO_HAD_ZERO_BEFORE,
        PERSISTENCE_WEIGHT,
        fit,
        release_figures,
    )

    real = release_figures(args.release_csv)  # ReleaseFileError: a refusal naming the file
    params, rows = fit(real)
    per_eta = {str(eta): min((r for r in rows if r.params.eta_prompt == eta), key=lambda r: r.joint_loss).as_dict()
               for eta in FIT_GRID["eta_prompt"]}
    best_release = min(rows, key=lambda r: r.release_loss)
    out = {"chosen": params.as_dict(), "seeds": list(FIT_SEEDS), "persistence_weight": PERSISTENCE_WEIGHT,
           "greso_targets": {"zero_had_zero_before_min": GRESO_ZERO_HAD_ZERO_BEFORE,
                             "zero_comes_back": GRESO_ZERO_COMES_BACK},
           "best_by_release_only": best_release.as_dict(), "best_per_eta_prompt": per_eta,
           "rows": [r.as_dict() for r in sorted(rows, key=lambda r: r.joint_loss)]}
    atomic_write_json(args.out_json, out)
    print(json.dumps({k: out[k] for k in ("chosen", "best_by_release_only", "best_per_eta_prompt")}, indent=1))
    return 0
