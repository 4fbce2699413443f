"""A minimal, faithful double of slime's rollout state, for driving the generate hook as slime does, without slime.

slime is not on PyPI and pulls in torch, Megatron and SGLang, so the in-process tests
(``tests/slime_hooks``) and ``benchmarks/bench_slime_abort.py`` use this restatement of the
few semantics the hook depends on, each read from slime's source (THUDM/slime); the
``surface`` check of ``shopsimrl slime check`` holds its names and signatures against the
user's slime:

- ``slime/utils/types.py``: ``Sample`` (the fields the hooks touch) and ``Sample.Status``.
- ``slime/utils/misc.py``: ``SingletonMeta`` -- one instance per class per process.
- ``slime/rollout/sglang_rollout.py``:
  - ``GenerateState(args)``: singleton; ``reset()`` sets ``remaining_batch_size = 0``,
    ``pendings = set()``, ``aborted = False``; ``submit_generate_tasks(groups)`` adds one task
    per group to ``pendings``;
  - ``generate_and_rm``: a COMPLETED/TRUNCATED sample returns as is; otherwise, under
    ``state.semaphore``, an ``aborted`` state marks the sample ABORTED and returns, else the
    custom generate function is called (with ``evaluation=`` when its signature has it); an
    ABORTED result is returned without reward; a sample whose reward is still None would get
    the reward model (the ShopSim hook always sets it, so the double refuses instead);
  - ``generate_and_rm_group``: returns the group untouched once aborted, else gathers one
    ``generate_and_rm`` task per sample;
  - ``abort(args, rollout_id)``: asserts not yet aborted, sets ``state.aborted = True``, GETs the
    router's ``/workers``, then for each worker POSTs ``/abort_request {"abort_all": true}`` and
    GETs ``/v1/loads?include=core`` until it reports no request (slime retries every 3 s), then
    waits for every pending group task -- it cancels nothing.

:func:`install` registers the double as ``slime.rollout.sglang_rollout`` in ``sys.modules``
(where ``shopsimrl.slime.abort`` looks for slime's ``GenerateState``), with the rest of slime's
package the hooks import (:mod:`.slime_modules`).
"""

from __future__ import annotations

import asyncio
import enum
import importlib
import inspect
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx

#: slime's abort waits on its HTTP calls without limit (``httpx.Timeout(None)``); a test must not.
HTTP_TIMEOUT_SECONDS = 30.0


@dataclass
class Sample:
    """slime's ``Sample``: the fields the ShopSim hooks read or write, with slime's defaults."""

    class Status(enum.Enum):
        PENDING = "pending"
        COMPLETED = "completed"
        TRUNCATED = "truncated"
        ABORTED = "aborted"
        FAILED = "failed"

    group_index: int | None = None
    index: int | None = None
    rollout_id: Any = None
    prompt: Any = ""
    tokens: list[int] = field(default_factory=list)
    response: str = ""
    response_length: int = 0
    label: str | None = None
    reward: Any = None
    loss_mask: list[int] | None = None
    rollout_log_probs: list[float] | None = None
    remove_sample: bool = False
    status: Status = Status.PENDING
    metadata: dict = field(default_factory=dict)
    session_id: str | None = None

    def get_reward_value(self, args: Any) -> Any:  # slime's accessor, same semantics
        return self.reward if not args.reward_key else self.reward[args.reward_key]


class SingletonMeta(type):
    _instances: dict[type, Any] = {}

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if cls not in cls._instances:
            cls._instances[cls] = super().__call__(*args, **kwargs)
        return cls._instances[cls]

    def clear_instances(cls) -> None:
        cls._instances.clear()


class GenerateState(metaclass=SingletonMeta):
    def __init__(self, args: Any) -> None:
        self.args = args
        self.semaphore = asyncio.Semaphore(args.sglang_server_concurrency)
        self.sampling_params = dict(args.sampling_params)
        self.reset()

    def reset(self) -> None:
        self.remaining_batch_size = 0
        self.pendings: set[asyncio.Task[Any]] = set()
        self.aborted = False

    def submit_generate_tasks(self, groups: list[list[Sample]]) -> None:
        for group in groups:
            task = asyncio.create_task(generate_and_rm_group(self.args, group, dict(self.sampling_params)))
            self.pendings.add(task)
        self.remaining_batch_size += len(groups)


