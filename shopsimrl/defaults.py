"""Every default of the package, each defined once, with where it comes from: the one home of the values a user can
change (a command-line flag, a launcher variable, a slime custom-config key) and of the fixed names that pair with
them (files in a run folder, the hook paths slime loads).

Every module, flag and script that needs one imports it from here, so a default cannot differ from one place to
another (``tests/test_defaults.py`` fails on a second definition).  Standard library only and no import of the
package, like ``shopsimrl.errors``: the option parsers, the slime launcher and the pure ``sampling`` core read it
without loading anything else.  What is not here, and why:

- the typed configurations that *use* these values stay with the code that checks them: ``SamplingKnobs``
  (``sampling/knobs.py``, slime's rules for the five knobs), ``RolloutConfig`` (``rollout/run.py``), ``TrainKnobs``
  and ``TrainConfig`` (``slime/launch_knobs.py``, ``slime/launch.py``: each launcher variable is one line with its
  default and its help);
- a default that is a member of an enum stays beside its enum (``DEFAULT_SELECTION``, ``DEFAULT_WAVE_MODE``,
  ``DEFAULT_SIBLINGS``, ``DEFAULT_TRAINING_LOOP``, ``DEFAULT_CLOCK``, ``DEFAULT_ACTION_FORMAT``): this module
  cannot import the enum;
- a class's own tuning that no flag exposes (back-off, probe and release timeouts of the env clients) stays with
  the class.
"""

from __future__ import annotations

from pathlib import Path

# -- the environment (shopsimrl env serve, its clients) -------------------------------------------------------------

#: Where ``shopsimrl env serve`` (and ``shopsimrl view``) listen: loopback, so nothing beyond this machine reaches it.
DEFAULT_HOST = "127.0.0.1"
#: The env server's port (``--port``, ``ENV_PORT``).
DEFAULT_PORT = 5700
#: The URL clients use when none is given (the slime hooks, the training scripts).
DEFAULT_URL = f"http://{DEFAULT_HOST}:{DEFAULT_PORT}"
#: Episodes at once per env server (``--slots``, ``ENV_SLOTS``).
DEFAULT_SLOTS = 48
#: The most slots one env server takes (``--slots``): each is a list entry made up front, so a typo of a few
#: more zeros would be a MemoryError rather than a server.
MAX_SLOTS = 100_000
#: Env steps an episode may take before the env ends it with ``action_limit`` (``--action-limit``).
DEFAULT_ACTION_LIMIT = 30
#: Seconds a ``reset`` waits for a free slot.
DEFAULT_RESET_TIMEOUT = 30.0
#: Seconds a lease may sit unused before the pool reclaims it (a client that vanished; ``--lease-ttl``).
DEFAULT_IDLE_TIMEOUT = 300.0
#: Seconds the HTTP server keeps a client's idle connection open; clients keep theirs for less
#: (``HttpEnvClient``: 30 s), so none sends into a connection the server is closing.
KEEP_ALIVE = 75
#: Seconds an env client waits for one request (``HttpEnvClient``, ``EnvPool``, ``--env-timeout``).
DEFAULT_CLIENT_TIMEOUT = 30.0
#: The catalog's size (``--products``): the public release run's.
DEFAULT_PRODUCTS = 20_000
#: The catalog's seed (``--catalog-seed``; ``--seed`` of ``shopsimrl env serve`` and ``data export``).
DEFAULT_CATALOG_SEED = 0

# -- the agent --------------------------------------------------------------------------------------------------------

#: Turns per episode before the episode ends with ``action_limit`` (``--max-turns``, ``SHOPSIM_MAX_TURNS``).
#: A turn is one policy reply, whether it became an env step or a protocol error.
DEFAULT_MAX_TURNS = 30

# -- dynamic sampling (docs/dynamic-sampling.md §1: the values of slime's ``run_full_train.sh``) --------------------

#: Groups kept per rollout step (``--rollout-batch-size``, ``ROLLOUT_BATCH_SIZE``).
DEFAULT_ROLLOUT_BATCH_SIZE = 16
#: Siblings per group (``--n-samples-per-prompt``; ``shopsimrl measure --siblings``).
DEFAULT_N_SAMPLES_PER_PROMPT = 8
#: Groups a wave submits: 16 spare slots for a target of 16 (``--over-sampling-batch-size``).
DEFAULT_OVER_SAMPLING_BATCH_SIZE = 32
#: Episodes per optimizer update: 2 updates per step (``--global-batch-size``).
DEFAULT_GLOBAL_BATCH_SIZE = 64
#: Technical groups in a row that stop the run (``--max-consecutive-failed-groups``).
DEFAULT_MAX_CONSECUTIVE_FAILED_GROUPS = 8
#: Adaptive waves: expected informative groups kept in flight above the number still missing (the margin the rule
#: adds to ``target - kept``); negative keeps fewer (never fewer groups than are missing).  Chosen on simulation
#: seeds 100-104 as the fewest episodes per trained episode whose informative share stays >= 92% (``--cushion``,
#: ``shopsim_wave_cushion``; see docs/selection.md).
DEFAULT_CUSHION = -1.5
#: Staged siblings: stop after ``K`` when the predicted chance that the rest breaks the agreement is below this
#: (chosen with ``DEFAULT_STAGE_SKIP_Q`` on simulation seeds 100-104, see docs/selection.md).
DEFAULT_STAGE_THRESHOLD = 0.175
#: Staged siblings: start a group whole when its predicted chance of spread ``q`` is at least this (staging skipped):
#: it saves such a group the second round of latency.  1.0 (stage every group) gave seed/fixed 1.7% more informative
#: groups per episode on the tuning seeds, but cost skip/adaptive +47% wall time per informative group (0.5:
#: +8%) (``--stage-skip-q``).
DEFAULT_STAGE_SKIP_Q = 0.5

