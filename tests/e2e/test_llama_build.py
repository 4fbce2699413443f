"""The llama-server build rule: portable ISA options per CPU, a smoke test before caching, a versioned cache.

These run in ``make test`` (no compiler, no model): the compile step is a fake that writes a small
executable, and the smoke test runs real processes on 127.0.0.1 (a fake server, or one that crashes).
"""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
from e2e import llama_build
from e2e.llama_build import (
    BuildFailed,
    SmokeFailed,
    build,
    cmake_options,
    cpu_flags,
    entry_name,
    isa_options,
    rule_of,
    smoke_test,
    stale_reason,
)

# A Sapphire Rapids guest (AMX advertised), an Ivy Bridge (AVX and F16C, no AVX2/FMA/BMI2), an old
# Nehalem (SSE4.2 only), and a Neoverse-N1 aarch64 machine: /proc/cpuinfo lines as the kernel prints them.
AMX_X86 = ("flags\t\t: fpu sse sse2 ssse3 fma cx16 sse4_1 sse4_2 avx f16c bmi1 avx2 bmi2 avx512f avx512dq avx512cd "
           "avx512bw avx512vl avx512ifma avx512vbmi avx512_vnni avx512_bf16 avx_vnni amx_bf16 amx_tile amx_int8\n")
IVY_BRIDGE = "flags\t\t: fpu sse sse2 ssse3 cx16 sse4_1 sse4_2 popcnt aes xsave avx f16c rdrand\n"
NEHALEM = "flags\t\t: fpu sse sse2 ssse3 cx16 sse4_1 sse4_2 popcnt\n"
AARCH64 = "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp asimddp\n"


def _options(machine: str, cpuinfo: str) -> dict[str, str]:
    return dict(o.removeprefix("-D").split("=", 1) for o in isa_options(machine, cpu_flags(cpuinfo)))


def test_cpu_flags_are_read_from_the_x86_flags_line_and_the_arm_features_line() -> None:
    assert {"avx2", "amx_tile"} <= cpu_flags(AMX_X86)
    assert {"asimd", "asimddp"} <= cpu_flags(AARCH64)
    assert cpu_flags("processor : 0\n") == frozenset()


def test_an_amx_x86_gets_explicit_isa_options_and_never_amx() -> None:
    options = _options("x86_64", AMX_X86)
    assert options["GGML_NATIVE"] == "OFF"  # never -march=native: it compiles the AMX path in
    assert all(options[name] == "OFF" for name in ("GGML_AMX_TILE", "GGML_AMX_INT8", "GGML_AMX_BF16"))
    assert all(options[name] == "ON" for name in ("GGML_SSE42", "GGML_AVX", "GGML_AVX2", "GGML_FMA", "GGML_F16C",
                                                  "GGML_BMI2", "GGML_AVX512", "GGML_AVX512_VBMI", "GGML_AVX512_VNNI",
                                                  "GGML_AVX512_BF16", "GGML_AVX_VNNI"))


def test_an_x86_without_avx2_turns_off_what_ggml_would_turn_on_by_default() -> None:
    options = _options("x86_64", IVY_BRIDGE)
    assert options["GGML_NATIVE"] == "OFF"
    assert options["GGML_AVX"] == options["GGML_F16C"] == options["GGML_SSE42"] == "ON"
    # ggml's defaults with GGML_NATIVE=OFF are AVX2, FMA, BMI2 ON: each must be named OFF here
    assert options["GGML_AVX2"] == options["GGML_FMA"] == options["GGML_BMI2"] == "OFF"
    assert options["GGML_AVX512"] == "OFF"


def test_an_x86_without_avx_builds_the_sse_baseline() -> None:
    options = _options("x86_64", NEHALEM)
    assert options["GGML_SSE42"] == "ON"
    assert [name for name, value in options.items() if value == "ON"] == ["GGML_SSE42"]


def test_avx512_needs_all_five_subsets_that_ggml_turns_on_together() -> None:
    without_bw = AMX_X86.replace(" avx512bw", "")
    assert _options("x86_64", without_bw)["GGML_AVX512"] == "OFF"


def test_aarch64_uses_the_portable_baseline_without_x86_options() -> None:
    for machine in ("aarch64", "arm64"):
        assert isa_options(machine, cpu_flags(AARCH64)) == ("-DGGML_NATIVE=OFF",)


def test_the_cache_entry_is_keyed_by_the_build_rule_and_the_options(monkeypatch: pytest.MonkeyPatch) -> None:
    amx, ivy = cmake_options("x86_64", cpu_flags(AMX_X86)), cmake_options("x86_64", cpu_flags(IVY_BRIDGE))
    name = entry_name(rule_of("11434.0.0", amx))
    assert name.startswith("11434.0.0-")
    assert name != entry_name(rule_of("11434.0.0", ivy))  # a cache copied to another CPU is not reused
    assert name != entry_name(rule_of("11435.0.0", amx))
    monkeypatch.setattr(llama_build, "BUILD_RULE", llama_build.BUILD_RULE + 1)
    assert entry_name(rule_of("11434.0.0", amx)) != name  # a new rule never reuses an older rule's binary


# -- build(): compile (faked), smoke, cache ---------------------------------------------------------------


