"""Runs Windows builds under wine: the kernels DLL (`build.py --target windows-x86_64`, MinGW-w64),
tests/native_harness/harness.c linked against it, and ort_session.c (a session of the Windows
onnxruntime.dll with Amber's op library registered).

wine keeps its state in a prefix of its own under the checkout's build/ (created on first use),
with its debug output off and no GUI helpers (mono, gecko) asked for.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from engine.native import build as native_build
from tests.native_harness.client import Batch, HarnessError, Reply

TARGET = "windows-x86_64"
HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
WINE_PREFIX = ROOT / "build" / "wine-prefix"
HARNESS_C = HERE / "harness.c"
ORT_SESSION_C = HERE / "ort_session.c"
RUN_TIMEOUT_S = 900


def missing_tools() -> list[str]:
    """The programs the Windows tests need that are not on PATH."""
    need = [native_build.CROSS_COMPILERS[TARGET], "wine"]
    return [name for name in need if shutil.which(name) is None]


def wine_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(WINEPREFIX=str(WINE_PREFIX), WINEDEBUG="-all", WINEDLLOVERRIDES="mscoree,mshtml=")
    env.pop("DISPLAY", None)   # headless: no window, whatever the session has
    return env


def wine(argv: list[str], *, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    """`wine argv...` in the prefix (created on first use)."""
    exe = shutil.which("wine")
    if exe is None:
        raise HarnessError("wine not found")
    WINE_PREFIX.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.run([exe, *argv], input=stdin, capture_output=True, check=False,
                          timeout=RUN_TIMEOUT_S, env=wine_env())


def kernels_dll() -> Path:
    """The kernels DLL for Windows x64, built where `build.py --target windows-x86_64` puts it."""
    try:
        dll = native_build.build(native_build.BUILD_DIR / TARGET, target=TARGET)
    except native_build.BuildError as exc:
        raise HarnessError(f"the kernels do not compile for Windows: {exc}") from exc
    if dll is None:
        raise HarnessError(f"{native_build.CROSS_COMPILERS[TARGET]} not found")
    return dll


def compile_exe(c_file: Path, out_dir: Path, *link: str) -> Path:
    """c_file built for Windows x64 into out_dir (the DLLs it links against go next to it)."""
    cc = native_build.find_compiler(TARGET)
    if cc is None:
        raise HarnessError(f"{native_build.CROSS_COMPILERS[TARGET]} not found")
    exe = out_dir / f"{c_file.stem}.exe"
    cmd = [cc, "-O2", "-std=c11", "-Wall", "-Werror", "-I", str(native_build.SRC_DIR), "-o", str(exe),
           str(c_file), *link]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False,
                          timeout=native_build.COMPILE_TIMEOUT_S)
    if proc.returncode != 0:
        raise HarnessError(proc.stderr.strip() or f"{cc} exited {proc.returncode}")
    return exe


def build_harness(out_dir: Path) -> Path:
    """harness.exe linked against a copy of the kernels DLL beside it, in out_dir."""
    dll = shutil.copy2(kernels_dll(), out_dir)
    return compile_exe(HARNESS_C, out_dir, str(dll))


def run_batch(batch: Batch, exe: Path) -> list[Reply]:
    """Every request of `batch` in one harness.exe process under wine."""
    wine_bin = shutil.which("wine")
    if wine_bin is None:
        raise HarnessError("wine not found")
    WINE_PREFIX.parent.mkdir(parents=True, exist_ok=True)
    return batch.run_argv([wine_bin, str(exe)], where="under wine", env=wine_env())
