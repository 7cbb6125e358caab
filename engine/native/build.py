"""Compiles Amber's native kernels: `python -m engine.native.build [--force] [--out DIR]`.

All of src/**/*.c go into one shared library, _build/libamber_kernels-<hash>.<so|dylib|dll>, where
<hash> covers the sources (their paths under src/ and bytes) and the flags: a library built from
other sources is never loaded. src/ is laid out by architecture: generic/ (portable C, the scalar
reference kernels, the headers every file shares and the one dispatch table, kernel_table.h +
dispatch.c), x86/ (AVX2, AVX-VNNI, AVX-512 kernels), arm/ (NEON, dotprod, i8mm kernels and the
arm64 feature probe), ort/ (the ONNX Runtime ops' glue); each folder is on the include path, and
a file of another architecture compiles to nothing. No -march: the kernels pick their instruction
set at run time (target attributes + the dispatch table), so one build runs on every x86-64 CPU.
Without a C compiler this prints a note and exits 0 (Amber then uses ONNX Runtime's own ops; with
AMBER_REQUIRE_KERNELS=1 it exits 2); a compile error prints the compiler's message and exits 2.
`pip install .` / `pip wheel .` run the same compile into the wheel (setup.py's build_py hook).

`--target aarch64-linux` cross-compiles the same sources for arm64 Linux with aarch64-linux-gnu-gcc
into _build/aarch64-linux/libamber_kernels-<hash>-aarch64-linux.so (a folder of its own: a
bundle ships the one library of _build): the arm64 kernels pick NEON, dotprod or i8mm
at run time the same way (tests run them under qemu-aarch64).

`--target windows-x86_64` cross-compiles for 64-bit Windows with MinGW-w64's gcc
(x86_64-w64-mingw32-gcc) into _build/windows-x86_64/libamber_kernels-<hash>-windows-x86_64.dll:
the same x86 dispatch (__builtin_cpu_supports), exports by __declspec(dllexport) (amber_kernels.h),
only KERNEL32 and msvcrt imported (tests run it under wine).
"""
from __future__ import annotations

import argparse
import functools
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from engine import config

SRC_DIR = Path(__file__).resolve().parent / "src"
BUILD_DIR = Path(__file__).resolve().parent / "_build"
LIB_STEM = "libamber_kernels"
# Bumped when the way the library is built changes in a way the flags do not show.
BUILD_FORMAT = "1"
CFLAGS = ("-O3", "-std=c11", "-fPIC", "-shared", "-fvisibility=hidden", "-Wall")
COMPILE_TIMEOUT_S = 600
# Cross targets: the name `--target` takes -> the compiler that builds for it.
CROSS_COMPILERS = {"aarch64-linux": "aarch64-linux-gnu-gcc", "windows-x86_64": "x86_64-w64-mingw32-gcc"}
# Extra flags for MinGW-w64 (Windows x64). gcc there may spill AVX registers with aligned moves to a
# stack the Windows ABI aligns to 16 bytes only (gcc bug 54412): a fault on Windows. Today's build
# has no such move (tests check the DLL); the assembler option turns any that appears into an
# unaligned one. libgcc (the CPU probe behind __builtin_cpu_supports) goes into the DLL, so it
# needs no MinGW DLL next to it.
WINDOWS_FLAGS = ("-Wa,-muse-unaligned-vector-move", "-static-libgcc")


# "1": a missing C compiler is an error (exit 2, a failed wheel build) instead of a note: installers
# and release wheels must carry the kernels.
REQUIRE_ENV = config.REQUIRE_KERNELS


def kernels_required() -> bool:
    """AMBER_REQUIRE_KERNELS=1: building without a C compiler fails."""
    return config.settings().require_kernels


class BuildError(Exception):
    """The compiler ran and failed; the message is its output."""


def lib_suffix(target: str | None = None) -> str:
    """The shared-library suffix of this platform (of `target` when cross-compiling)."""
    if target is not None:
        return ".dll" if _is_windows(target) else ".so"
    if sys.platform == "win32":
        return ".dll"
    if sys.platform == "darwin":
        return ".dylib"
    return ".so"


