"""PyInstaller runtime hook, GPU builds only: the CUDA and cuDNN libraries bundled in `<bundle>/cuda`
are loaded with ONNX Runtime's `preload_dlls` right after `onnxruntime` is first imported (in the
model-loading worker, so the window does not wait for it)."""
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
            try:
                module.preload_dlls(directory=_CUDA_DIR)
            except Exception as exc:   # noqa: BLE001 - the CPU provider still works; engine reports why
                print(f"amber: could not preload the bundled CUDA libraries: {exc}", file=sys.stderr)

        spec.loader.exec_module = exec_then_preload   # type: ignore[method-assign]
        return spec


if os.path.isdir(_CUDA_DIR) and not os.environ.get("AMBER_NO_CUDA_PRELOAD"):
    sys.meta_path.insert(0, _PreloadAfterImport())
