"""Stand-ins for what slime needs a GPU for: torch, Ray, Megatron, SGLang's server arguments.

Each is a module built here and put into ``sys.modules`` by :func:`install`, in the
harness's child process only (never in a process that imports ``shopsimrl`` for
anything else).  Each holds just the names slime's rollout side touches, so a slime
release that starts using another one fails loudly (``AttributeError`` naming it),
which ``shopsimrl slime check`` reports as a mismatch.  Written from reading slime's
source (``train.py``, ``slime/ray/*``, ``slime/utils/*``, ``slime/backends/*``).

- ``torch``: numpy arrays as tensors (slime tensorizes the train data, reads int32
  meta arrays) and pickle for ``torch.save`` / ``torch.load`` (slime's data-source state);
- ``ray``: ``@ray.remote`` classes are built in this process and their methods run when
  called (``.remote()`` returns a ref holding the result or the exception, which
  ``ray.get`` raises, as Ray does); placement groups are bookkeeping;
- ``megatron.training.arguments``: a parser with the Megatron flags the launcher writes
  (and the attributes slime reads), taking slime's own arguments through
  ``extra_args_provider``, as Megatron's does;
- ``slime.backends.megatron_utils.actor.MegatronTrainRayActor``: the training actor
  (:mod:`.training_actor`);
- ``sglang`` / ``sglang_router``: the server-argument classes slime's parser and
  ``_compute_server_args`` read.  The servers themselves are :mod:`..scripted_sglang`.
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def _module(name: str, **attrs: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    module.__file__ = f"<shopsimrl stand-in for {name}>"
    return module


# -- torch --------------------------------------------------------------------------------------


def _torch() -> dict[str, types.ModuleType]:
    import numpy as np  # only when the stand-in torch is built, in the child

    class Tensor(np.ndarray):
        """A numpy array that answers the tensor methods slime calls."""

        def numel(self) -> int:
            return int(self.size)

        def detach(self) -> Tensor:
            return self

        def to(self, *args: Any, dtype: Any = None, **kwargs: Any) -> Tensor:
            return self.astype(dtype).view(Tensor) if dtype is not None else self

        def cpu(self) -> Tensor:
            return self

        def contiguous(self) -> Tensor:
            return np.ascontiguousarray(self).view(Tensor)

        @property
        def device(self) -> str:
            return "cpu"

    def as_tensor(value: Any, dtype: Any = None, device: Any = None) -> Tensor:
        return np.asarray(value, dtype=dtype).view(Tensor)

    def save(obj: Any, path: Any) -> None:
        with open(path, "wb") as handle:
            pickle.dump(obj, handle)

    def load(path: Any, weights_only: bool = False, **kwargs: Any) -> Any:
        with open(path, "rb") as handle:
            return pickle.load(handle)

    cuda = _module("torch.cuda", is_available=lambda: False, device_count=lambda: 0)
    distributed = _module("torch.distributed", is_initialized=lambda: False, get_rank=lambda group=None: 0,
                          get_world_size=lambda group=None: 1)
    torch = _module(
        "torch",
        Tensor=Tensor,
        dtype=np.dtype,
        Size=tuple,
        device=str,
        Generator=object,
        long=np.int64, int=np.int32, int32=np.int32, int64=np.int64, float=np.float32, float32=np.float32,
        float16=np.float16, bfloat16=np.float32, bool=np.bool_, uint8=np.uint8,
        as_tensor=as_tensor,
        tensor=as_tensor,
        is_tensor=lambda value: isinstance(value, Tensor),
        cat=lambda tensors, dim=0: np.concatenate(tensors, axis=dim).view(Tensor),
        diff=lambda value: np.diff(value).view(Tensor),
        count_nonzero=lambda value: int(np.count_nonzero(value)),
        frombuffer=lambda buffer, dtype: np.frombuffer(buffer, dtype=dtype).view(Tensor),
        save=save,
        load=load,
        cuda=cuda,
        distributed=distributed,
        __path__=[],
        __version__="0.0.0+shopsimrl.stand_in",
    )
    return {"torch": torch, "torch.cuda": cuda, "torch.distributed": distributed}


# -- ray ----------------------------------------------------------------------------------------


class ObjectRef:
    """A finished call: its value, or the exception ``ray.get`` raises."""

    def __init__(self, value: Any = None, error: BaseException | None = None) -> None:
        self.value, self.error = value, error


def _call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> ObjectRef:
    try:
        return ObjectRef(fn(*args, **kwargs))
    except Exception as exc:  # Ray hands the exception back through ray.get
        return ObjectRef(error=exc)


class _Method:
    def __init__(self, bound: Callable[..., Any]) -> None:
        self._bound = bound

    def remote(self, *args: Any, **kwargs: Any) -> ObjectRef:
        return _call(self._bound, *args, **kwargs)

    def options(self, **options: Any) -> _Method:
        return self


class ActorHandle:
    def __init__(self, instance: Any) -> None:
        self._instance = instance

    def __getattr__(self, name: str) -> _Method:
        return _Method(getattr(self._instance, name))


class ActorClass:
    def __init__(self, cls: type) -> None:
        self._cls = cls

    def options(self, **options: Any) -> ActorClass:
        return self

    def remote(self, *args: Any, **kwargs: Any) -> ActorHandle:
        return ActorHandle(self._cls(*args, **kwargs))


class RemoteFunction:
    def __init__(self, fn: Callable[..., Any]) -> None:
        self._fn = fn

    def options(self, **options: Any) -> RemoteFunction:
        return self

    def remote(self, *args: Any, **kwargs: Any) -> ObjectRef:
        return _call(self._fn, *args, **kwargs)


def _remote(*args: Any, **options: Any) -> Any:
    def wrap(target: Any) -> Any:
        return ActorClass(target) if isinstance(target, type) else RemoteFunction(target)

    if len(args) == 1 and not options and callable(args[0]):
        return wrap(args[0])
    return wrap


def _get(refs: Any, timeout: float | None = None) -> Any:
    if isinstance(refs, list):
        return [_get(ref) for ref in refs]
    if refs.error is not None:
        raise refs.error
    return refs.value


@dataclass
class PlacementGroup:
    bundles: list[dict[str, float]]
    strategy: str = "PACK"

    def ready(self) -> ObjectRef:
        return ObjectRef(self)


@dataclass
class PlacementGroupSchedulingStrategy:
    placement_group: Any = None
    placement_group_bundle_index: int = -1
    placement_group_capture_child_tasks: bool = False


def _ray() -> dict[str, types.ModuleType]:
    pg_module = _module("ray.util.placement_group", placement_group=lambda bundles, strategy="PACK", **kw: PlacementGroup(bundles, strategy),
                        PlacementGroup=PlacementGroup)
    strategies = _module("ray.util.scheduling_strategies", PlacementGroupSchedulingStrategy=PlacementGroupSchedulingStrategy)
    util = _module("ray.util", placement_group=pg_module, scheduling_strategies=strategies,
                   get_node_ip_address=lambda: "127.0.0.1")
    services = _module("ray._private.services", get_node_ip_address=lambda: "127.0.0.1")
    private = _module("ray._private", services=services)
    ray = _module(
        "ray",
        remote=_remote,
        get=_get,
        put=lambda value, **kwargs: ObjectRef(value),
        wait=lambda refs, timeout=None, num_returns=1, **kw: (list(refs), []),
        kill=lambda actor, no_restart=True: None,
        init=lambda *args, **kwargs: None,
        is_initialized=lambda: True,
        get_gpu_ids=lambda: [0],
        cluster_resources=lambda: {"GPU": 0.0},
        available_resources=lambda: {"GPU": 0.0},
        ObjectRef=ObjectRef,
        util=util,
        _private=private,
        __version__="0.0.0+shopsimrl.stand_in",
    )
    return {"ray": ray, "ray.util": util, "ray.util.placement_group": pg_module,
            "ray.util.scheduling_strategies": strategies, "ray._private": private, "ray._private.services": services}


# -- sglang, sglang_router ----------------------------------------------------------------------


@dataclass
class ServerArgs:
    """The SGLang server arguments slime's parser and ``_compute_server_args`` read."""

    model_path: str = ""
    trust_remote_code: bool = False
    random_seed: int = 0
    enable_memory_saver: bool = False
    host: str = "127.0.0.1"
    port: int = 30000
    nccl_port: int | None = None
    nnodes: int = 1
    node_rank: int = 0
    dist_init_addr: str | None = None
    gpu_id_step: int = 1
    base_gpu_id: int = 0
    tp_size: int = 1
    dp_size: int = 1
    pp_size: int = 1
    ep_size: int = 1
    moe_dp_size: int = 1
    skip_server_warmup: bool = False
    enable_draft_weights_cpu_backup: bool = False
    enable_metrics: bool = False
    mem_fraction_static: float | None = None
    enable_dp_attention: bool = False
    enable_deterministic_inference: bool = False
    api_key: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--dp-size", type=int, default=1)
        parser.add_argument("--pp-size", type=int, default=1)
        parser.add_argument("--ep-size", type=int, default=1)
        parser.add_argument("--moe-dp-size", type=int, default=1)
        parser.add_argument("--mem-fraction-static", type=float, default=None)
        parser.add_argument("--enable-dp-attention", action="store_true")
        parser.add_argument("--enable-deterministic-inference", action="store_true")
        parser.add_argument("--api-key", type=str, default=None)


