"""The build hook of Amber's wheel: `pip install .` and `pip wheel .` compile the native kernel
library (engine/native/src) into the wheel's engine/native/_build, with engine/native/build.py's
own compile (the same flags, the same hashed name the loader looks for).

Everything else about the package is in pyproject.toml. An editable install (`pip install -e .`,
what `make` does) keeps the in-tree build of `python -m engine.native.build` instead. Without a C
compiler the wheel is built without the library and a note says so (Amber then uses ONNX
Runtime's own ops), unless AMBER_REQUIRE_KERNELS=1: then the build fails.
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
# engine/native/build.py from this source tree (it and engine.config need the stdlib only)
sys.path.insert(0, str(ROOT))
from engine.native import build as nb  # noqa: E402


class BuildPyWithKernels(build_py):
    """build_py, then the kernel library into build_lib/engine/native/_build."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return   # the in-tree engine/native/_build is the one an editable install loads
        out = Path(self.build_lib) / "engine" / "native" / "_build"
        lib = out / nb.library_name()
        in_tree = nb.BUILD_DIR / lib.name
        if in_tree.is_file() and not lib.is_file():   # built already from these very sources
            out.mkdir(parents=True, exist_ok=True)
            shutil.copy2(in_tree, lib)
        try:
            built = nb.build(out)
        except nb.BuildError as exc:
            raise SystemExit(f"native kernels: compile failed:\n{exc}") from exc
        if built is None:
            if nb.kernels_required():
                raise SystemExit(f"native kernels: no C compiler found and {nb.REQUIRE_ENV}=1")
            print("native kernels: no C compiler found (set CC or install gcc); the wheel has no kernel "
                  "library and Amber uses ONNX Runtime's ops", file=sys.stderr)
            return
        print(f"native kernels built into the wheel: {built.name}")


setup(cmdclass={"build_py": BuildPyWithKernels})