async def generate_and_rm(args: Any, sample: Sample, sampling_params: dict[str, Any], evaluation: bool = False) -> Sample:
    if sample.status in (Sample.Status.COMPLETED, Sample.Status.TRUNCATED):
        return sample
    state = GenerateState(args)
    async with state.semaphore:
        if state.aborted:
            sample.status = Sample.Status.ABORTED
            return sample
        module, _, name = args.custom_generate_function_path.rpartition(".")
        custom = getattr(importlib.import_module(module), name)
        if "evaluation" in inspect.signature(custom).parameters:
            sample = await custom(args, sample, sampling_params, evaluation=evaluation)
        else:
            sample = await custom(args, sample, sampling_params)
    if sample.status == Sample.Status.ABORTED:
        return sample
    if sample.reward is None:
        raise AssertionError("slime would call its reward model here: the ShopSim hook must set the reward")
    return sample


async def generate_and_rm_group(args: Any, group: list[Sample], sampling_params: dict[str, Any],
                                evaluation: bool = False) -> list[Sample]:
    state = GenerateState(args)
    if state.aborted:
        return group
    tasks = [asyncio.create_task(generate_and_rm(args, s, dict(sampling_params), evaluation=evaluation)) for s in group]
    return list(await asyncio.gather(*tasks))


async def abort(args: Any, rollout_id: int, retry_seconds: float = 3.0) -> list[list[Sample]]:
    state = GenerateState(args)
    assert not state.aborted
    state.aborted = True
    async with httpx.AsyncClient(timeout=HTTP_TIMEOUT_SECONDS) as http:
        router = f"http://{args.sglang_router_ip}:{args.sglang_router_port}"
        workers = (await http.get(f"{router}/workers")).json()["workers"]
        for worker in workers:
            while True:
                await http.post(f"{worker['url']}/abort_request", json={"abort_all": True})
                load = (await http.get(f"{worker['url']}/v1/loads", params={"include": "core"})).json()
                if load.get("num_reqs", 0) <= 0:
                    break
                await asyncio.sleep(retry_seconds)
    while state.pendings:
        _, state.pendings = await asyncio.wait(state.pendings, return_when=asyncio.FIRST_COMPLETED)
    return []


def slime_args(**overrides: Any) -> types.SimpleNamespace:
    """The slime args the double and the hook read (slime's flag names), the hook as custom generate."""
    base: dict[str, Any] = dict(
        sglang_server_concurrency=512, custom_generate_function_path="shopsimrl.slime_runtime.generate",
        partial_rollout=False,
        group_rm=False, reward_key="reward", rollout_seed=0, rollout_max_context_len=None,
        apply_chat_template_kwargs={}, shopsim_max_consecutive_failed_groups=8, shopsim_env_url="http://unused",
    )
    base.update(overrides)
    return types.SimpleNamespace(**base)


@contextmanager
def installed() -> Iterator[types.ModuleType]:
    """:func:`install` for a block: slime's package (whatever ``sys.modules`` held under ``slime``) as it was after."""
    def ours() -> list[str]:
        return [name for name in sys.modules if name == "slime" or name.startswith("slime.")]

    saved = {name: sys.modules[name] for name in ours()}
    try:
        yield install()
    finally:
        for name in ours():
            del sys.modules[name]
        sys.modules.update(saved)


def install(monkeypatch: Any = None) -> types.ModuleType:
    """Register the double as slime's package in ``sys.modules`` (this module as ``slime.rollout.sglang_rollout``,
    with a fresh singleton; the rest: :mod:`.slime_modules`); returns the ``sglang_rollout`` module.  With
    ``monkeypatch`` (pytest's), every entry is undone after the test."""
    # the rest of slime's package: only when installed
    from shopsimrl.slime.harness.double.slime_modules import generate_rollout, modules

    SingletonMeta.clear_instances(GenerateState)
    module = types.ModuleType("slime.rollout.sglang_rollout")
    for name in ("GenerateState", "Sample", "generate_and_rm", "generate_and_rm_group", "abort"):
        setattr(module, name, globals()[name])
    module.generate_rollout = generate_rollout
    for name, value in modules(module, Sample).items():
        if monkeypatch is not None:
            monkeypatch.setitem(sys.modules, name, value)
        else:
            sys.modules[name] = value
    return module
