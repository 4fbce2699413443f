"""Every command goes through ``shopsimrl`` one way: argparse, its handler, a refusal as one line and exit 2,
and anything else as the bug it is (a traceback, exit 1)."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from shopsimrl.argtypes import OneLineParser
from shopsimrl.cli import COMMANDS, build_parser, main
from shopsimrl.commands.dispatch import handled_by, run
from shopsimrl.errors import Refusal


def test_launch_print_defaults_through_the_dispatcher(capsys):
    assert main(["launch", "--print-defaults"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines and all(line.startswith("export ") for line in lines)


def test_calibrate_without_its_files_is_one_line_naming_them(capsys):
    assert main(["calibrate"]) == 2
    assert capsys.readouterr().err == ("shopsimrl calibrate: error: the following arguments are required: "
                                       "RELEASE_STEPS_CSV, OUT_JSON (see shopsimrl calibrate --help)\n")


def test_measure_has_its_own_usage(capsys):
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["measure", "--help"])
    assert exited.value.code == 0
    assert "usage: shopsimrl measure" in capsys.readouterr().out
    assert main(["measure", "--help"]) == 0


def test_help_lists_every_command():
    text = build_parser().format_help()
    for name in ("rollout", "env", "replay", "data", "train", "slime", "simulate", "compare", "measure", "calibrate",
                 "launch", "view"):
        assert name in text
    assert len(COMMANDS) == 12


def _parser(handler) -> argparse.ArgumentParser:
    parser = OneLineParser(prog="shopsimrl")
    handled_by(parser.add_subparsers(dest="command").add_parser("probe"), handler)
    return parser


def test_a_refusal_is_one_line_and_exit_2(capsys):
    def refuses(_args: argparse.Namespace) -> int:
        raise Refusal("--x 3 does not fit --y 4: lower --x")

    assert run(_parser(refuses), ["probe"]) == 2
    assert capsys.readouterr().err == "shopsimrl probe: refused: --x 3 does not fit --y 4: lower --x\n"


def test_a_value_error_is_a_bug_not_a_refusal():
    def breaks(_args: argparse.Namespace) -> int:
        raise ValueError("an internal invariant broke")

    with pytest.raises(ValueError, match="internal invariant"):
        run(_parser(breaks), ["probe"])


def test_a_bug_in_a_real_process_prints_its_traceback_and_exits_1():
    code = ("import sys\n"
            "from shopsimrl.argtypes import OneLineParser\n"
            "from shopsimrl.commands.dispatch import handled_by, run\n"
            "p = OneLineParser(prog='shopsimrl')\n"
            "handled_by(p.add_subparsers(dest='command').add_parser('probe'), lambda a: 1 / 0)\n"
            "sys.exit(run(p, ['probe']))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "Traceback" in done.stderr and "ZeroDivisionError" in done.stderr
    assert "refused" not in done.stderr


def test_ctrl_c_outside_a_command_is_one_line_and_exit_130(capsys):
    def interrupted(_args: argparse.Namespace) -> int:
        raise KeyboardInterrupt

    assert run(_parser(interrupted), ["probe"]) == 130
    assert capsys.readouterr().err == "shopsimrl probe: interrupted\n"


def test_a_family_without_its_sub_command_prints_help_and_exits_2(capsys):
    assert main(["env"]) == 2
    assert "SUBCOMMAND" in capsys.readouterr().out
    assert main([]) == 2
