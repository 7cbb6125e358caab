"""The GPU build's start-up hook (packaging/pyi_rth_amber_cuda.py), run as PyInstaller runs it: in a
fresh interpreter, before anything imports onnxruntime, with `sys._MEIPASS` set to a bundle folder.
The real onnxruntime's import then calls engine.base.cuda_libs.preload on `<bundle>/cuda` (its
answer is kept: a second call returns it), and AMBER_NO_CUDA_PRELOAD turns it off."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
HOOK = REPO / "packaging" / "pyi_rth_amber_cuda.py"

pytestmark = pytest.mark.skipif(sys.platform not in ("linux", "win32"), reason="no CUDA preload on this platform")

PROGRAM = f"""
import runpy, sys
sys._MEIPASS = sys.argv[1]
runpy.run_path({str(HOOK)!r})
assert "onnxruntime" not in sys.modules
import onnxruntime
from engine.base import cuda_libs
print("outcome:", cuda_libs.preload(onnxruntime))
"""


def _run(bundle: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("AMBER_")} | env
    return subprocess.run([sys.executable, "-c", PROGRAM, str(bundle)], cwd=REPO, env=environ,
                          capture_output=True, text=True, timeout=120)


def test_the_hook_preloads_the_bundled_folder_once_onnxruntime_is_imported(tmp_path):
    (tmp_path / "cuda").mkdir()          # the bundle's folder, empty here: nothing to load from it
    proc = _run(tmp_path)
    assert proc.returncode == 0, proc.stderr
    outcome = proc.stdout.split("outcome: ", 1)[1].strip()
    # preload_dlls ran on the folder: loaded (the CUDA libraries are on this system's path) or
    # failed naming the library it could not load, in one line on stderr; never a traceback
    assert outcome == "loaded" or outcome.startswith("failed: Failed to load"), outcome
    if outcome != "loaded":
        assert f"amber: could not preload the bundled CUDA libraries: {outcome}" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_amber_no_cuda_preload_turns_the_hook_off(tmp_path):
    (tmp_path / "cuda").mkdir()
    proc = _run(tmp_path, AMBER_NO_CUDA_PRELOAD="1")
    assert proc.returncode == 0, proc.stderr
    assert "outcome: off" in proc.stdout and "could not preload" not in proc.stderr


def test_without_a_bundled_folder_the_hook_does_nothing(tmp_path):
    proc = _run(tmp_path)                # a CPU build: no cuda/ folder
    assert proc.returncode == 0, proc.stderr
    assert "outcome: not here" in proc.stdout