def _is_windows(target: str | None) -> bool:
    return target.startswith("windows-") if target is not None else sys.platform == "win32"


def _link_flags(target: str | None = None) -> tuple[str, ...]:
    linux = target.endswith("-linux") if target is not None else sys.platform.startswith("linux")
    if linux:
        return ("-lm",)
    # Building on Windows itself: MinGW-w64's gcc too (build.py's flags are gcc's), the same flags.
    return WINDOWS_FLAGS if _is_windows(target) else ()


def _listing(src_dir: Path) -> list[tuple[str, os.stat_result]]:
    """(path relative to src_dir with '/', its stat) of every .c and .h file, sorted by that path.
    os.scandir, one stat a file: every session creation asks for the library's name."""
    found: list[tuple[str, os.stat_result]] = []
    pending = [(str(src_dir), "")]
    while pending:
        folder, prefix = pending.pop()
        try:
            entries = list(os.scandir(folder))
        except FileNotFoundError:
            continue
        for e in entries:
            if e.is_dir():
                pending.append((e.path, f"{prefix}{e.name}/"))
            elif e.name.endswith((".c", ".h")) and e.is_file():
                found.append((prefix + e.name, e.stat()))
    return sorted(found, key=lambda item: item[0])


def sources(src_dir: Path = SRC_DIR) -> list[Path]:
    """The C sources and headers that make up the library (src_dir and its folders), in a stable
    order."""
    return [src_dir / rel for rel, _ in _listing(src_dir)]


def c_sources(src_dir: Path = SRC_DIR) -> list[Path]:
    """The files the compiler is given (every .c of sources())."""
    return [p for p in sources(src_dir) if p.suffix == ".c"]


def include_dirs(src_dir: Path = SRC_DIR) -> list[Path]:
    """The folders that hold the headers (generic/, x86/, arm/, ort/), each one `-I` of the build."""
    return sorted({p.parent for p in sources(src_dir) if p.suffix == ".h"},
                  key=lambda d: d.relative_to(src_dir).as_posix())


def include_flags(src_dir: Path = SRC_DIR) -> list[str]:
    """`-I DIR` for each of include_dirs()."""
    return [f for d in include_dirs(src_dir) for f in ("-I", str(d))]


def source_hash(src_dir: Path = SRC_DIR, target: str | None = None) -> str:
    """16 hex digits over the sources' names and bytes, the flags and the platform (or target)."""
    # Keyed by the files' sizes and times, so asking again (every session creation) reads nothing.
    key = tuple((rel, st.st_mtime_ns, st.st_size) for rel, st in _listing(src_dir))
    return _hash_of(src_dir, key, target)


@functools.lru_cache(maxsize=8)
def _hash_of(src_dir: Path, key: tuple[tuple[str, int, int], ...], target: str | None) -> str:
    del key  # only the cache's key
    h = hashlib.sha256()
    h.update(f"{BUILD_FORMAT}|{' '.join(CFLAGS + _link_flags(target))}|{target or sys.platform}\n".encode())
    for p in sources(src_dir):
        h.update(p.relative_to(src_dir).as_posix().encode() + b"\0")
        h.update(p.read_bytes())
        h.update(b"\0")
    return h.hexdigest()[:16]


def library_name(src_dir: Path = SRC_DIR, target: str | None = None) -> str:
    """The file name the current sources build into (for `target`: its name is in it)."""
    tag = f"-{target}" if target is not None else ""
    return f"{LIB_STEM}-{source_hash(src_dir, target)}{tag}{lib_suffix(target)}"


def _library_pattern(target: str | None) -> re.Pattern[str]:
    """The names library_name gives for `target`, whatever the sources."""
    tag = re.escape(f"-{target}") if target is not None else ""
    return re.compile(f"{re.escape(LIB_STEM)}-[0-9a-f]{{16}}{tag}{re.escape(lib_suffix(target))}")


