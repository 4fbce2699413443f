"""``--resume``: continue a run from its last complete step, as if it had never stopped, or refuse in one line.

A step is complete when its completion marker ``step-<k>/complete.json`` exists (written last,
see :mod:`shopsimrl.rollout.journal`).  Before anything is changed, every complete step is checked
against its marker (its number, the run's id and options, the chain of markers, every file's
SHA-256), the step folders must be ``step-1`` .. ``step-k`` plus at most the one incomplete step
that follows (a gap, a duplicate, a stray or symlinked step folder is refused, never re-run), and
the options now must be those ``run.json`` records (all that shape results; ``--steps`` may grow,
the env's address may change).  Then what the next step needs is read from step k: the prompt
source's state and the technical-failure streak (``state.json``), the learner's parameters and
Adam's state (``policy.npz``, refused unless whole and finite).  Only then is what the incomplete
step left removed (its folder, its ``metrics.jsonl`` and ``failure_queue.jsonl`` lines), the
``metrics.jsonl`` rows of steps 1..k rebuilt from their verified ``metrics.json`` when they
differ (a crash cannot lose one, an edit can), and ``run.json`` continued: its options are kept
as they were, ``steps`` is the new target and ``resumed`` lists each resume.

Not restored (so refused): the heuristic learner's per-task counts (``--learner heuristic`` cannot
resume).  Fault injection needs nothing: each episode draws its failures from its own id.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shopsimrl.errors import RunRefused
from shopsimrl.io import atomic_write_json, atomic_write_jsonl
from shopsimrl.rollout.journal import (
    MARKER,
    OUTSIDE_DIGEST,
    JournalError,
    ResumePoint,
    RunJournal,
    check_marker,
    options_digest,
    read_bytes,
    read_json_object,
)
from shopsimrl.rollout.outputs import RunPaths
from shopsimrl.sampling.guard import ConsecutiveFailureGuard
from shopsimrl.sampling.source import selector_from_state

#: run.json fields not compared with the options of the resuming command: kept as they are (``steps`` apart),
#: because they are the run's identity or derived from the catalog (``clusters``), a name (``name``: a run folder
#: moved or renamed still resumes) or an address (``env``: a restarted env server may listen elsewhere; the
#: catalog it serves is ``products`` / ``catalog_seed``).
NOT_COMPARED = (*OUTSIDE_DIGEST, "clusters", "name", "env")


class ResumeError(RunRefused, ValueError):
    """The run cannot be continued as asked; the message says why (one line)."""


@dataclass(frozen=True)
class _Scan:
    """The step folders of a run: the last complete step, and the incomplete one after it (if any)."""

    last: int
    incomplete: Path | None


def step_number(name: str) -> int | None:
    """``k`` for a folder named ``step-<k>`` (k >= 1, no leading zero); ``None`` for any other name."""
    digits = name[5:]
    if not name.startswith("step-") or not digits.isdigit() or digits != str(int(digits)) or int(digits) < 1:
        return None
    return int(digits)


def read_run_record(root: Path) -> dict[str, Any]:
    """``run.json``, refused unless it is a run's record this version can continue."""
    path = root / "run.json"
    if not path.exists() and not path.is_symlink():
        if any(p.name.startswith("step-") for p in root.iterdir()):
            raise ResumeError(f"{root} holds step folders but no run.json, so what they ran with is unknown: pass "
                              f"--overwrite instead of --resume to start the run afresh (or choose another --name)")
        raise ResumeError(f"{root} holds no run to resume (no run.json): drop --resume to start it")
    try:
        record = read_json_object(path)
    except JournalError as exc:
        raise ResumeError(f"{exc}: the run cannot be resumed (--overwrite starts it afresh)") from None
    if not isinstance(record.get("run_id"), str):
        raise ResumeError(f"{path} has no run_id: the run was written by an older shopsimrl without step markers, "
                          f"and cannot be resumed (--overwrite starts it afresh)")
    return record


