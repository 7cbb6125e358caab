"""Compiles Amber's native kernels: `python -m engine.native.build [--force] [--out DIR]`.

All of src/*.c go into one shared library, _build/libamber_kernels-<hash>.<so|dylib|dll>, where
<hash> covers the sources and the flags: a library built from other sources is never loaded. No
-march: the kernels pick their instruction set at run time (target attributes + dispatch.c), so
one build runs on every x86-64 CPU. Without a C compiler this prints a note and exits 0 (Amber
then uses ONNX Runtime's own ops); a compile error prints the compiler's message and exits 2.
"""
from __future__ import annotations

import argparse
import functools
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SRC_DIR = Path(__file__).resolve().parent / "src"
BUILD_DIR = Path(__file__).resolve().parent / "_build"
LIB_STEM = "libamber_kernels"
# Bumped when the way the library is built changes in a way the flags do not show.
BUILD_FORMAT = "1"
CFLAGS = ("-O3", "-std=c11", "-fPIC", "-shared", "-fvisibility=hidden", "-Wall")
COMPILE_TIMEOUT_S = 600


class BuildError(Exception):
    """The compiler ran and failed; the message is its output."""


def lib_suffix() -> str:
    """The shared-library suffix of this platform."""
    if sys.platform == "win32":
        return ".dll"
    if sys.platform == "darwin":
        return ".dylib"
    return ".so"


def _link_flags() -> tuple[str, ...]:
    return ("-lm",) if sys.platform.startswith("linux") else ()


def sources(src_dir: Path = SRC_DIR) -> list[Path]:
    """The C sources and headers that make up the library, in a stable order."""
    return sorted(p for p in src_dir.iterdir() if p.suffix in (".c", ".h") and p.is_file())


def source_hash(src_dir: Path = SRC_DIR) -> str:
    """16 hex digits over the sources' names and bytes, the flags and the platform."""
    # Keyed by the files' sizes and times, so asking again (every session creation) reads nothing.
    key = tuple((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in sources(src_dir))
    return _hash_of(src_dir, key)


@functools.lru_cache(maxsize=8)
def _hash_of(src_dir: Path, key: tuple[tuple[str, int, int], ...]) -> str:
    del key  # only the cache's key
    h = hashlib.sha256()
    h.update(f"{BUILD_FORMAT}|{' '.join(CFLAGS + _link_flags())}|{sys.platform}\n".encode())
    for p in sources(src_dir):
        h.update(p.name.encode() + b"\0")
        h.update(p.read_bytes())
        h.update(b"\0")
    return h.hexdigest()[:16]


def library_name(src_dir: Path = SRC_DIR) -> str:
    """The file name the current sources build into."""
    return f"{LIB_STEM}-{source_hash(src_dir)}{lib_suffix()}"


def find_compiler() -> str | None:
    """$CC (a name on PATH or a path), else cc, gcc, clang from PATH; None when there is none."""
    env_cc = os.environ.get("CC", "").strip()
    if env_cc:
        return shutil.which(env_cc)
    for name in ("cc", "gcc", "clang"):
        found = shutil.which(name)
        if found:
            return found
    return None


def build(out_dir: Path = BUILD_DIR, *, force: bool = False, src_dir: Path = SRC_DIR,
          compiler: str | None = None) -> Path | None:
    """Builds the library into out_dir unless an up-to-date one is there; its path, or None
    without a compiler. Raises BuildError with the compiler's message when compiling fails."""
    target = out_dir / library_name(src_dir)
    if target.is_file() and not force:
        return target
    cc = compiler or find_compiler()
    if cc is None:
        return None
    out_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{LIB_STEM}-", suffix=lib_suffix(), dir=out_dir)
    os.close(fd)
    tmp = Path(tmp_name)
    cmd = [cc, *CFLAGS, "-o", str(tmp), *(str(p) for p in sources(src_dir) if p.suffix == ".c"),
           *_link_flags()]
    try:
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S,
                                  check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise BuildError(f"{cc}: {exc}") from exc
        if proc.returncode != 0:
            raise BuildError((proc.stderr or proc.stdout).strip() or f"{cc} exited {proc.returncode}")
        os.chmod(tmp, 0o755)   # mkstemp makes it 0600
        with open(tmp, "rb+") as f:   # the library's bytes on disk before the name points at them
            os.fsync(f.fileno())
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    _remove_stale(out_dir, keep=target)
    return target


def _remove_stale(out_dir: Path, keep: Path) -> None:
    """Deletes libraries of older sources (best effort: a loaded DLL on Windows stays)."""
    for p in out_dir.glob(f"{LIB_STEM}-*{lib_suffix()}"):
        if p != keep:
            try:
                p.unlink()
            except OSError:
                pass


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m engine.native.build", description=__doc__.splitlines()[0])
    ap.add_argument("--force", action="store_true", help="rebuild even when the library is up to date")
    ap.add_argument("--out", type=Path, default=BUILD_DIR, help="output folder (default: engine/native/_build)")
    ap.add_argument("--src", type=Path, default=SRC_DIR, help=argparse.SUPPRESS)   # tests: other sources
    args = ap.parse_args(argv)
    target = args.out / library_name(args.src)
    if target.is_file() and not args.force:
        print(f"native kernels up to date: {target}")
        return 0
    try:
        built = build(args.out, force=args.force, src_dir=args.src)
    except BuildError as exc:
        print(f"native kernels: compile failed:\n{exc}", file=sys.stderr)
        return 2
    if built is None:
        print("native kernels: no C compiler found (set CC or install gcc); Amber uses ONNX Runtime's ops")
        return 0
    print(f"native kernels built: {built}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
