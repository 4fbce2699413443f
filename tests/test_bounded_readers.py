"""shopsimrl/io.py's bounded, typed readers: regular files only, a size cap, strict JSON of the expected shape;
anything else is one BadFileError line naming the file (the commands print it and exit 2)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from shopsimrl.io import (
    MAX_JSON_DEPTH,
    BadFileError,
    json_number,
    json_text,
    printable,
    read_bounded_text,
    read_json_object,
    read_jsonl_objects,
)


def test_a_plain_file_within_its_cap_is_read(tmp_path: Path) -> None:
    (tmp_path / "f.json").write_text('{"a": [1, 2.5, "x", null, true]}')
    assert read_json_object(tmp_path / "f.json", 100, "f.json") == {"a": [1, 2.5, "x", None, True]}
    (tmp_path / "m.jsonl").write_text('{"step": 1}\n\n{"step": 2}\n{"step": 3')  # blank line, torn last line
    assert read_jsonl_objects(tmp_path / "m.jsonl", 100, "m.jsonl") == [(1, {"step": 1}), (3, {"step": 2})]


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _zero(path: Path) -> None:
    path.symlink_to("/dev/zero")


@pytest.mark.parametrize(("make", "says"), [
    (_fifo, "is not a regular file"),  # opened non-blocking: refused, never waited on
    (_zero, "is not a regular file"),
    (lambda p: p.mkdir(), "is a directory"),
    (lambda p: p.write_bytes(b"x" * 101), "is 101 bytes, more than the 100 bytes"),
    (lambda p: p.write_bytes(b"\xff\xfe{}"), "is not UTF-8 text"),
    (lambda p: None, "No such file or directory"),
], ids=["fifo", "dev-zero", "directory", "over-the-cap", "binary", "missing"])
def test_anything_but_a_small_regular_text_file_is_refused_in_one_line(tmp_path: Path, make, says: str) -> None:
    target = tmp_path / "f.json"
    make(target)
    with pytest.raises(BadFileError, match=says) as refused:
        read_bounded_text(target, 100, "the file")
    assert "\n" not in str(refused.value) and str(target) in str(refused.value)


def test_a_symlink_is_refused_where_one_must_not_be(tmp_path: Path) -> None:
    (tmp_path / "real").write_text("{}")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert read_bounded_text(tmp_path / "link", 10, "the file") == "{}"
    with pytest.raises(BadFileError, match="is a symbolic link"):
        read_bounded_text(tmp_path / "link", 10, "the file", follow_symlinks=False)


@pytest.mark.parametrize(("text", "says"), [
    ("[1, 2]", "holds a list in JSON, not an object"),
    ("null", "holds null in JSON"),
    ('{"a": 1e999}', "1e999 is out of range"),
    ('{"a": NaN}', "NaN is not a number JSON allows"),
    ('{"a": -Infinity}', "-Infinity is not a number JSON allows"),
    ('{"a": ' + "[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1) + "}", "nested more than"),
    ('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested more than"),
    ('{"a": 1', "not valid JSON"),
], ids=["list", "null", "1e999", "NaN", "-Infinity", "one-level-too-deep", "deep", "cut"])
def test_json_of_another_shape_is_refused(tmp_path: Path, text: str, says: str) -> None:
    (tmp_path / "run.json").write_text(text)
    with pytest.raises(BadFileError, match=says):
        read_json_object(tmp_path / "run.json", 1 << 20, "run.json")


def test_json_nested_to_the_limit_and_brackets_inside_strings_are_fine(tmp_path: Path) -> None:
    (tmp_path / "run.json").write_text('{"a": ' + "[" * (MAX_JSON_DEPTH - 1) + "]" * (MAX_JSON_DEPTH - 1)
                                       + ', "s": "' + "[{" * 100 + '"}')
    assert read_json_object(tmp_path / "run.json", 1 << 20, "run.json")["s"] == "[{" * 100


def test_a_jsonl_line_over_its_cap_or_not_an_object_is_refused_naming_the_line(tmp_path: Path) -> None:
    (tmp_path / "m.jsonl").write_text('{"step": 1}\n' + '{"x": "' + "a" * 200 + '"}\n')
    with pytest.raises(BadFileError, match="m.jsonl line 2 is 209 characters long, more than the 100 a line"):
        read_jsonl_objects(tmp_path / "m.jsonl", 1000, "m.jsonl", line_limit=100)
    (tmp_path / "m.jsonl").write_text('{"step": 1}\n[1]\n')
    with pytest.raises(BadFileError, match="m.jsonl line 2 holds a list in JSON"):
        read_jsonl_objects(tmp_path / "m.jsonl", 1000, "m.jsonl")


@pytest.mark.parametrize(("value", "says"), [
    (None, "step is null"), ("1", "is a string"), (True, "is a boolean"), ([1], "is a list"),
    (1.5, "expected a whole number"), (0, r"within 1\.\."), (10**400, "out of range"),
], ids=["null", "string", "boolean", "list", "fraction", "below", "huge-int"])
def test_a_field_of_the_wrong_type_or_range_is_refused(value: object, says: str) -> None:
    with pytest.raises(BadFileError, match=says):
        json_number({"step": value}, "step", "m.jsonl line 1", minimum=1, whole=True, optional=False)


def test_typed_fields_give_the_value_or_none() -> None:
    assert json_number({"x": 2.0}, "x", "w", whole=True) == 2.0 and json_number({}, "x", "w") is None
    assert json_text({"k": "grpo"}, "k", "w") == "grpo" and json_text({}, "k", "w") is None
    with pytest.raises(BadFileError, match="k is an object, expected a string"):
        json_text({"k": {}}, "k", "w")


def test_printable_shows_control_characters_instead_of_sending_them() -> None:
    assert printable("a\x1b]0;t\x07b\x9b\nc\x7f") == "a\\x1b]0;t\\x07b\\x9b\\x0ac\\x7f"
    assert printable("é ü [bold]") == "é ü [bold]"  # printable text, rich markup included, is left alone
    assert printable("x" * 300, limit=10) == "x" * 10 + "…"
