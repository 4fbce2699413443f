"""Every command goes through ``shopsimrl``: the commands whose module parses its own options included."""

from __future__ import annotations

from shopsimrl.cli import build_parser, main


def test_launch_print_defaults_through_the_dispatcher(capsys):
    assert main(["launch", "--print-defaults"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines and all(line.startswith("export ") for line in lines)


def test_calibrate_and_measure_are_dispatched_with_their_own_usage(capsys):
    assert main(["calibrate"]) == 2
    assert "usage: shopsimrl calibrate RELEASE_STEPS_CSV OUT_JSON" in capsys.readouterr().err
    try:
        main(["measure", "--help"])
    except SystemExit as exc:
        assert exc.code == 0
    assert "usage: shopsimrl measure" in capsys.readouterr().out


def test_help_lists_every_command():
    text = build_parser().format_help()
    for name in ("rollout", "replay", "simulate", "measure", "calibrate", "launch"):
        assert name in text