class RouterArgs:
    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser, use_router_prefix: bool = False, exclude_host_port: bool = False) -> None:
        prefix = "router-" if use_router_prefix else ""
        parser.add_argument(f"--{prefix}policy", type=str, default="cache_aware")
        parser.add_argument(f"--{prefix}log-level", type=str, default="info")
        parser.add_argument(f"--{prefix}balance-abs-threshold", type=int, default=64)
        parser.add_argument(f"--{prefix}balance-rel-threshold", type=float, default=1.5)


def _sglang() -> dict[str, types.ModuleType]:
    server_args = _module("sglang.srt.server_args", ServerArgs=ServerArgs)
    utils = _module("sglang.srt.utils", kill_process_tree=lambda *args, **kwargs: None)
    constants = _module("sglang.srt.constants", GPU_MEMORY_TYPE_CUDA_GRAPH="cuda_graph",
                        GPU_MEMORY_TYPE_KV_CACHE="kv_cache", GPU_MEMORY_TYPE_WEIGHTS="weights")
    srt = _module("sglang.srt", server_args=server_args, utils=utils, constants=constants)
    sglang = _module("sglang", srt=srt, __version__="0.0.0+shopsimrl.stand_in")
    launch_router = _module("sglang_router.launch_router", RouterArgs=RouterArgs)
    router = _module("sglang_router", launch_router=launch_router)
    return {"sglang": sglang, "sglang.srt": srt, "sglang.srt.server_args": server_args, "sglang.srt.utils": utils,
            "sglang.srt.constants": constants, "sglang_router": router, "sglang_router.launch_router": launch_router}


