"""Which llama.cpp build the comparison uses: CMake flags picked from this CPU's features, and the
side venv keyed by them (so a machine with another CPU gets, and finds, a matching build).

Standard library only: `bench.harness.common` imports it, and workers may run under the side venv.
"""
from __future__ import annotations

import os
from pathlib import Path

# (GGML option, the /proc/cpuinfo flags it needs). Checked against ggml/CMakeLists.txt of the
# llama.cpp that llama-cpp-python 0.3.36 vendors. GGML_AVX512 compiles with -mavx512f/cd/vl/dq/bw.
# Never any GGML_AMX_*: llama.cpp's AMX matmul dies with SIGILL (`tilezero`) on the VMs we bench on.
OPTIONAL_FLAGS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("GGML_AVX512", ("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw")),
    ("GGML_AVX512_VBMI", ("avx512vbmi",)),
    ("GGML_AVX512_VNNI", ("avx512_vnni",)),
    ("GGML_AVX512_BF16", ("avx512_bf16",)),
    ("GGML_AVX_VNNI", ("avx_vnni",)),
)
# On by default with GGML_NATIVE=OFF (x86-64 v3); switched off when the CPU lacks them.
BASELINE_FLAGS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("GGML_AVX", ("avx",)), ("GGML_AVX2", ("avx2",)), ("GGML_FMA", ("fma",)), ("GGML_F16C", ("f16c",)),
    ("GGML_BMI2", ("bmi2",)),
)


def cpu_flags(cpuinfo: str | None = None) -> frozenset[str]:
    """The feature flags of the first CPU in /proc/cpuinfo (empty when unreadable: not x86 Linux)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return frozenset()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    return frozenset()


def ggml_options(flags: frozenset[str]) -> list[str]:
    """The optional GGML_* options this CPU supports (beyond the AVX2 baseline), in a fixed order."""
    baseline_ok = all(f in flags for _, need in BASELINE_FLAGS for f in need)
    if not baseline_ok:
        return []   # the AVX-512 options need the AVX2 ones below them
    return [opt for opt, need in OPTIONAL_FLAGS if all(f in flags for f in need)]


def cmake_args(flags: frozenset[str]) -> str:
    """CMAKE_ARGS for `pip install llama-cpp-python`: portable (no -march=native) but with every
    instruction set this CPU has; never AMX."""
    args = ["-DGGML_NATIVE=OFF"]
    if flags:   # x86 Linux: baseline options off where the CPU lacks them (else SIGILL at load)
        args += [f"-D{opt}=OFF" for opt, need in BASELINE_FLAGS if not all(f in flags for f in need)]
    args += [f"-D{opt}=ON" for opt in ggml_options(flags)]
    return " ".join(args)


def venv_tag(flags: frozenset[str]) -> str:
    """'' for the AVX2 baseline build (the venv `bench-venv`, as before), else e.g.
    'avx512-avx512_vbmi-avx512_vnni-avx512_bf16-avx_vnni' (the venv `bench-venv-<tag>`)."""
    opts = ggml_options(flags)
    if flags and not opts and not all(f in flags for _, need in BASELINE_FLAGS for f in need):
        return "baseline-off"
    return "-".join(o.removeprefix("GGML_").lower() for o in opts)


def side_venv(home: Path, flags: frozenset[str] | None = None) -> Path:
    """The side venv for this CPU under `home` (AMBER_BENCH_VENV overrides)."""
    if os.environ.get("AMBER_BENCH_VENV"):
        return Path(os.environ["AMBER_BENCH_VENV"])
    tag = venv_tag(cpu_flags() if flags is None else flags)
    return home / ("bench-venv" + (f"-{tag}" if tag else ""))
