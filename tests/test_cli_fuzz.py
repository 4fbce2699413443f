"""Every sub-command over a table of bad values: one line on stderr and exit 2, never a traceback.

The commands and their options are read from the real parser (``build_parser``), so an option
added without a row here fails ``test_every_option_has_a_row``: give it its bad values, or say
in ``NO_BAD_VALUE`` why any string is fine.  Values refused while parsing are checked on the
parser alone (nothing can start); the few refused later, in the command (``Late``), run
``main`` with every way to start work replaced by a failure.  Wherever a command reads a file,
it gets files of every kind (``ODD_FILES``: empty, binary, non-ASCII text, a header alone, a
FIFO, a symlink loop, a dangling symlink, a folder, ``/dev/zero``), and sizes far beyond any run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from shopsimrl.cli import build_parser, main

pytestmark = pytest.mark.slow  # hundreds of command lines: with -n this file starts first

# Values every option of a type gets without a row (the row adds the ones that need a meaning).
BY_TYPE: dict[str, tuple[str, ...]] = {
    "int": ("x", "1.5", ""),
    "float": ("x", "nan", "inf", "-inf", ""),
    "folder": ("", "/dev/null", "/dev/null/sub", "/proc/self/new"),
    "cache_folder": ("", "/dev/null", "/dev/null/sub"),  # may be read-only: the catalog may be there already
    "out_file": ("", "/tmp", "/dev/null", "/proc/self/x.jsonl", "@fifo", "@folder", "@loop"),
    "in_file": ("", "/dev/zero", "/tmp", "/nonexistent/file", "@fifo", "@loop", "@dangling", "@folder"),
    "existing_folder": ("", "/nonexistent/run", "/etc/hostname", "@fifo", "@loop", "@empty"),
    "server_url": ("notaurl", "", "http://127.0.0.1:99999", "ftp://127.0.0.1:5700", "http://:5700"),
    "_env_option": ("notaurl", "", "http://127.0.0.1:99999", "http://127.0.0.1:0",
                    "http://127.0.0.1:5700,http://localhost:5700", "http://127.0.0.1:5700,http://127.0.0.1:5700/"),
}


@dataclass(frozen=True)
class Late:
    """A bad value the command refuses itself (it needs other options, the catalog or the token)."""

    value: str
    extra: tuple[str, ...] = ()


#: Files of every kind, made once per session (``odd_files``); a value "@name" in a row stands for its path.
ODD_FILES: dict[str, bytes | str] = {
    "empty": b"",
    "binary": bytes(range(256)) * 4,
    "unicode": "шаг,раунд,成功率\n1,0,✓\n",  # UTF-8 text, but not what any command reads
    "bool_duration": '[["varied", true]]',  # a supply whose duration is JSON true
    "header": "step,round,technical_drops,zero_std_drops,completed_groups,train_groups,zero_std_groups_in_batch,"
              "success_rate,all_wrong_group_rate,rollout_time_s,verdict,duration\n",  # a CSV header alone
    "fifo": "FIFO",  # a named pipe: opening it for reading would wait forever for a writer
    "loop": "LOOP",  # a symlink to itself
    "dangling": "DANGLING",  # a symlink to nothing
    "folder": "FOLDER",
}
RELEASE_CSV = str(Path(__file__).parent / "data" / "shopsimrl_release_steps.csv")
#: Sizes no run means (a typo): refused while parsing with the bound, never accepted and run for months.
HUGE = ("1000000000", "100000000000000000000000", "1e9", "1e23")
PRODUCTS = ("5", "9", "0", "-1", "2000000")
CATALOG = {"--products": PRODUCTS, "--seed": (), "--tasks": ("0", "-5"), "--cache-dir": (Late("/proc"),)}
#: A file the command reads whole; its content refused with one line naming the file.
CONTENT = (Late("@empty"), Late("@binary"), Late("@unicode"), Late("@header"))
SERVER = {"--port": ("0", "-1", "70000"), "--slots": ("0", "-3", "1000000000"), "--action-limit": ("0", "-1")}

#: command -> option (or positional) -> bad values beyond BY_TYPE
ROWS: dict[str, dict[str, tuple[str | Late, ...]]] = {
    "rollout": {
        "--rollout-batch-size": ("0", "-1"),
        "--n-samples-per-prompt": ("0",),
        "--over-sampling-batch-size": ("0", Late("8")),  # smaller than --rollout-batch-size
        "--global-batch-size": ("0", Late("60")),
        "--max-consecutive-failed-groups": ("0",),
        "--steps": ("0", "-1", *HUGE),
        "--seed": (),
        "--out": (),
        "--name": (Late("../x"), Late("a/b"), Late(".."), Late(""), Late("a" * 300)),
        "--env-timeout": ("0", "-1"),
        "--episode-concurrency": ("0", "1000000000"),
        "--max-turns": ("0",),
        "--max-steps": (Late("0"),),  # deprecated spelling: the refusal names --max-turns, after the warning
        "--fault-rate": ("-0.1", "1.5"),
        "--cushion": (),
        "--env": ("ftp://x",),
        "--env-token-file": (Late("/etc/hostname"),  # without --env URL
                             Late("@empty", ("--env", "http://127.0.0.1:9")), Late("@binary", ("--env", "http://127.0.0.1:9"))),
        "--policy": (Late("openai"),),  # without --openai-base-url: refused before any step, not after one
        "--products": PRODUCTS,
        "--catalog-seed": (),
        "--openai-base-url": (),
        "--openai-model": (Late("m"),),  # only with --policy openai
        "--openai-api-key-env": (Late("KEY"),),
        "--temperature": ("-1",),
        "--tis-cap": ("0", "-1", "nan"),
        "--decode-tokens-per-s": ("0", "-5", "inf"),
        "--engine-capacity": ("0", "-1"),
        "--reply-tokens": ("0", "nan"),
        "--max-tokens": ("0",),
        "--request-timeout": ("0",),
        "--top-p": ("-0.5", "1.5"),
        "--extra-body": (Late("notjson", ("--policy", "openai")), Late("[1]", ("--policy", "openai"))),
        "--system-prompt": tuple(Late(v.value, ("--policy", "openai", "--openai-base-url", "http://127.0.0.1:9"))
                                 for v in CONTENT[:2]),  # empty, binary
        "--max-context-tokens": ("0",),
        "--wandb-dir": (),
        "--stage-size": ("0", "-1", Late("9", ("--siblings", "staged")), Late("4")),  # > n; without staged
        "--eval-every": ("0", "-1", Late("5")),  # without --learner grpo
        "--eval-samples": ("0", "-1"),
        "--prompt-labels": ("", "/dev/zero", "/tmp", "/nonexistent/file", "@fifo", "@loop", "@folder", "@empty",
                            "@binary", "@unicode", Late(RELEASE_CSV, ("--selection", "forecast"))),
    },
    "env serve": {**CATALOG, **SERVER, "--lease-ttl": ("0", "-1"), "--keep-alive": ("0",), "--processes": ("0", "-2", *HUGE),
                  "--host": (Late("0.0.0.0"), Late("192.0.2.1")),  # beyond loopback without a token
                  "--token-file": (Late("@empty"), Late("@binary"))},
    "env build": dict(CATALOG),
    "env play": dict(CATALOG),
    "env ray-serve": {**CATALOG, **SERVER, "--port": ("-1", "70000"), "--per-node": ("0",), "--token-file": (),
                      "--urls-file": (), "--cache-dir": ()},  # each node builds its own catalog: checked there
    "replay": {"supply": (*CONTENT, Late("@bool_duration")), "--rollout-batch-size": ("0",), "--over-sampling-batch-size": ("0", Late("4")),
               "--max-consecutive-failed-groups": ("0",)},
    "data export": {"--out": (), "--env": (), "--env-token-file": (Late("/etc/hostname"),  # without --env
                                                                  Late("@empty", ("--env", "http://127.0.0.1:9"))),
                    "--products": PRODUCTS, "--seed": (), "--cache-dir": (Late("/proc"),),
                    "--zero-spread-from": (Late("/tmp"), Late("/etc"))},  # folders that are not runs
    "simulate": {"--steps": ("0", *HUGE), "--seeds": (), "--out": (), "--timeline-step": ("0", Late("90")),
                 "--prompts": ("0", "1", "31", *HUGE), "--eta-prompt": ("-1",), "--eta-global": ("-1",),
                 "--stage-size": ("0", Late("4")), "--capacity": ("-1", Late("0", ("--siblings", "staged"))),
                 "--stage-skip-q": ("-0.1", "1.5", Late("0.5")),  # without --siblings staged
                 "--clusters": ("-1", *HUGE), "--transfer": ("-0.1", "2", Late("0.3")),  # --transfer without --clusters
                 "--world": ("nope",), "--directions": ("-1", *HUGE, Late("1")),  # one kind has no direction
                 "--train-s": ("-1", "nan"), "--weight-sync-s": ("-1", "inf")},
    "slime check": {"--slime-src": ("", "/nonexistent/slime", "/etc/hostname"), "--workdir": (),
                    "--jobs": ("0", "99"), "--json": (), "--timeout": ("0", "-1"),
                    "--import-timeout": ("0", "-1")},
    "compare": {"runs": ("", "/nonexistent/run", "/etc/hostname"), "--chart": ()},
    "measure": {"--products": PRODUCTS, "--catalog-seed": (), "--cache-dir": (Late("/proc"),), "--seed": (),
                "--tasks": ("0", "-1", *HUGE), "--siblings": ("0", "-1", *HUGE),
                "--options": ("x", "[1]", "", "{", Late('{"bogus": 1}'), Late('{"temperature": -1}'),
                              Late('{"temperature": "x"}'))},
    "calibrate": {"release_csv": CONTENT, "out_json": ()},
    "view": {"folder": ("", "/nonexistent/runs", "/etc/hostname"), "--port": ("-1", "70000")},
}

#: options any string suits, and why
NO_BAD_VALUE: dict[str, dict[str, str]] = {
    "rollout": {"--wandb-project": "a W&B project name", "--wandb-group": "a W&B group name"},
    "env ray-serve": {"--address": "Ray resolves it (auto, local, host:port)",
                      "--host": "each node's own address by default; a bad one fails on that node"},
    "env play": {"--task": "a task id: play lists the split's tasks when it is unknown"},
    "train": {"extra": "handed to slime's train.py verbatim after --"},
    "view": {"--host": "any address: one beyond loopback is warned, one not this machine's refused when the port is "
                       "taken (tests/webview/test_view_command.py)"},
}

#: options that must come along for the command to parse (the second one of a mutually exclusive pair)
BASE: dict[str, tuple[str, ...]] = {"replay": ("--example", "spec4")}
#: commands with several positionals: each one's good value, in order (the case's value replaces its own)
POSITIONALS: dict[str, dict[str, str]] = {"calibrate": {"release_csv": RELEASE_CSV, "out_json": "@out"}}


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield " ".join(path), parser
        return
    for name, child in subs[0].choices.items():
        yield from _commands(child, (*path, name))


def _takes_values(action: argparse.Action) -> bool:
    return action.nargs != 0 and not isinstance(action, (argparse._HelpAction, argparse._VersionAction))


def _options() -> dict[str, dict[str, argparse.Action]]:
    return {command: {(a.option_strings[0] if a.option_strings else a.dest): a
                      for a in parser._actions if _takes_values(a)}
            for command, parser in _commands(build_parser())}


def _cases() -> Iterator[tuple[str, str, str | Late]]:
    for command, options in _options().items():
        for option, action in options.items():
            if option in NO_BAD_VALUE.get(command, {}):
                continue
            values: list[str | Late] = list(BY_TYPE.get(getattr(action.type, "__name__", ""), ()))
            if action.choices is not None:
                values.append("bogus-choice")
            values += ROWS.get(command, {}).get(option, ())
            for value in dict.fromkeys(values):
                yield command, option, value


CASES = list(_cases())


@pytest.fixture(scope="session")
def odd_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """``@name`` -> the path of a file of that kind (``@out``: a new file in a folder we can write in)."""
    root = tmp_path_factory.mktemp("odd-files")
    paths = {f"@{name}": str(root / name) for name in ODD_FILES}
    for name, content in ODD_FILES.items():
        path = root / name
        if content == "FIFO":
            os.mkfifo(path)
        elif content == "LOOP":
            path.symlink_to(path)
        elif content == "DANGLING":
            path.symlink_to(root / "nothing-here")
        elif content == "FOLDER":
            path.mkdir()
        else:
            path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return {**paths, "@out": str(root / "out" / "fit.json")}


def _argv(command: str, option: str, value: str, extra: tuple[str, ...] = (), files: dict[str, str] | None = None) -> list[str]:
    def real(text: str) -> str:
        return (files or {}).get(text, text)

    value = real(value)
    base = () if option in ("supply", "--example") else BASE.get(command, ())
    if command in POSITIONALS:
        given = [value if name == option else real(good) for name, good in POSITIONALS[command].items()]
        if option.startswith("-"):
            given += [f"{option}={value}"]
    else:
        given = [value] if not option.startswith("-") else [f"{option}={value}"] if value.startswith("-") else [option, value]
    return [*command.split(), *base, *(real(e) for e in extra), *given]


def test_every_option_has_a_row() -> None:
    missing = [f"shopsimrl {command} {option}" for command, options in _options().items() for option in options
               if option not in ROWS.get(command, {}) and option not in NO_BAD_VALUE.get(command, {})
               and options[option].choices is None]
    assert not missing, f"options without a row in ROWS (bad values) or NO_BAD_VALUE (why none): {missing}"
    stale = [f"{c} {o}" for table in (ROWS, NO_BAD_VALUE) for c, rows in table.items() for o in rows
             if o not in _options().get(c, {})]
    assert not stale, f"rows for options that no longer exist: {stale}"


def _one_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}:\n{err}"
    return lines[0]


@pytest.mark.parametrize(("command", "option", "value"), [c for c in CASES if not isinstance(c[2], Late)],
                         ids=lambda v: repr(v)[:40] if isinstance(v, str) else str(v))
def test_a_bad_value_is_one_line_and_exit_2_while_parsing(capsys, odd_files, command, option, value) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(_argv(command, option, value, files=odd_files))
    assert exited.value.code == 2
    line = _one_line(capsys.readouterr().err)
    assert line.startswith(f"shopsimrl {command}: error: argument {option if option.startswith('-') else ''}"), line


@pytest.fixture
def no_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every way a command starts real work fails the test instead (replay's state machine is pure: it runs)."""

    def forbidden(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the command started work although a value is bad")

    async def forbidden_async(*_args: object, **_kwargs: object) -> None:
        forbidden()

    from shopsimrl.commands import rollout_stages
    from shopsimrl.env import build, core, server
    from shopsimrl.rollout import measure
    from shopsimrl.simulate import calibrate, side_by_side

    monkeypatch.setattr(rollout_stages, "open_env", forbidden_async)
    work = [getattr(module, name) for module, name in
            ((build, "build_catalog"), (core, "load_env"), (server, "serve"), (side_by_side, "compare"),
             (calibrate, "fit"), (measure, "measure"))]
    for module in [m for name, m in sys.modules.items() if name.startswith("shopsimrl.")]:
        for attribute, value in list(vars(module).items()):  # also where a command imported the function by name
            if any(value is w for w in work):
                monkeypatch.setattr(module, attribute, forbidden)


@pytest.mark.parametrize(("command", "option", "value"), [c for c in CASES if isinstance(c[2], Late)],
                         ids=str)
def test_a_bad_value_the_command_checks_is_one_line_and_exit_2(capsys, no_work, tmp_path, monkeypatch, odd_files,
                                                              command, option, value) -> None:
    monkeypatch.chdir(tmp_path)  # a default --out lands here, never in the checkout
    for name in ("SHOPSIM_ENV_TOKEN", "SHOPSIM_ENV_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    code = main(_argv(command, option, value.value, value.extra, odd_files))
    err = capsys.readouterr().err
    assert code == 2, err
    if option == "--max-steps":  # the deprecation warning comes first, then the one line
        err = err.split("\n", 1)[1]
    line = _one_line(err)
    assert "refused" in line or "error" in line
    if value.value in odd_files:  # a file's content refused: the message names the file
        assert odd_files[value.value] in line, line


@pytest.mark.parametrize("argv", [["calibrate", "@fifo", "@out"], ["replay", "@fifo"], ["calibrate", "/dev/zero", "@out"],
                                  ["rollout", "--system-prompt", "@fifo"], ["env", "serve", "--token-file", "@fifo"]],
                         ids=str)
def test_a_fifo_or_a_device_is_refused_by_a_real_process_without_waiting(odd_files, tmp_path, argv) -> None:
    """Opening a FIFO for reading waits for a writer forever; the command never opens one (nor reads /dev/zero)."""
    done = subprocess.run([sys.executable, "-m", "shopsimrl.cli", *(odd_files.get(a, a) for a in argv)],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "is not a regular file" in _one_line(done.stderr)


def test_more_simulated_worlds_than_the_bound_are_one_line_and_exit_2(capsys, no_work, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["simulate", "--seeds", *map(str, range(101))]) == 2
    assert _one_line(capsys.readouterr().err) == "shopsimrl simulate: refused: --seeds: at most 100 worlds, got 101"


def test_a_real_process_prints_one_line_and_exits_2() -> None:
    """The console entry point too (a parse error raises SystemExit inside; the process exits 2)."""
    done = subprocess.run([sys.executable, "-m", "shopsimrl.cli", "rollout", "--products", "5"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert _one_line(done.stderr) == ("shopsimrl rollout: error: argument --products: must be a whole number within "
                                      "10..1000000, got 5 (see shopsimrl rollout --help)")
    assert done.stdout == ""


ESCAPES = "run\x1b]0;owned\x07\x1b[2J\x9b31m"  # a window title, clear screen, a C1 CSI: each must show as text


@pytest.mark.parametrize("argv", [["compare", "@file"], ["compare", "@missing"], ["env", "build", "--cache-dir", "@sub"],
                                  ["compare", "@run", "--chart", "@file/c.png"]], ids=str)
def test_an_escape_sequence_in_a_folder_name_reaches_the_terminal_as_text(capsys, tmp_path, argv) -> None:
    """The parser's one line quotes the user's path; its control characters are shown as ``\\xNN``."""
    file = tmp_path / ESCAPES
    file.write_text("not a folder")
    (tmp_path / "run").mkdir()
    paths = {"@file": str(file), "@missing": str(tmp_path / ESCAPES / "gone"), "@sub": str(file / "sub"),
             "@run": str(tmp_path / "run"), "@file/c.png": str(file / "c.png")}
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args([paths.get(a, a) for a in argv])
    assert exited.value.code == 2
    line = _one_line(capsys.readouterr().err)
    assert not any(ord(c) < 0x20 or 0x7f <= ord(c) < 0xa0 for c in line), repr(line)
    assert "run\\x1b]0;owned\\x07\\x1b[2J\\x9b31m" in line, line


def test_the_same_server_under_two_names_is_refused_and_distinct_ones_pass() -> None:
    from shopsimrl.argtypes import server_urls

    assert server_urls("http://127.0.0.1:5700, http://localhost:5701/") == "http://127.0.0.1:5700,http://localhost:5701"
    with pytest.raises(argparse.ArgumentTypeError, match="are the same server"):
        server_urls("http://localhost:5700,http://127.0.0.1:5700")


def test_env_slots_zero_is_refused_by_train(capsys, monkeypatch) -> None:
    monkeypatch.setenv("ENV_SLOTS", "0")
    assert main(["train", "--dry-run"]) == 2
    assert "ENV_SLOTS (episodes at once per env server) must be >= 1, got 0" in capsys.readouterr().err


def test_ray_serve_without_a_ray_cluster_is_one_line_and_exit_2(tmp_path) -> None:
    """``--address auto`` with no Ray cluster to find (a fresh Ray temp folder): one line naming --address
    (without the optional ray package: one line saying how to install it)."""
    import importlib.util

    has_ray = importlib.util.find_spec("ray") is not None
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | {"RAY_TMPDIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "shopsimrl.cli", "env", "ray-serve", "--products", "10", "--port", "0"],
                          capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert _one_line(done.stderr).startswith("shopsimrl env ray-serve: refused: " + ("--address auto: " if has_ray else ""))
