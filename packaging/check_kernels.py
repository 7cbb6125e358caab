"""Fails an installer build whose platform's native kernel library is missing or does not load:
`python packaging/check_kernels.py [--build-dir DIR]`.

packaging/build.sh runs it after `python -m engine.native.build` and before PyInstaller, and
amber.spec asks it again for the library it bundles: an installer always ships this platform's
kernels (a development checkout without a C compiler still runs, on ONNX Runtime's own ops).
Exit 0 with the library's name, or 1 with one line saying what is missing and how to build it.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from engine.native import build as native_build  # noqa: E402  (the checkout's engine)


def missing(build_dir: Path = native_build.BUILD_DIR, src_dir: Path = native_build.SRC_DIR) -> str | None:
    """Why the library of these sources for this platform cannot be shipped from build_dir, or
    None when it is there and loads (its C API and ONNX Runtime's entry point)."""
    lib = build_dir / native_build.library_name(src_dir)
    if not lib.is_file():
        return (f"native kernels missing for {sys.platform}: {lib.name} is not in {build_dir} "
                f"(build it with a C compiler: python -m engine.native.build)")
    from engine.native import open_library

    try:
        handle = open_library(lib)
        handle.amber_isa()
        handle.RegisterCustomOps  # noqa: B018 - the symbol ONNX Runtime loads it by
    except (OSError, AttributeError) as exc:
        return f"native kernels do not load: {lib.name}: {str(exc).splitlines()[0] if str(exc) else exc!r}"
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="packaging/check_kernels.py", description=__doc__.splitlines()[0])
    ap.add_argument("--build-dir", type=Path, default=native_build.BUILD_DIR, help="where the library is")
    ap.add_argument("--src", type=Path, default=native_build.SRC_DIR, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    why = missing(args.build_dir, args.src)
    if why is not None:
        print(f"installer build: {why}", file=sys.stderr)
        return 1
    print(f"native kernels: {native_build.library_name(args.src)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
