"""Checks for command-line values, run while argparse parses (``type=`` callables).

A bad value then costs one line on stderr and exit 2 before any work starts, and
every command words it the same way: ``shopsimrl env build: error: argument
--products: must be an integer within 10..1000000, got 5``.  Checks that need
several options at once stay in the commands; this module holds the ones a single
value can fail.  It imports only the standard library and ``shopsimrl.io`` (itself standard library
only), so ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import os
import socket
import stat
import sys
import tempfile
from collections.abc import Callable, Sequence
from enum import Enum
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit

from shopsimrl.io import printable

MAX_PORT = 65535
MAX_INPUT_BYTES = 64 * 2**20  # a file read whole (a replay supply): larger is not what the option means


class DeprecatedFlag(argparse.Action):
    """An old spelling of a flag, still accepted for one release: it sets the new flag's value and says on
    stderr which spelling to use instead.  Hidden from ``--help``."""

    def __init__(self, option_strings: Sequence[str], dest: str, *, replacement: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, help=argparse.SUPPRESS, **kwargs)
        self.replacement = replacement

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        print(f"{parser.prog}: {option_string} is deprecated and will be removed in the next release: "
              f"use {self.replacement}", file=sys.stderr, flush=True)
        setattr(namespace, self.dest, values)


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (argparse prints the whole usage first).

    Sub-command parsers inherit the class from the top parser, so setting it there covers them all.  The
    message carries what the user typed (a path, a value): it goes through :func:`shopsimrl.io.printable`, so
    a control character in a folder name is shown as ``\\xNN`` and never reaches the terminal as one.
    """

    def error(self, message: str) -> NoReturn:
        prog = printable(self.prog, limit=200)
        self.exit(2, f"{prog}: error: {printable(message, limit=2000)} (see {prog} --help)\n")


def _bad(message: str) -> NoReturn:
    raise argparse.ArgumentTypeError(message)


