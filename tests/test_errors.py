"""One exception root: every exception class of the package derives from ``ShopSimError`` through a branch a user
catches, and the command line maps exactly the documented branch (a refusal) to exit 2.

The classes are found by importing every module of the package (``pkgutil``), so a new exception class outside the
root fails here; a class defined inside a function is found on the syntax tree, where it may not be an exception.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import shopsimrl
from shopsimrl.commands.dispatch import handled_by, run
from shopsimrl.errors import (
    BRANCHES,
    EXIT_REFUSED,
    InfraFailure,
    Interrupted,
    InvariantBroken,
    ModelMistake,
    Refusal,
    RunRefused,
    ShopSimError,
    UsageError,
)

PACKAGE = Path(shopsimrl.__file__).resolve().parent


def _package_exceptions() -> list[type[BaseException]]:
    found: list[type[BaseException]] = []
    for info in pkgutil.walk_packages(shopsimrl.__path__, "shopsimrl."):
        module = importlib.import_module(info.name)
        stack = [vars(module)]
        while stack:  # module-level classes and the classes defined inside them
            for value in stack.pop().values():
                if inspect.isclass(value) and value.__module__ == module.__name__:
                    if issubclass(value, BaseException) and value not in found:
                        found.append(value)
                    stack.append({k: v for k, v in vars(value).items() if inspect.isclass(v) and v is not value})
    return found


EXCEPTIONS = _package_exceptions()


def _name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def test_the_walk_finds_the_package_s_exceptions() -> None:
    """The finder itself: classes from several parts, the branches among them (about 70 today)."""
    names = {_name(cls) for cls in EXCEPTIONS}
    assert {"shopsimrl.errors.Refusal", "shopsimrl.env.types.EnvError", "shopsimrl.sampling.guard.TooManyTechnicalFailures",
            "shopsimrl.env.pages.InvalidAction", "shopsimrl.slime.policy.SGLangError"} <= names
    assert len(EXCEPTIONS) >= 60


def test_every_exception_of_the_package_derives_from_the_root() -> None:
    outside = [_name(cls) for cls in EXCEPTIONS if not issubclass(cls, ShopSimError)]
    assert not outside, f"exceptions outside shopsimrl.errors.ShopSimError: {outside}"


def test_every_exception_sits_under_a_branch() -> None:
    """The root and its branches are the only classes directly under ``ShopSimError``."""
    loose = [_name(cls) for cls in EXCEPTIONS if cls is not ShopSimError and not issubclass(cls, BRANCHES)]
    assert not loose, f"under the root but in no branch of shopsimrl.errors.BRANCHES: {loose}"
    assert {cls for cls in EXCEPTIONS if ShopSimError in cls.__bases__} == set(BRANCHES)


def test_no_exception_class_is_defined_inside_a_function() -> None:
    """The import walk cannot see a class made inside a function: none may be an exception (by its bases' names)."""
    known = {cls.__name__ for cls in EXCEPTIONS} | {name for name, value in vars(builtins).items()
                                                     if inspect.isclass(value) and issubclass(value, BaseException)}
    nested = []
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for inner in ast.walk(node):
                    if isinstance(inner, ast.ClassDef) and {ast.unparse(b).rsplit(".", 1)[-1] for b in inner.bases} & known:
                        nested.append(f"{path.relative_to(PACKAGE)}:{inner.lineno} {inner.name}")
    assert not nested


@pytest.mark.parametrize(("cls", "builtin"), [
    ("shopsimrl.rollout.outputs.RunDirError", ValueError),
    ("shopsimrl.learn.resume.ResumeError", ValueError),
    ("shopsimrl.io.LockFileError", OSError),
    ("shopsimrl.rollout.journal.JournalError", ValueError),
    ("shopsimrl.rollout.journal.UnwritableRecord", OSError),
    ("shopsimrl.sampling.controller.ControllerStateError", RuntimeError),
    ("shopsimrl.sampling.guard.TooManyTechnicalFailures", RuntimeError),
    ("shopsimrl.sampling.supply.SupplyExhausted", RuntimeError),
    ("shopsimrl.sampling.conformance.SourceContractError", AssertionError),
    ("shopsimrl.agent.constrained.UnknownActionFormat", ValueError),
])
def test_older_builtin_bases_are_kept(cls: str, builtin: type[BaseException]) -> None:
    """Code that catches by the builtin base (``except ValueError``, ``except OSError``) still catches these."""
    by_name = {_name(c): c for c in EXCEPTIONS}
    assert issubclass(by_name[cls], builtin)


@pytest.mark.parametrize(("cls", "branch"), [
    ("shopsimrl.rollout.outputs.RunDirError", RunRefused),
    ("shopsimrl.learn.resume.ResumeError", RunRefused),
    ("shopsimrl.sampling.knobs.KnobError", Refusal),
    ("shopsimrl.env.types.EnvError", InfraFailure),
    ("shopsimrl.agent.chat_client.ModelServerError", InfraFailure),
    ("shopsimrl.sampling.guard.TooManyTechnicalFailures", InfraFailure),
    ("shopsimrl.sampling.controller.ControllerStateError", InvariantBroken),
    ("shopsimrl.slime.abort.EpisodeAborted", Interrupted),
    ("shopsimrl.env.pages.InvalidAction", ModelMistake),
])
def test_the_branch_of_a_few_well_known_classes(cls: str, branch: type[ShopSimError]) -> None:
    by_name = {_name(c): c for c in EXCEPTIONS}
    assert issubclass(by_name[cls], branch)


def test_a_model_s_mistake_is_never_an_infrastructure_failure() -> None:
    """The model's mistakes are scored; only a failure of the world around it makes a group unscorable."""
    assert not [_name(c) for c in EXCEPTIONS if issubclass(c, ModelMistake) and issubclass(c, InfraFailure)]


def _instance(cls: type[BaseException]) -> BaseException:
    """One instance of ``cls`` whatever its constructor takes (the message is what the dispatcher prints)."""
    try:
        return cls("why")
    except (TypeError, ValueError):  # a constructor of other arguments (a status code, a signal number...)
        made = cls.__new__(cls)
        BaseException.__init__(made, "why")
        return made


def _parser(exc: BaseException) -> argparse.ArgumentParser:
    def handler(_args: argparse.Namespace) -> int:
        raise exc

    parser = argparse.ArgumentParser(prog="shopsimrl demo")
    handled_by(parser, handler)
    return parser


@pytest.mark.parametrize("cls", EXCEPTIONS, ids=_name)
def test_the_cli_maps_a_refusal_to_exit_2_and_lets_every_other_branch_through(cls: type[BaseException], capsys) -> None:
    """``Refusal`` (so ``UsageError`` and ``RunRefused`` too) is one line and exit 2; any other class of the package
    propagates out of the dispatcher (Python prints the traceback, exit 1)."""
    exc = _instance(cls)
    if issubclass(cls, Refusal):
        assert run(_parser(exc), []) == EXIT_REFUSED == 2
        assert capsys.readouterr().err == f"shopsimrl demo: refused: {exc}\n"
    else:
        with pytest.raises(cls) as raised:
            run(_parser(exc), [])
        assert raised.value is exc


def test_usage_error_is_a_refusal_and_a_value_error() -> None:
    assert issubclass(UsageError, Refusal) and issubclass(UsageError, ValueError)
    assert issubclass(RunRefused, Refusal) and not issubclass(RunRefused, ValueError)
