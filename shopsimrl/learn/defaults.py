"""The learner's defaults, each defined once; imports nothing."""

from __future__ import annotations

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
#: separate strategies whose held-out success differs by a few points; benchmarks only, test stays unseen otherwise).
EVAL_SPLITS = ("val", "val+test")
DEFAULT_EVAL_SPLIT = "val"
#: Products the learned shopper opens at most before it buys the best one it saw.
MAX_INSPECTED = 3

#: The run-folder file of the parameters after a step's updates (inside step-<k>/).
STATE_FILE = "policy.npz"
#: The per-step evaluation record (inside step-<k>/).
EVAL_FILE = "eval.json"