# -- megatron -----------------------------------------------------------------------------------


def _megatron_parser() -> argparse.ArgumentParser:
    """Megatron's flags that the launcher writes, and the Megatron attributes slime's rollout side reads."""
    parser = argparse.ArgumentParser(description="Megatron-LM arguments (stand-in)", allow_abbrev=False)
    add = parser.add_argument
    for flag in ("--load", "--save", "--tokenizer-model", "--tokenizer-type", "--lr-decay-style",
                 "--optimizer", "--position-embedding-type"):
        add(flag, type=str, default=None)
    for flag in ("--save-interval", "--global-batch-size", "--micro-batch-size", "--seq-length", "--max-position-embeddings",
                 "--vocab-size", "--padded-vocab-size", "--decoder-first-pipeline-num-layers",
                 "--decoder-last-pipeline-num-layers", "--ckpt-step", "--num-layers", "--hidden-size",
                 "--ffn-hidden-size", "--num-attention-heads", "--seed"):
        add(flag, type=int, default=None)
    add("--tensor-model-parallel-size", type=int, default=1)
    add("--pipeline-model-parallel-size", type=int, default=1)
    add("--context-parallel-size", type=int, default=1)
    add("--expert-model-parallel-size", type=int, default=1)
    add("--distributed-timeout-minutes", type=int, default=10)
    add("--make-vocab-size-divisible-by", type=int, default=128)
    for flag in ("--lr", "--weight-decay", "--adam-beta1", "--adam-beta2", "--clip-grad", "--rotary-base"):
        add(flag, type=float, default=None)
    for flag in ("--fp16", "--bf16", "--no-load-optim", "--no-load-rng", "--finetune",
                 "--multi-latent-attention", "--async-save", "--use-dist-ckpt", "--untie-embeddings-and-output-weights"):
        add(flag, action="store_true")
    return parser


