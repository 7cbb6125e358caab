"""The Linux packages, built and tested end to end (`make package` + `make package-test`).

Slow (a PyInstaller build, ~2-4 min on 2 cores) and needs dpkg-deb: runs only when
AMBER_PACKAGE_TEST=1. AMBER_PACKAGE_TEST_NO_BUILD=1 tests the packages already in dist/."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("AMBER_PACKAGE_TEST") != "1", reason="set AMBER_PACKAGE_TEST=1"),
    pytest.mark.skipif(not sys.platform.startswith("linux") or shutil.which("dpkg-deb") is None,
                       reason="builds the Debian package"),
]


def _run(cmd: list[str], timeout: int) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("AMBER_HOME", "QT_QPA_PLATFORM")}
    env["PYTHON"] = sys.executable
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-6000:]}"
    return proc.stdout


@pytest.fixture(scope="module")
def built() -> None:
    if os.environ.get("AMBER_PACKAGE_TEST_NO_BUILD") != "1":
        _run(["bash", "packaging/build.sh"], timeout=1800)


def test_installed_package_passes_its_self_test(built: None) -> None:
    out = _run(["bash", "packaging/linux/package-test.sh"], timeout=900)
    assert "package test PASSED" in out
    assert "(bundled," in out                     # the model inside the package, no download
    m = json.loads((REPO / "build" / "package" / "measurements.json").read_text())
    assert m["deb_bytes"] < 250 * 2**20           # the default download stays small (no CUDA)
    assert m["offscreen"]["warm_window_median_s"] < 10
