"""The CUDA and cuDNN libraries from NVIDIA's wheels, loaded before ONNX Runtime's CUDA provider.

onnxruntime-gpu links CUDA 13 and cuDNN 9 but ships neither. A GPU build of the installer bundles
them (packaging/amber.spec, `<bundle>/cuda`); a source install gets them from pyproject.toml's
`cuda` extra (`pip install "amber-chat[cuda]"`, `make run GPU=1`). Either way they are not on the
loader's path, so ONNX Runtime's `preload_dlls` loads them first. `preload` is that one call, for
the installer's start-up hook (packaging/pyi_rth_amber_cuda.py) and the runtime
(engine/runtime/providers.py) alike: a no-op without the libraries or with AMBER_NO_CUDA_PRELOAD
set, at most once per process, and it never raises.
"""
from __future__ import annotations

import contextlib
import io
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

from ..config import settings

EXTRA = "cuda"
# What a source install runs in its venv (or `make run GPU=1`): pip adds the extra's wheels to the
# installed amber-chat (checked with pip's dry run: exactly the seven pinned wheels).
INSTALL = 'pip install "amber-chat[cuda]"'
# What `preload_dlls` finds in site-packages: CUDA 13's consolidated wheels and cuDNN's own.
WHEEL_FOLDERS = ("nvidia/cu13", "nvidia/cudnn")

_outcome: str | None = None


def wheels_installed(site_packages: Path) -> bool:
    """The NVIDIA wheels of the `cuda` extra are installed in `site_packages` (ONNX Runtime's)."""
    return all((site_packages / folder).is_dir() for folder in WHEEL_FOLDERS)


def preload(ort: ModuleType, directory: str | None = None, env: Mapping[str, str] | None = None) -> str:
    """Loads the CUDA and cuDNN libraries through `ort.preload_dlls`: from `directory` (an
    installed build's bundled copies) or, when None, from the NVIDIA wheels beside `ort`.

    Returns what happened, in words: "off" (AMBER_NO_CUDA_PRELOAD), "not here" (no CUDA on this
    platform or ORT build, or no libraries to load), "loaded", or "failed: <first line>". Only the
    first call in a process loads anything; later ones return the first one's answer."""
    global _outcome
    if settings(env).no_cuda_preload:
        return "off"
    if _outcome is not None:
        return _outcome
    _outcome = _preload(ort, directory)
    return _outcome


def _preload(ort: ModuleType, directory: str | None) -> str:
    if sys.platform not in ("linux", "win32") or not hasattr(ort, "preload_dlls"):
        return "not here"
    try:
        if directory is not None:
            present = Path(directory).is_dir()
        else:   # the site-packages folder onnxruntime is installed in
            present = wheels_installed(Path(str(ort.__file__)).parent.parent)
        if not present:
            return "not here"
        printed = io.StringIO()
        # preload_dlls prints its warnings on stdout, which is the CLI's output: kept, not printed
        with contextlib.redirect_stdout(printed):
            ort.preload_dlls(cuda=True, cudnn=True, msvc=sys.platform == "win32",
                             directory=directory if directory is not None else "")
    except Exception as exc:  # noqa: BLE001 - the CPU provider still runs; the session reports why
        return f"failed: {_first_line(str(exc)) or type(exc).__name__}"
    failures = [line for line in printed.getvalue().splitlines() if line.startswith("Failed to load")]
    return f"failed: {_first_line(failures[0])}" if failures else "loaded"


def _first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0][:300]


def forget() -> None:
    """Tests: the next `preload` call runs again."""
    global _outcome
    _outcome = None


def unused_gpu_note(fallback: str | None, gpu: str) -> str | None:
    """One line for the command line when a model runs on the CPU although an NVIDIA GPU is here
    (`gpu`: engine.base.cuda_probe.gpu_presence), naming what to install; None when there is
    nothing to say (no GPU, or no GPU provider failed)."""
    if not fallback or gpu == "none":
        return None
    driver = "NVIDIA's driver (580 or newer)"
    lower = fallback.lower()
    if gpu == "no-driver":
        todo = f"install {driver} and the CUDA libraries: {INSTALL}"
    elif "driver" in lower or "insufficient" in lower:
        todo = f"install or update {driver}"
    else:
        todo = f"install the CUDA libraries: {INSTALL} in Amber's Python environment (or make run GPU=1)"
    return f"an NVIDIA GPU is here but not used ({fallback}); {todo}"