def _megatron() -> dict[str, types.ModuleType]:
    def parse_args(extra_args_provider: Callable[[Any], Any] | None = None, ignore_unknown_args: bool = False) -> Any:
        parser = _megatron_parser()
        if extra_args_provider is not None:
            parser = extra_args_provider(parser) or parser
        if ignore_unknown_args:
            args, _ = parser.parse_known_args()
        else:
            args = parser.parse_args()
        if args.seed is None:
            args.seed = 1234
        return args

    def validate_args(args: Any, defaults: dict[str, Any] | None = None) -> Any:
        return args

    def vocab_size_with_padding(orig_vocab_size: int, args: Any, logging_enabled: bool = True) -> int:
        multiple = args.make_vocab_size_divisible_by * args.tensor_model_parallel_size
        return -(-orig_vocab_size // multiple) * multiple

    arguments = _module("megatron.training.arguments", parse_args=parse_args, validate_args=validate_args)
    tokenizer = _module("megatron.training.tokenizer.tokenizer", _vocab_size_with_padding=vocab_size_with_padding)
    tokenizer_pkg = _module("megatron.training.tokenizer", tokenizer=tokenizer, __path__=[])
    training = _module("megatron.training", arguments=arguments, tokenizer=tokenizer_pkg, __path__=[])
    megatron = _module("megatron", training=training, __path__=[])
    return {"megatron": megatron, "megatron.training": training, "megatron.training.arguments": arguments,
            "megatron.training.tokenizer": tokenizer_pkg, "megatron.training.tokenizer.tokenizer": tokenizer}


def _training_actor() -> dict[str, types.ModuleType]:
    # Only the leaf module: slime imports it by its full name, so its package's __init__ (torch
    # kernels, Megatron) is never run.
    from shopsimrl.slime.harness.double.training_actor import TrainingActor

    return {"slime.backends.megatron_utils.actor": _module("slime.backends.megatron_utils.actor",
                                                          MegatronTrainRayActor=TrainingActor)}


def _settle_transformers() -> None:
    """Let transformers find out, before the stand-ins exist, that there is no real torch (it caches the answer);
    it then serves tokenizers and configs, as slime's rollout side uses it, and never imports the stand-in torch."""
    try:
        # transformers is optional and slow to load: only in the child, before the stand-ins exist
        from transformers.utils import import_utils
    except ImportError:
        return
    import_utils.is_torch_available()


def _torch_memory_saver(scratch: Path) -> dict[str, types.ModuleType]:
    """torch_memory_saver (GPU memory release for colocated training): slime only looks for its preload library
    next to the package, to put it in the training actor's LD_PRELOAD, which the stand-in Ray never applies."""
    package = scratch / "torch_memory_saver"
    package.mkdir(parents=True, exist_ok=True)
    (scratch / "torch_memory_saver_hook_mode_preload.abi3.so").touch()
    module = _module("torch_memory_saver", torch_memory_saver=None)
    module.__file__ = str(package / "__init__.py")
    return {"torch_memory_saver": module}


def install(slime_src: str | Path, scratch: str | Path) -> None:
    """Put slime's checkout first on ``sys.path`` and the stand-ins into ``sys.modules`` (files they need go to ``scratch``)."""
    src = str(Path(slime_src).resolve())
    if not (Path(src) / "slime" / "__init__.py").is_file():
        raise FileNotFoundError(f"{src}: not a slime checkout (no slime/__init__.py)")
    if src not in sys.path:
        sys.path.insert(0, src)
    _settle_transformers()
    for build in (_torch, _ray, _sglang, _megatron, _training_actor):
        sys.modules.update(build())
    sys.modules.update(_torch_memory_saver(Path(scratch)))
    _register_cpu_accelerator()


def _register_cpu_accelerator() -> None:
    """The device slime computes SGLang's GPU ids with, registered through slime's own backend registry."""
    # slime's own code: importable only once install() has put the checkout on sys.path
    from slime.utils import accelerator
    from slime.utils.accelerator.base import Accelerator

    def noop(self: Any, *args: Any, **kwargs: Any) -> Any:
        return None

    methods: dict[str, Any] = {name: noop for name in getattr(Accelerator, "__abstractmethods__", ())}
    methods.update(name="harness-cpu", is_available=lambda self: True, visible_devices_env="CUDA_VISIBLE_DEVICES")
    backend = type("HarnessCPUAccelerator", (Accelerator,), methods)
    accelerator.register_accelerator("harness-cpu", backend, is_available=lambda: True, priority=1000)


def describe() -> str:
    return json.dumps(sorted(name for build in (_ray, _sglang, _megatron) for name in build()))