def find_compiler(target: str | None = None) -> str | None:
    """For a cross target its compiler from PATH; else $CC (a name on PATH or a path), else cc,
    gcc, clang from PATH; None when there is none. Raises KeyError for an unknown target."""
    if target is not None:
        return shutil.which(CROSS_COMPILERS[target])
    env_cc = os.environ.get("CC", "").strip()
    if env_cc:
        return shutil.which(env_cc)
    for name in ("cc", "gcc", "clang"):
        found = shutil.which(name)
        if found:
            return found
    return None


def build(out_dir: Path = BUILD_DIR, *, force: bool = False, src_dir: Path = SRC_DIR,
          compiler: str | None = None, target: str | None = None) -> Path | None:
    """Builds the library into out_dir unless an up-to-date one is there; its path, or None
    without a compiler. `target`: a key of CROSS_COMPILERS (None: this machine). Raises
    BuildError with the compiler's message when compiling fails."""
    lib = out_dir / library_name(src_dir, target)
    if lib.is_file() and not force:
        return lib
    cc = compiler or find_compiler(target)
    if cc is None:
        return None
    out_dir.mkdir(parents=True, exist_ok=True)
    # The compiler writes the library under its final name into a scratch folder (a DLL records
    # its own file name, which programs linked against it look for), then it moves into place.
    with tempfile.TemporaryDirectory(prefix=f".{LIB_STEM}-", dir=out_dir) as scratch:
        tmp = Path(scratch) / lib.name
        cmd = [cc, *CFLAGS, *include_flags(src_dir), "-o", str(tmp), *(str(p) for p in c_sources(src_dir)),
               *_link_flags(target)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S,
                                  check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise BuildError(f"{cc}: {exc}") from exc
        if proc.returncode != 0:
            raise BuildError((proc.stderr or proc.stdout).strip() or f"{cc} exited {proc.returncode}")
        os.chmod(tmp, 0o755)
        with open(tmp, "rb+") as f:   # the library's bytes on disk before the name points at them
            os.fsync(f.fileno())
        os.replace(tmp, lib)
    _remove_stale(out_dir, keep=lib, target=target)
    return lib


def _remove_stale(out_dir: Path, keep: Path, target: str | None = None) -> None:
    """Deletes libraries of older sources for the same target (best effort: a loaded DLL on
    Windows stays)."""
    pattern = _library_pattern(target)
    for p in out_dir.glob(f"{LIB_STEM}-*{lib_suffix(target)}"):
        if p != keep and pattern.fullmatch(p.name):
            try:
                p.unlink()
            except OSError:
                pass


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m engine.native.build", description=__doc__.splitlines()[0])
    ap.add_argument("--force", action="store_true", help="rebuild even when the library is up to date")
    ap.add_argument("--out", type=Path, help="output folder (default: engine/native/_build, for a target "
                    "engine/native/_build/<target>)")
    ap.add_argument("--src", type=Path, default=SRC_DIR, help=argparse.SUPPRESS)   # tests: other sources
    ap.add_argument("--target", choices=sorted(CROSS_COMPILERS),
                    help="cross-compile for this platform (default: this machine)")
    args = ap.parse_args(argv)
    out = args.out or (BUILD_DIR / args.target if args.target else BUILD_DIR)
    lib = out / library_name(args.src, args.target)
    if lib.is_file() and not args.force:
        print(f"native kernels up to date: {lib}")
        return 0
    try:
        built = build(out, force=args.force, src_dir=args.src, target=args.target)
    except BuildError as exc:
        print(f"native kernels: compile failed:\n{exc}", file=sys.stderr)
        return 2
    if built is None:
        if args.target is not None:
            print(f"native kernels: {CROSS_COMPILERS[args.target]} not found "
                  "(packaging/linux/install-sysdeps.sh installs it)", file=sys.stderr)
            return 2
        if kernels_required():
            print(f"native kernels: no C compiler found (set CC or install gcc) and {REQUIRE_ENV}=1",
                  file=sys.stderr)
            return 2
        print("native kernels: no C compiler found (set CC or install gcc); Amber uses ONNX Runtime's ops")
        return 0
    print(f"native kernels built: {built}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
