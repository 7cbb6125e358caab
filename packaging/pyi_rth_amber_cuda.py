"""PyInstaller runtime hook, GPU builds only: the CUDA and cuDNN libraries bundled in `<bundle>/cuda`
are loaded right after `onnxruntime` is first imported (in the model-loading worker, so the window
does not wait for them), by the one function a source install uses too:
engine.base.cuda_libs.preload (a no-op with AMBER_NO_CUDA_PRELOAD set; it never raises)."""
from __future__ import annotations

import importlib.abc
import os
import sys

_CUDA_DIR = os.path.join(getattr(sys, "_MEIPASS", ""), "cuda")


class _PreloadAfterImport(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):   # type: ignore[no-untyped-def]
        if fullname != "onnxruntime":
            return None
        sys.meta_path.remove(self)
        import importlib.util

        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_preload(module):   # type: ignore[no-untyped-def]
            exec_module(module)
            from engine.base import cuda_libs

            outcome = cuda_libs.preload(module, directory=_CUDA_DIR)
            if outcome.startswith("failed"):   # the CPU provider still works; the engine reports why
                print(f"amber: could not preload the bundled CUDA libraries: {outcome}", file=sys.stderr)

        spec.loader.exec_module = exec_then_preload   # type: ignore[method-assign]
        return spec


if os.path.isdir(_CUDA_DIR):
    sys.meta_path.insert(0, _PreloadAfterImport())