def check_same_run(recorded: Mapping[str, Any], current: Mapping[str, Any]) -> None:
    """Refused unless every option that shapes results is what ``run.json`` records."""
    now = json.loads(json.dumps(current))  # enums and tuples as run.json holds them
    then_clock, now_clock = recorded.get("clock") or "machine", now.get("clock") or "machine"
    if then_clock != now_clock:
        raise ResumeError(f"--resume: the run ran on the {then_clock} clock, not the {now_clock} one: continue it with "
                          f"--clock {then_clock} (one run has one clock)")
    keys = sorted((set(recorded) | set(now)) - set(NOT_COMPARED))
    differ = [k for k in keys if recorded.get(k) != now.get(k)]
    if differ:
        shown = ", ".join(f"{k}: {recorded.get(k)!r} then, {now.get(k)!r} now" for k in differ)
        raise ResumeError(f"--resume continues a run with its own settings; these differ ({shown})")


def scan_steps(root: Path) -> _Scan:
    """The step folders, refused unless they are ``step-1`` .. ``step-k`` (complete), then at most one incomplete."""
    found: dict[int, Path] = {}
    for entry in sorted(root.iterdir()):
        if not entry.name.startswith("step-"):
            continue
        k = step_number(entry.name)
        if k is None:
            raise ResumeError(f"{entry} is not a step folder this run writes (they are step-1, step-2, ...): move it "
                              f"away to resume")
        if entry.is_symlink() or not entry.is_dir():
            raise ResumeError(f"{entry} is {'a symbolic link' if entry.is_symlink() else 'not a folder'}: a step "
                              f"folder must be the run's own; the run cannot be resumed")
        found[k] = entry
    last = 0
    while last + 1 in found and (found[last + 1] / MARKER).exists():
        last += 1
    beyond = sorted(k for k in found if k > last + 1)
    if beyond:
        missing = "missing" if last + 1 not in found else "incomplete"
        raise ResumeError(f"step {last + 1} is {missing} but step-{beyond[0]} exists: the run has a gap; resuming "
                          f"would run steps {last + 1}..{beyond[-1]} again, so it is refused")
    return _Scan(last, found.get(last + 1))


def check_steps(root: Path, last: int, record: Mapping[str, Any]) -> RunJournal:
    """Every complete step checked against its marker, in order; the journal continues the chain."""
    journal = RunJournal(str(record["run_id"]), options_digest(record))
    for k in range(1, last + 1):
        try:
            _, journal.previous = check_marker(root / f"step-{k}", k, run_id=journal.run_id,
                                               options=journal.options, previous=journal.previous)
        except JournalError as exc:
            raise ResumeError(f"{exc}; the run cannot be resumed") from None
    return journal


def load_run_state(root: Path, last: int, task_ids: Sequence[str], selection: str) -> tuple[Any, dict[str, Any]]:
    """(The selector, the failure streak) as they stood after step ``last``, from its ``state.json``."""
    path = root / f"step-{last}" / "state.json"
    try:
        state = read_json_object(path)
        saved, guard = state.get("prompt_source"), state.get("guard")
        if not isinstance(saved, dict) or not isinstance(guard, dict):
            raise ValueError("it lacks the selector's or the failure streak's state")
        ConsecutiveFailureGuard().load_state_dict(guard)  # checked here, loaded by the run
        if str(saved.get("strategy")) != str(selection):
            raise ValueError(f"its selector is {saved.get('strategy')!r}, the run's selection {selection!r}")
        evidence = saved.get("evidence")
        saved_ids = evidence.get("prompt_ids") if isinstance(evidence, dict) else None
        if not isinstance(saved_ids, list) or [str(t) for t in saved_ids] != [str(t) for t in task_ids]:
            raise ValueError("its selector holds other train tasks than the env lists now (another catalog?)")
        source = selector_from_state(saved)
    except (JournalError, ValueError, KeyError, TypeError, IndexError) as exc:
        raise ResumeError(f"{path}: {exc}; the run cannot be resumed" if not isinstance(exc, JournalError)
                          else f"{exc}; the run cannot be resumed") from None
    return source, guard


def rebuilt_metrics(root: Path, last: int) -> list[dict[str, Any]]:
    """``metrics.jsonl``'s rows of steps 1..last, from each step's (verified) ``metrics.json``."""
    return [{"step": k, **read_json_object(root / f"step-{k}" / "metrics.json")} for k in range(1, last + 1)]


