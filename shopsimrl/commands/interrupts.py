"""SIGINT / SIGTERM during ``shopsimrl rollout``: a cancellation of the run, never an abrupt exit.

The step aborts and every env lease is released; the command then exits ``128 + signal``.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path
from typing import Any

CLEANUP_SECONDS = 8.0  # after a signal: how long env releases may keep retrying (the exit follows within 10 s)


class Interrupts:
    """SIGINT / SIGTERM become a cancellation of the run: the step aborts and every env lease is released.

    The first signal cancels the run and gives env releases ``CLEANUP_SECONDS`` to finish; a second one
    during that cleanup does not cut it short, it only shortens the releases' remaining time to 2 s.
    ``env`` (the opened env, with its ``servers``) and ``step_events`` are set by the run as it gets there.
    """

    def __init__(self, task: asyncio.Task[Any]) -> None:
        self.task = task
        self.signal: signal.Signals | None = None
        self.env: Any = None  # the OpenedEnv, once open
        self.step_events: Path | None = None  # the interrupted step's events.jsonl, for the message
        self._loop = asyncio.get_running_loop()

    def __enter__(self) -> Interrupts:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._loop.add_signal_handler(sig, self._fire, sig)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._loop.remove_signal_handler(sig)
            if self.signal is not None:  # already on the way out with 128 + signal: a late second one changes nothing
                signal.signal(sig, signal.SIG_IGN)

    def _fire(self, sig: signal.Signals) -> None:
        servers = self.env.servers if self.env is not None else None
        if self.signal is None:
            self.signal = sig
            if servers is not None:
                servers.hurry(CLEANUP_SECONDS)
            # one line at the end sums up the releases that failed (each trace keeps its release_error)
            logging.getLogger("shopsimrl.agent").setLevel(logging.ERROR)
            self.task.cancel(sig.name)
        elif servers is not None:
            servers.hurry(2.0)
