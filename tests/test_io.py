"""Atomic writes: a file is whole or absent; a torn JSONL line is skipped by readers."""

import json
import os
import stat

import pytest

from shopsimrl.io import append_jsonl, atomic_write_json, atomic_write_jsonl, read_jsonl


def test_atomic_write_leaves_no_temporary_file_and_a_readable_file(tmp_path):
    target = tmp_path / "sub" / "m.json"
    atomic_write_json(target, {"a": 1})
    assert json.loads(target.read_text()) == {"a": 1}
    assert [p.name for p in target.parent.iterdir()] == ["m.json"]
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o644


def test_a_failed_write_keeps_the_previous_file_and_no_temporary(tmp_path):
    target = tmp_path / "m.json"
    atomic_write_json(target, {"ok": True})
    with pytest.raises(ValueError):
        atomic_write_json(target, {"bad": float("nan")})  # strict JSON: NaN refused before anything is written
    with pytest.raises(TypeError):
        atomic_write_jsonl(target, [{"x": object()}])
    assert json.loads(target.read_text()) == {"ok": True}
    assert [p.name for p in tmp_path.iterdir()] == ["m.json"]


def test_jsonl_append_and_a_torn_last_line_is_skipped(tmp_path):
    path = tmp_path / "q.jsonl"
    append_jsonl(path, {"n": 1})
    append_jsonl(path, {"n": 2})
    with open(path, "a", encoding="utf-8") as handle:
        handle.write('{"n": 3')  # a crash in the middle of a line
    assert list(read_jsonl(path)) == [{"n": 1}, {"n": 2}]


def test_a_crash_before_the_rename_keeps_the_old_file_whole(tmp_path, monkeypatch):
    target = tmp_path / "batch.jsonl"
    atomic_write_jsonl(target, [{"old": 1}])

    def crash(src, dst):
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk gone"):
        atomic_write_jsonl(target, [{"new": i} for i in range(1000)])
    assert list(read_jsonl(target)) == [{"old": 1}]
    assert [p.name for p in tmp_path.iterdir()] == ["batch.jsonl"]
