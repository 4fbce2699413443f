"""``shopsimrl slime check``: does this release fit a slime checkout (slime's real code on a CPU)?

The check's options and its run live with the harness (``slime/check.py``); this module only
names the command family.
"""

from __future__ import annotations

from typing import Any

from shopsimrl.slime import check


def register(subparsers: Any) -> None:
    slime = subparsers.add_parser("slime", help="slime itself: check that this release fits a slime checkout")
    slime_commands = slime.add_subparsers(dest="slime_command", metavar="SUBCOMMAND", required=True)
    check.register(slime_commands)
