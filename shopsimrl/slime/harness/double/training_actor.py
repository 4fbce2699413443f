"""slime's training actor (``MegatronTrainRayActor``) on no GPU, and how a leg steers it.

It records what slime hands it to train, and saves and loads checkpoints as Megatron's
``latest_checkpointed_iteration.txt`` (so slime's own ``load`` path decides where a resumed
run starts).  Written from reading slime's ``slime/ray/actor_group.py`` and ``train.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shopsimrl.errors import InfraFailure


@dataclass
class ActorControl:
    """What the leg tells the training actor, which slime builds itself (``ray.remote(actor_cls)``), so it can
    only be reached through module state: one object, in the leg's child process only.

    ``observers`` are called with (rollout_id, train data) for every step slime trains;
    ``crash_at``: the rollout id whose ``train`` raises :class:`HarnessCrash` (a node lost mid-run).
    """

    observers: list[Callable[[int, dict[str, Any]], None]] = field(default_factory=list)
    crash_at: int | None = None


ACTOR = ActorControl()


class HarnessCrash(InfraFailure, RuntimeError):
    """The crash the harness injects into the training actor (a node lost mid-run)."""


class TrainingActor:
    """Megatron's training actor as slime drives it (``slime/ray/actor_group.py``), on no GPU.

    ``init`` returns the rollout id to start from: one past the checkpoint in ``--load``
    (``latest_checkpointed_iteration.txt``, as Megatron's checkpointing writes it), 0 with none.
    ``train`` hands the step's train data to :data:`ACTOR`'s observers; ``save_model`` writes the
    checkpoint marker.
    """

    def __init__(self, world_size: int, rank: int, master_addr: str | None = None, master_port: int | None = None) -> None:
        self.rank, self.world_size = rank, world_size
        self.args: Any = None
        self.rollout_manager: Any = None

    def get_master_addr_and_port(self) -> tuple[str, int]:
        return "127.0.0.1", 0

    def init(self, args: Any, role: str, with_ref: bool = False, with_opd_teacher: bool = False) -> int:
        self.args = args
        marker = Path(args.load or "") / "latest_checkpointed_iteration.txt" if args.load else None
        if marker is not None and marker.is_file():
            return int(marker.read_text().strip()) + 1
        return 0

    def set_rollout_manager(self, rollout_manager: Any) -> None:
        import ray  # the stand-in Ray: in sys.modules only once the stand-ins are installed

        self.rollout_manager = rollout_manager
        if self.rank == 0:  # as slime's TrainRayActor: rank 0 tells the manager how to split the train data
            model_parallel = self.args.tensor_model_parallel_size * self.args.pipeline_model_parallel_size
            config = {"dp_size": max(1, self.world_size // model_parallel), "cp_size": 1, "vpp_size": 1,
                      "microbatch_group_size_per_vp_stage": 1}
            ray.get(rollout_manager.set_train_parallel_config.remote(config))

    def train(self, rollout_id: int, rollout_data_ref: Any, external_data: Any = None) -> None:
        import ray  # the stand-in Ray: in sys.modules only once the stand-ins are installed

        if ACTOR.crash_at == rollout_id:
            raise HarnessCrash(f"training actor lost at rollout {rollout_id} (injected)")
        if self.rank != 0:
            return
        parts = [ray.get(box.inner) for box in rollout_data_ref]
        for observe in ACTOR.observers:
            observe(rollout_id, {"parts": parts})

    def save_model(self, rollout_id: int, force_sync: bool = False) -> None:
        if self.rank != 0 or not self.args.save:
            return
        directory = Path(self.args.save)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "latest_checkpointed_iteration.txt").write_text(str(rollout_id))

    def update_weights(self) -> None:
        return None

    def clear_memory(self) -> None:
        return None

    def wake_up(self) -> None:
        return None

    def sleep(self) -> None:
        return None
