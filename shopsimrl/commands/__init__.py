"""The ``shopsimrl`` command line: one module per sub-command, above every other part of the package.

Each module here defines ``register(subparsers)`` (its options, and the function that runs it as
the parser's ``handler``); ``shopsimrl/cli.py`` holds the one registry and dispatches through
:func:`shopsimrl.commands.dispatch.run`.  Nothing below this folder imports it.  A module imports
what its options need at the top (``argtypes``, defaults) and what its work needs inside the
function that does the work, so ``shopsimrl --help`` stays fast and light of rich, numpy and sqlite.
"""
