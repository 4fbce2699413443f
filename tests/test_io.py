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


ODD_TEXT = "half a pair \ud800, the other \udfff, NUL \x00, ESC \x1b[2J\x1b]0;title\x07, a real pair \U0001f600"


def test_text_a_model_wrote_is_written_whole_by_every_json_writer(tmp_path):
    """Traces and triage (atomic_write_json), batches (atomic_write_jsonl), metrics and queues (append_jsonl): half a
    surrogate pair has no UTF-8 form and is written as its JSON escape (it raised UnicodeEncodeError); NUL and
    escape sequences are JSON escapes; every file is valid UTF-8 and reads back to the same text."""
    record = {"text": ODD_TEXT, ODD_TEXT: [ODD_TEXT]}
    atomic_write_json(tmp_path / "trace.json", record)
    atomic_write_jsonl(tmp_path / "batch.jsonl", [record, record])
    append_jsonl(tmp_path / "metrics.jsonl", record)
    for name in ("trace.json", "batch.jsonl", "metrics.jsonl"):
        raw = (tmp_path / name).read_bytes()
        assert b"\x00" not in raw and b"\x1b" not in raw and b"\\ud800" in raw
        raw.decode("utf-8")  # strict: valid UTF-8
    assert json.loads((tmp_path / "trace.json").read_text(encoding="utf-8")) == record
    assert list(read_jsonl(tmp_path / "batch.jsonl")) == [record, record]
    assert list(read_jsonl(tmp_path / "metrics.jsonl")) == [record]


def test_well_formed_replaces_only_half_pairs():
    from shopsimrl.io import well_formed

    assert well_formed(ODD_TEXT) == ODD_TEXT.replace("\ud800", "\ufffd").replace("\udfff", "\ufffd")
    plain = "no surrogate here \U0001f600 \x00"
    assert well_formed(plain) is plain