class FakeCompile:
    """Writes a small executable as the binary; counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, work: Path, options: tuple[str, ...], jobs: int) -> tuple[Path, Path]:
        self.calls += 1
        binary, template = work / "out" / "llama-server", work / "out" / "template.jinja"
        binary.parent.mkdir()
        binary.write_text(f"#!/bin/sh\n# build {self.calls}\nexit 0\n")
        binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
        template.write_text("{{ messages }}")
        return binary, template


def _passing_smoke(binary: Path, model: Path, template: Path, log: Path) -> dict[str, Any]:
    return {"passed": True, "tokens_per_second": 50.0}


def _failing_smoke(binary: Path, model: Path, template: Path, log: Path) -> dict[str, Any]:
    log.write_text("general protection fault\n")
    raise SmokeFailed(f"llama-server killed by SIGSEGV while loading the model; log: {log}")


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "shopsimrl" / "llama-server"


def _build(compile_step: FakeCompile, smoke: Any = _passing_smoke, flags: str = AMX_X86) -> Path:
    return build("11434.0.0", 1, machine="x86_64", flags=cpu_flags(flags), model=Path("/nonexistent.gguf"),
                 compile_step=compile_step, smoke=smoke)


def test_a_binary_that_fails_its_smoke_test_is_never_cached(cache: Path) -> None:
    compile_step = FakeCompile()
    with pytest.raises(BuildFailed, match="SIGSEGV"):
        _build(compile_step, _failing_smoke)
    assert [p.name for p in cache.iterdir()] == [f"{entry_name(rule_of('11434.0.0', _amx_options()))}.smoke-failed.log"]
    with pytest.raises(BuildFailed):  # nothing to reuse: the next run builds (and tests) again
        _build(compile_step, _failing_smoke)
    assert compile_step.calls == 2


def _amx_options() -> tuple[str, ...]:
    return cmake_options("x86_64", cpu_flags(AMX_X86))


def test_a_tested_entry_is_reused_and_records_its_rule(cache: Path) -> None:
    compile_step = FakeCompile()
    entry = _build(compile_step)
    stamp = json.loads((entry / "build.json").read_text())
    assert stamp["build_rule"] == llama_build.BUILD_RULE and stamp["cmake_options"] == list(_amx_options())
    assert stamp["smoke"]["passed"] is True
    assert _build(compile_step) == entry and compile_step.calls == 1
    assert not [p for p in cache.iterdir() if p.name.startswith(".")]  # no temporary folder left


def test_an_entry_stamped_by_an_older_rule_is_rebuilt(cache: Path) -> None:
    compile_step = FakeCompile()
    entry = _build(compile_step)
    stamp = json.loads((entry / "build.json").read_text())
    (entry / "build.json").write_text(json.dumps({**stamp, "build_rule": 1}))
    assert stale_reason(entry, rule_of("11434.0.0", _amx_options())) == "written by another build rule"
    assert _build(compile_step) == entry and compile_step.calls == 2
    assert json.loads((entry / "build.json").read_text())["build_rule"] == llama_build.BUILD_RULE


def test_an_entry_without_stamp_or_with_an_altered_binary_is_rebuilt(cache: Path) -> None:
    compile_step = FakeCompile()
    entry = _build(compile_step)
    (entry / "llama-server").write_text("#!/bin/sh\nexit 1\n")
    assert stale_reason(entry, rule_of("11434.0.0", _amx_options())) == "its binary changed since it was tested"
    _build(compile_step)
    (entry / "build.json").unlink()
    _build(compile_step)
    assert compile_step.calls == 3 and stale_reason(entry, rule_of("11434.0.0", _amx_options())) is None


# -- the smoke test itself: real processes on 127.0.0.1 ------------------------------------------------------

FAKE_SERVER = '''
import json, os, signal, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
args = sys.argv[1:]
if os.environ.get("FAKE_MODE") == "segv":
    os.kill(os.getpid(), signal.SIGSEGV)
port = int(args[args.index("--port") + 1])
class Handler(BaseHTTPRequestHandler):
    def _send(self, body):
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def do_GET(self):
        self._send({"status": "ok"})
    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        empty = os.environ.get("FAKE_MODE") == "empty"
        self._send({"content": "" if empty else " Paris.", "tokens_predicted": 0 if empty else request["n_predict"],
                    "timings": {"predicted_per_second": 42.5}})
    def log_message(self, *args):
        pass
HTTPServer(("127.0.0.1", port), Handler).serve_forever()
'''


def _fake_binary(tmp_path: Path, mode: str) -> Path:
    script = tmp_path / "fake_server.py"
    script.write_text(FAKE_SERVER)
    binary = tmp_path / f"llama-server-{mode}"
    binary.write_text(f"#!/bin/sh\nFAKE_MODE={mode} exec {sys.executable} {script} \"$@\"\n")
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    return binary


def test_the_smoke_test_passes_a_server_that_answers_one_completion(tmp_path: Path) -> None:
    figures = smoke_test(_fake_binary(tmp_path, "ok"), tmp_path / "m.gguf", tmp_path / "t.jinja", tmp_path / "log",
                         timeout=30)
    assert figures["passed"] and figures["tokens_predicted"] == llama_build.SMOKE_TOKENS
    assert figures["tokens_per_second"] == 42.5


def test_the_smoke_test_names_the_signal_of_a_server_that_crashes_at_load(tmp_path: Path) -> None:
    with pytest.raises(SmokeFailed, match="killed by SIGSEGV while loading the model"):
        smoke_test(_fake_binary(tmp_path, "segv"), tmp_path / "m.gguf", tmp_path / "t.jinja", tmp_path / "log",
                   timeout=30)


def test_the_smoke_test_fails_a_server_that_answers_no_tokens(tmp_path: Path) -> None:
    with pytest.raises(SmokeFailed, match="without tokens"):
        smoke_test(_fake_binary(tmp_path, "empty"), tmp_path / "m.gguf", tmp_path / "t.jinja", tmp_path / "log",
                   timeout=30)