def _integer(text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        _bad(f"expected a whole number, got {text!r}")


def int_range(low: int, high: int | None = None, *, why: str = "", why_high: str = "") -> Callable[[str], int]:
    """A whole number within ``low..high`` (no upper bound when ``high`` is None); ``why`` ends the message
    (``why_high`` too, for a value above ``high``)."""

    def check(text: str) -> int:
        value = _integer(text)
        if value < low or (high is not None and value > high):
            because = why_high if high is not None and value > high and why_high else why
            _bad(f"must be a whole number {f'within {low}..{high}' if high is not None else f'>= {low}'}"
                 f"{f' ({because})' if because else ''}, got {value}")
        return value

    check.__name__ = "int"
    return check


def number(low: float | None = None, high: float | None = None, *, above: float | None = None) -> Callable[[str], float]:
    """A finite number, at least ``low`` / more than ``above`` / at most ``high`` where given (nan and inf never pass)."""

    def check(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            _bad(f"expected a number, got {text!r}")
        wants = [w for w in (f">= {low:g}" if low is not None else "", f"> {above:g}" if above is not None else "",
                             f"<= {high:g}" if high is not None else "") if w]
        if (not math.isfinite(value) or (low is not None and value < low) or (above is not None and value <= above)
                or (high is not None and value > high)):
            _bad(f"must be a finite number{' ' + ' and '.join(wants) if wants else ''}, got {text}")
        return value

    check.__name__ = "float"
    return check


def one_of(kind: type[Enum]) -> dict[str, Any]:
    """``add_argument`` keywords for an option that takes one value of the enum ``kind`` (``str`` enums, such
    as ``sampling.modes``'s): the parsed value is the member, so nothing later parses it again."""

    def check(text: str) -> Enum:
        try:
            return kind(text.strip())
        except ValueError:
            _bad(f"invalid choice: {text!r} (choose from {', '.join(repr(m.value) for m in kind)})")

    check.__name__ = kind.__name__
    return {"type": check, "choices": list(kind), "metavar": "{" + ",".join(str(m.value) for m in kind) + "}"}


def _first_existing(path: Path) -> Path:
    probe = path
    while not os.path.lexists(probe) and probe.parent != probe:
        probe = probe.parent
    return probe


def cannot_write_in(folder: Path) -> str | None:
    """Why nothing can be written in ``folder`` (None: it can).  Creates and removes a hidden file there: what
    an atomic write will do (os.access says yes to root everywhere, /proc included)."""
    try:
        fd, name = tempfile.mkstemp(prefix=".shopsimrl-probe-", dir=_first_existing(folder))
    except OSError as exc:
        return str(exc.strerror or exc)
    os.close(fd)
    os.unlink(name)
    return None


def _probe_writable(folder: Path, what: str) -> None:
    reason = cannot_write_in(folder)
    if reason is not None:
        _bad(f"cannot write in {folder} ({reason}): choose another {what}")


def folder(text: str) -> Path:
    """A folder that exists or can be made, and can be written in: not "", not a file, not /dev/null."""
    path = cache_folder(text)
    _probe_writable(_first_existing(path), "folder")
    return path


def cache_folder(text: str) -> Path:
    """A folder that exists or could be made (not "", not a file): a cache that may be read-only when what
    is needed is already in it (writing, when needed, reports its own error)."""
    if not text.strip():
        _bad("an empty path; give a folder")
    path = Path(text).expanduser()
    base = _first_existing(path)
    if not base.is_dir():
        _bad(f"{base} is not a folder{'' if base == path else f' (in {text})'}")
    return path


def existing_folder(text: str) -> Path:
    """A folder that is there to be read (a slime checkout, a run folder): not "", not a file."""
    if not text.strip():
        _bad("an empty path; give a folder")
    path = Path(text).expanduser()
    if not path.is_dir():
        _bad(f"{text} is not a folder" if path.exists() else f"{text} does not exist")
    return path


def out_file(text: str) -> Path:
    """A regular file to (re)write atomically: not "", not a folder or a device, in a folder we can write in."""
    if not text.strip():
        _bad("an empty path; give a file name")
    path = Path(text).expanduser()
    if os.path.lexists(path) and not path.is_file():
        _bad(f"{path} exists and is not a regular file")
    base = _first_existing(path.parent)
    if not base.is_dir():
        _bad(f"{base} is not a folder")
    _probe_writable(base, "file")
    return path


def in_file(text: str) -> Path:
    """A regular file of at most ``MAX_INPUT_BYTES`` to read whole (not a device such as /dev/zero)."""
    path = Path(text).expanduser()
    try:
        info = path.stat()
    except OSError as exc:
        _bad(f"cannot read {text} ({exc.strerror or exc})")
    if not stat.S_ISREG(info.st_mode):
        _bad(f"{text} is not a regular file")
    if info.st_size > MAX_INPUT_BYTES:
        _bad(f"{text} holds {info.st_size:,} bytes; at most {MAX_INPUT_BYTES:,} are read")
    return path


def server_url(text: str) -> str:
    """``http(s)://host:port`` of one server, the port within 1..65535; returned without a trailing slash."""
    url = text.strip().rstrip("/")
    split = urlsplit(url)
    if split.scheme not in ("http", "https") or not split.hostname:
        _bad(f"{text!r} is not an http(s)://host:port URL")
    try:
        port = split.port
    except ValueError:
        _bad(f"{text!r}: the port must be within 1..{MAX_PORT}")
    if port == 0:
        _bad(f"{text!r}: the port must be within 1..{MAX_PORT}")
    return url


def _addresses(host: str, port: int) -> frozenset[str]:
    """Where ``host`` leads: itself for an IP literal, else what the resolver says (localhost: 127.0.0.1, ::1)."""
    try:
        return frozenset({str(ipaddress.ip_address(host))})
    except ValueError:
        pass
    try:
        return frozenset(str(info[4][0]) for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
    except OSError:
        return frozenset({host.casefold()})  # unresolvable now: the client reports it when it connects


def server_urls(text: str) -> str:
    """One or more server URLs, comma-separated; refuses one server named twice, also under two names
    (``http://127.0.0.1:5700`` and ``http://localhost:5700``), whose slots would be counted twice."""
    urls = [server_url(part) for part in text.split(",") if part.strip()]
    if not urls:
        _bad("no server URL given")
    seen: list[tuple[str, str, int | None, frozenset[str]]] = []
    for url in urls:
        split = urlsplit(url)
        port = split.port or (443 if split.scheme == "https" else 80)
        where = _addresses(split.hostname or "", port)
        for other, scheme, other_port, other_where in seen:
            if scheme == split.scheme and other_port == port and where & other_where:
                _bad(f"{other} and {url} are the same server (its slots would be counted twice); give it once")
        seen.append((url, split.scheme, port, where))
    return ",".join(urls)
