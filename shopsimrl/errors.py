"""The one root of the project's exceptions, and the branches a user catches.

Every exception class of ``shopsimrl`` derives from :class:`ShopSimError`, through one (rarely two) of
these branches (``tests/test_errors.py`` walks the package and fails on a class outside them)::

    ShopSimError                 anything shopsimrl raises on purpose
    ├── Refusal                  input the user can change: the command line prints one line, exits 2
    │   ├── UsageError           options that do not fit together (also a ValueError)
    │   └── RunRefused           a run folder or a --resume refused (in use, foreign, finished, damaged)
    ├── InfraFailure             the environment, the model server or the infrastructure failed: the group
    │                            is unscorable (never the model's mistake: those are scored, not raised)
    ├── InvariantBroken          a contract inside the package broken, or a file it wrote is not what it
    │                            wrote: a bug or damaged data, never the user's option
    ├── Interrupted              work cut short on purpose: a signal, a cancel, slime's abort, a supply
    │                            that ran out; the code that started the work handles it
    └── ModelMistake             a move the world does not accept: caught where it is raised and turned
                                 into feedback the model is scored on; never leaves the environment

Only a :class:`Refusal` has an exit code of its own: ``shopsimrl.commands.dispatch`` prints it as one line,
``shopsimrl <command>: refused: <message>``, and exits 2.  Anything else raised out of a command is a
bug or a failure to look at: Python's traceback and exit 1, never "refused" (a command that stops on an
:class:`InfraFailure` or an :class:`Interrupted` catches it and says so with its own code).  Each class
keeps its older builtin base too (``ValueError``, ``OSError``, ``RuntimeError``, ``AssertionError``), so
code that caught it by that base still does.  Standard library only, and no import of the package: the
pure ``sampling`` core may import it.
"""

from __future__ import annotations

#: The exit code of a refusal (``shopsimrl.commands.dispatch``); any other exception out of a command exits 1.
EXIT_REFUSED = 2


class ShopSimError(Exception):
    """The root: every exception the package raises on purpose derives from it (``except ShopSimError``)."""


class Refusal(ShopSimError):
    """Input refused before or while a command works: the message is one line naming what to change."""


class UsageError(Refusal, ValueError):
    """Options that do not fit together (one value alone is checked while parsing, ``argtypes``)."""


class RunRefused(Refusal):
    """A run folder or a ``--resume`` refused: in use, foreign, finished, or not what its run wrote."""


class InfraFailure(ShopSimError):
    """The environment, the model server or the infrastructure failed (not the model): the group is unscorable."""


class InvariantBroken(ShopSimError):
    """A contract inside the package was broken (a bug), or a file it wrote is not what it wrote."""


class Interrupted(ShopSimError):
    """Work cut short on purpose (a signal, a cancel, slime's abort, a supply that ran out); not a failure."""


class ModelMistake(ShopSimError):
    """A move the world does not accept: scored, not raised past the code that turns it into feedback."""


#: The branches a user catches, in the order the tree above lists them.
BRANCHES: tuple[type[ShopSimError], ...] = (Refusal, InfraFailure, InvariantBroken, Interrupted, ModelMistake)