def _lines(path: Path) -> list[str]:
    """The complete lines of a JSONL file (a torn last line, without its newline, is left out)."""
    if not path.exists() and not path.is_symlink():
        return []
    try:
        text = read_bytes(path).decode("utf-8")
    except UnicodeDecodeError:
        raise ResumeError(f"{path} is not UTF-8 text; the run cannot be resumed") from None
    except JournalError as exc:
        raise ResumeError(f"{exc}; the run cannot be resumed") from None
    lines = text.split("\n")
    return [line for line in lines[:-1] if line.strip()]  # the last piece has no newline: torn or empty


def kept_failure_rows(path: Path, last: int) -> list[dict[str, Any]]:
    """``failure_queue.jsonl``'s rows of steps 1..last; a row that is not a record of a step is refused."""
    kept = []
    for n, line in enumerate(_lines(path), start=1):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            raise ResumeError(f"{path} line {n} is not JSON; the run cannot be resumed") from None
        step = row.get("step") if isinstance(row, dict) else None
        if type(step) is not int or step < 1:
            raise ResumeError(f"{path} line {n} has no step number (step: {step!r}); the run cannot be resumed")
        if step <= last:
            kept.append(row)
    return kept


def continue_run(paths: RunPaths, record: Mapping[str, Any], scan: _Scan, steps: int, env: Any) -> None:
    """The changes, once everything is checked: the incomplete step removed, the logs trimmed, run.json continued."""
    root, last = paths.root, scan.last
    failures = kept_failure_rows(paths.failure_queue, last)
    metrics = rebuilt_metrics(root, last)
    if scan.incomplete is not None:
        shutil.rmtree(scan.incomplete)
    for log, rows in ((paths.metrics, metrics), (paths.failure_queue, failures)):
        now = _text(log)
        if now != "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows) and (rows or now is not None):
            atomic_write_jsonl(log, rows)
    earlier = record.get("resumed")
    resumed = [*(earlier if isinstance(earlier, list) else []), {"from_step": last + 1, "steps": steps,
                                                **({"env": env} if env != record.get("env") else {})}]
    atomic_write_json(paths.config, {**record, "steps": steps, "resumed": resumed})


def _text(path: Path) -> str | None:
    """A log's text as it is (``None``: absent or unreadable, so rewritten)."""
    try:
        return read_bytes(path).decode("utf-8")
    except (JournalError, UnicodeDecodeError):
        return None


def prepare(paths: RunPaths, current: Mapping[str, Any], task_ids: Sequence[str], *,
            restore_learner: Any = None) -> ResumePoint:
    """Check the run folder and continue it: where the run resumes, or :class:`ResumeError` (nothing changed).

    ``current``: the run record of the resuming command (``shopsimrl.rollout.run.run_record``);
    ``restore_learner(step_folder)``: loads the learner's state of the last complete step (raises
    ``ValueError`` when it cannot), called only when there is one.
    """
    root = paths.root
    record = read_run_record(root)
    check_same_run(record, current)
    scan = scan_steps(root)
    steps = int(current["steps"])
    if scan.last >= steps:
        raise ResumeError(f"the run already has {scan.last} complete steps: pass --steps above {scan.last} to "
                          f"continue it")
    journal = check_steps(root, scan.last, record)
    source, guard = None, None
    if scan.last:
        source, guard = load_run_state(root, scan.last, task_ids, str(record.get("selection")))
        if restore_learner is not None:
            try:
                restore_learner(root / f"step-{scan.last}")
            except ValueError as exc:
                raise ResumeError(f"{exc}; the run cannot be resumed") from None
    kept_failure_rows(paths.failure_queue, scan.last)  # refused before anything changes
    try:
        continue_run(paths, record, scan, steps, current.get("env"))
    except OSError as exc:  # e.g. a disk still full: the folder stays resumable
        raise ResumeError(f"the run folder could not be continued ({exc.strerror or exc}: {exc.filename or root}); "
                          f"free space (or fix the folder) and resume again") from None
    return ResumePoint(first_step=scan.last + 1, journal=journal, source=source, guard=guard)