# -- the rollout (shopsimrl rollout, RolloutConfig) -------------------------------------------------------------------

#: Rollout steps per run (``--steps``).
DEFAULT_STEPS = 1
#: Seeds the task order, the episode seeds and fault injection (``shopsimrl rollout --seed``).
DEFAULT_SEED = 0
#: Where run folders go (``--out``): ``runs/<name>/``; ``shopsimrl view`` reads the same folder by default.
DEFAULT_OUT = Path("runs")
#: Episodes running at once, over all groups (``--episode-concurrency``).
DEFAULT_EPISODE_CONCURRENCY = 64
#: The most ``--episode-concurrency`` accepts: the in-process env gets one slot per concurrent episode, and a
#: billion slots is a MemoryError, not a rollout (no wave comes near this many episodes).
MAX_EPISODE_CONCURRENCY = 100_000
#: Tasks ``shopsimrl measure`` plays, a group of siblings each (``--tasks``).
DEFAULT_MEASURE_TASKS = 64

# -- the learner (shopsimrl rollout --learner) ------------------------------------------------------------------------

#: ``--learner`` choices: none (the faithful default), heuristic (per-task temperature decay), grpo.
LEARNERS = ("none", "heuristic", "grpo")
DEFAULT_LEARNER = "none"
#: Adam on the linear policy (slime's optimizer is Adam too; betas and eps are torch's defaults).
LEARNING_RATE = 0.05
ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8
#: PPO clip range of the GRPO surrogate (slime's --eps-clip default).
EPS_CLIP = 0.2
#: Sampled episodes per val task in each evaluation (slime's n_samples_per_eval_prompt); greedy plays one.
EVAL_SAMPLES_PER_TASK = 4
#: ``--eval-split`` choices: the val split (slime's eval set), or val and test together (twice the tasks, to
#: separate selections whose held-out success differs by a few points; benchmarks only, test stays unseen otherwise).
EVAL_SPLITS = ("val", "val+test")
DEFAULT_EVAL_SPLIT = "val"
#: Products the learned shopper opens at most before it buys the best one it saw.
MAX_INSPECTED = 3
#: The run-folder file of the parameters after a step's updates (inside step-<k>/).
STATE_FILE = "policy.npz"
#: The per-step evaluation record (inside step-<k>/).
EVAL_FILE = "eval.json"

# -- the simulator (shopsimrl simulate) -------------------------------------------------------------------------------

#: Steps per simulated run in the calibrated world (``--steps``); the learner world's run is its benchmark's
#: (``calibrate_learner.STEPS``).
DEFAULT_SIMULATE_STEPS = 80

# -- slime (the launcher, the hooks, shopsimrl slime check) ---------------------------------------------------------

#: slime's prompt file: written by ``shopsimrl data export --out``, read by the launcher (``PROMPT_DATA``).
DEFAULT_PROMPT_DATA = "data/shopsim_train.jsonl"
#: Where the generate hook writes traces when the custom config names no ``shopsim_trace_dir``.
DEFAULT_TRACE_DIR = "shopsim_traces"
#: slime's ``--data-source-path`` for prompt selection (``SELECTION=skip``).
DATA_SOURCE_PATH = "shopsimrl.slime.data_source.SelectorDataSource"
#: slime's ``--data-source-path`` under ``ASYNC=1`` where ``train.py`` runs slime's own (``SELECTION=seed WAVES=fixed``):
#: slime's own data source, saving its state as of the end of each rollout (``train_async.py`` saves after the next drew).
SLIME_ORDER_DATA_SOURCE_PATH = "shopsimrl.slime.data_source.slime_order_data_source"
#: slime's ``--rollout-function-path`` for adaptive waves (``WAVES=adaptive``).
ROLLOUT_FUNCTION_PATH = "shopsimrl.slime.rollout_fn.generate_rollout"
#: The hooks slime loads by dotted path on every run, by slime flag: the one place their paths are written.
#: These are the public, stable paths, not where the code lives (that is ``shopsimrl.slime.filter``, ``.rewards``,
#: ``.generate``, ``.metrics``, ``.evaluation``): slime users' scripts and saved launch configs already hold them
#: (the filter's is the seed's), so ``shopsimrl.slime_runtime`` and ``shopsimrl.slime_metrics`` re-export each hook
#: under its old name and the launcher keeps writing these.  tests/slime_hooks/test_hook_paths.py checks that each
#: resolves to its implementation.
HOOKS: dict[str, str] = {  # a constant (read, never written)
    "--dynamic-sampling-filter-path": "shopsimrl.slime_runtime.fully_scored_group_filter",
    "--custom-reward-post-process-path": "shopsimrl.slime_runtime.normalize_grpo_by_prompt_and_rollout",
    "--custom-generate-function-path": "shopsimrl.slime_runtime.generate",
    "--rollout-all-samples-process-path": "shopsimrl.slime_metrics.record_generated_rollout_groups",
    "--custom-rollout-log-function-path": "shopsimrl.slime_metrics.enrich_rollout_metrics",
    "--custom-eval-rollout-log-function-path": "shopsimrl.slime_metrics.drop_unscored_eval_episodes",
    "--eval-function-path": "shopsimrl.slime_metrics.eval_rollout",
}
#: Configurations ``shopsimrl slime check`` runs at once (``--jobs``).
DEFAULT_CHECK_JOBS = 2

# -- the run viewer (shopsimrl view) ----------------------------------------------------------------------------------

#: ``shopsimrl view``'s port (``--port``): TensorBoard's 6006 stays free for TensorBoard.
DEFAULT_VIEW_PORT = 6060
