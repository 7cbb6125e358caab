"""Runs Windows builds under wine: the kernels DLL (`build.py --target windows-x86_64`, MinGW-w64),
tests/native_harness/harness.c linked against it, and ort_session.c (a session of the Windows
onnxruntime.dll with Amber's op library registered).

wine keeps its state in a prefix of its own under the checkout's build/ (created on first use),
with its debug output off and no GUI helpers (mono, gecko) asked for.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np

from engine.native import build as native_build
from tests.native_harness.client import Batch, HarnessError, Reply

TARGET = "windows-x86_64"
HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
WINE_PREFIX = ROOT / "build" / "wine-prefix"
HARNESS_C = HERE / "harness.c"
ORT_SESSION_C = HERE / "ort_session.c"
RUN_TIMEOUT_S = 900
# ONNX element types ort_session.c passes, and their numpy types.
ONNX_TYPES = {1: np.float32, 7: np.int64, 10: np.float16, 6: np.int32}


def missing_tools() -> list[str]:
    """The programs the Windows tests need that are not on PATH."""
    need = [native_build.CROSS_COMPILERS[TARGET], "wine"]
    return [name for name in need if shutil.which(name) is None]


def wine_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(WINEPREFIX=str(WINE_PREFIX), WINEDEBUG="-all", WINEDLLOVERRIDES="mscoree,mshtml=")
    env.pop("DISPLAY", None)   # headless: no window, whatever the session has
    return env


def _wine_bin() -> str:
    exe = shutil.which("wine")
    if exe is None:
        raise HarnessError("wine not found")
    WINE_PREFIX.parent.mkdir(parents=True, exist_ok=True)   # wine creates the prefix itself
    return exe


def wine(argv: list[str], *, stdin: bytes = b"", cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    """`wine argv...` in the prefix."""
    return subprocess.run([_wine_bin(), *argv], input=stdin, capture_output=True, check=False,
                          timeout=RUN_TIMEOUT_S, env=wine_env(), cwd=cwd)


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
    cmd = [cc, "-O2", "-std=c11", "-Wall", "-Werror", *native_build.include_flags(), "-o", str(exe),
           str(c_file), *link]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False,
                          timeout=native_build.COMPILE_TIMEOUT_S)
    if proc.returncode != 0:
        raise HarnessError(proc.stderr.strip() or f"{cc} exited {proc.returncode}")
    return exe


def build_harness(out_dir: Path) -> Path:
    """harness.exe linked against a copy of the kernels DLL beside it, in out_dir."""
    dll = shutil.copy2(kernels_dll(), out_dir)
    return compile_exe(HARNESS_C, out_dir, "-DAMBER_HARNESS_DLL", str(dll))


def run_batch(batch: Batch, exe: Path) -> list[Reply]:
    """Every request of `batch` in one harness.exe process under wine."""
    return batch.run_argv([_wine_bin(), str(exe)], where="under wine", env=wine_env())


def ort_fetcher():
    """packaging/fetch_ort_windows.py (where `make test` puts the Windows onnxruntime.dll)."""
    spec = importlib.util.spec_from_file_location("fetch_ort_windows", ROOT / "packaging" / "fetch_ort_windows.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_ort_session(out_dir: Path, ort_dll: Path) -> Path:
    """ort_session.exe with the Windows onnxruntime.dll and the kernels DLL beside it, in out_dir."""
    shutil.copy2(ort_dll, out_dir / "onnxruntime.dll")
    shutil.copy2(kernels_dll(), out_dir)
    return compile_exe(ORT_SESSION_C, out_dir)


def _name(s: str) -> bytes:
    b = s.encode()
    return struct.pack("<i", len(b)) + b


def run_session(exe: Path, model: Path, feeds: dict[str, np.ndarray], outputs: list[str],
                threads: int) -> dict[str, np.ndarray]:
    """The model run once by the Windows onnxruntime.dll with the kernels DLL registered, under wine."""
    codes = {np.dtype(t): code for code, t in ONNX_TYPES.items()}
    req = [struct.pack("<i", len(feeds))]
    for name, value in feeds.items():
        a = np.ascontiguousarray(value)
        req += [_name(name), struct.pack("<ii", codes[a.dtype], a.ndim), struct.pack(f"<{a.ndim}q", *a.shape),
                struct.pack("<q", a.nbytes), a.tobytes()]
    req += [struct.pack("<i", len(outputs)), *(_name(n) for n in outputs)]
    dll = next(exe.parent.glob(f"{native_build.LIB_STEM}-*.dll"))
    proc = wine([str(exe), "onnxruntime.dll", dll.name, str(model), str(threads)], stdin=b"".join(req),
                cwd=exe.parent)
    if proc.returncode != 0:
        raise HarnessError(f"ort_session.exe exited {proc.returncode}: {proc.stderr.decode(errors='replace').strip()}")
    out, pos, got = proc.stdout, 0, {}
    for name in outputs:
        code, rank = struct.unpack_from("<ii", out, pos)
        dims = struct.unpack_from(f"<{rank}q", out, pos + 8)
        (nbytes,) = struct.unpack_from("<q", out, pos + 8 + 8 * rank)
        pos += 16 + 8 * rank
        got[name] = np.frombuffer(out[pos:pos + nbytes], ONNX_TYPES[code]).reshape(dims).copy()
        pos += nbytes
    if pos != len(out):
        raise HarnessError(f"ort_session.exe wrote {len(out) - pos} bytes more than its outputs")
    return got
