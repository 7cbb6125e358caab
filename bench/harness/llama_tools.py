"""llama.cpp's own C++ tools (`llama-bench`, `llama-quantize`) for the peer bench, built for this CPU
from source: mainline llama.cpp from the `llama-cpp-python` sdist (PyPI, the one source reachable at
install time; it vendors llama.cpp with its tools), and ik_llama.cpp from a checkout the caller names
(it is on GitHub only).

Builds go under the dev home's `llama-tools/<peer>-<cpu tag>/` with the same CMake options the
Python binding's build uses (bench.harness.llama_build: every instruction set this CPU has, never
AMX); a stamp file holds the options and source, so a changed CPU or source builds again.

Standard library only, like llama_build.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

from bench.harness import llama_build

SDIST = "llama-cpp-python==0.3.36"
TARGETS = ("llama-bench", "llama-quantize")
# Built without the network features, the server and the tests: only the two tools are compiled.
COMMON_OPTIONS = ("-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_CURL=OFF",
                  "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_SERVER=OFF")


class ToolsError(RuntimeError):
    """A peer's source could not be had or did not build; the message says which step and why."""


@dataclass(frozen=True)
class Tools:
    peer: str            # "llama.cpp" or "ik_llama.cpp"
    bench: Path
    quantize: Path
    source: str          # what was built: the sdist's name or the checkout's commit
    options: str         # the CMake options


def tools_root(home: Path) -> Path:
    return Path(os.environ.get("AMBER_LLAMA_TOOLS", home / "llama-tools"))


def mainline_source(home: Path) -> Path:
    """The llama.cpp source the `llama-cpp-python` sdist vendors, downloaded and unpacked once."""
    root = tools_root(home)
    src = root / "src" / SDIST.replace("==", "-") / "vendor" / "llama.cpp"
    if (src / "CMakeLists.txt").is_file():
        return src
    dl = root / "downloads"
    dl.mkdir(parents=True, exist_ok=True)
    found = sorted(dl.glob("llama_cpp_python-*.tar.gz"))
    if not found:
        rc = subprocess.call([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                              SDIST, "-d", str(dl)])
        found = sorted(dl.glob("llama_cpp_python-*.tar.gz"))
        if rc != 0 or not found:
            raise ToolsError(f"cannot download the {SDIST} sdist (pip exit status {rc})")
    unpack = root / "src" / (SDIST.replace("==", "-") + ".part")
    shutil.rmtree(unpack, ignore_errors=True)
    unpack.mkdir(parents=True)
    with tarfile.open(found[-1]) as tar:
        tar.extractall(unpack, filter="data")
    (inner,) = [p for p in unpack.iterdir() if p.is_dir()]
    os.replace(inner, src.parents[1])
    shutil.rmtree(unpack, ignore_errors=True)
    if not (src / "CMakeLists.txt").is_file():
        raise ToolsError(f"{found[-1].name} has no vendor/llama.cpp")
    return src


def cmake_options(peer: str, flags: frozenset[str]) -> list[str]:
    """The CPU options (llama_build.cmake_args) plus the build's own; ik_llama.cpp's GGML_NATIVE=OFF
    needs its AVX2 baseline switched on by name."""
    options = list(COMMON_OPTIONS) + llama_build.cmake_args(flags).split()
    if peer == "ik_llama.cpp" and flags:
        options += [f"-D{opt}=ON" for opt, need in llama_build.BASELINE_FLAGS if all(f in flags for f in need)]
    return options


def _commit(src: Path) -> str:
    try:
        out = subprocess.run(["git", "-C", str(src), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                             text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return src.name
    return out.stdout.strip() or src.name


def build(peer: str, src: Path, home: Path, jobs: int = 2) -> Tools:
    """`llama-bench` and `llama-quantize` of `peer` from `src`, built once per CPU tag and source."""
    flags = llama_build.cpu_flags()
    options = cmake_options(peer, flags)
    tag = llama_build.venv_tag(flags) or "avx2"
    slug = "mainline" if peer == "llama.cpp" else "ik"
    out = tools_root(home) / f"{slug}-{tag}"
    source = SDIST if peer == "llama.cpp" else f"ik_llama.cpp {_commit(src)}"
    stamp = f"{source}\n{' '.join(options)}\n"
    bin_dir = out / "bin"
    tools = Tools(peer, bin_dir / "llama-bench", bin_dir / "llama-quantize", source, " ".join(options))
    if (out / "amber-stamp.txt").is_file() and (out / "amber-stamp.txt").read_text() == stamp \
            and tools.bench.is_file() and tools.quantize.is_file():
        return tools
    if shutil.which("cmake") is None or shutil.which("c++") is None:
        raise ToolsError(f"{peer}: building it needs cmake and a C++ compiler (apt install cmake g++)")
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    steps = [["cmake", "-S", str(src), "-B", str(out), *gen, *options],
             ["cmake", "--build", str(out), "-j", str(jobs), "--target", *TARGETS]]
    log = out.parent / f"{slug}-{tag}.log"
    out.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as fh:
        for cmd in steps:
            print(f"llama tools: {' '.join(cmd)}", flush=True)
            rc = subprocess.call(cmd, stdout=fh, stderr=subprocess.STDOUT)
            if rc != 0:
                tail = log.read_text(errors="replace").strip().splitlines()[-5:]
                raise ToolsError(f"{peer}: `{cmd[0]} {cmd[1]}` failed ({rc}); {log}: " + " | ".join(tail))
    if not (tools.bench.is_file() and tools.quantize.is_file()):
        raise ToolsError(f"{peer}: the build made no {tools.bench.name} / {tools.quantize.name} in {bin_dir}")
    (out / "amber-stamp.txt").write_text(stamp)
    return tools
