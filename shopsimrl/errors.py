"""The one base of the project's refusals: input the user can change, refused with one line.

A :class:`Refusal` says what was given and what to change (a bad option, a file that is not
what the command reads, a run folder in use, a knob combination slime would not accept).
The command line prints it as one line and exits 2 (``shopsimrl.commands.dispatch``).
Anything else raised out of a command is a bug: Python's traceback and exit 1, never
"refused".  Each refusal class keeps its older base too (``ValueError``, ``OSError``...),
so code that caught it by that base still does.  Standard library only: the pure
``sampling`` core may import it.
"""

from __future__ import annotations


class Refusal(Exception):
    """Input refused before or while a command works: the message is one line naming what to change."""


class UsageError(Refusal, ValueError):
    """Options that do not fit together (one value alone is checked while parsing, ``argtypes``)."""
