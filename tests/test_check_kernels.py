"""packaging/check_kernels.py: an installer build fails, with one line, when this platform's kernel
library is missing from the build folder or does not load; it passes with the real library."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engine.native import build as native_build

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "packaging" / "check_kernels.py"


def _check(build_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), "--build-dir", str(build_dir)], capture_output=True,
                          text=True, timeout=120, check=False, cwd=ROOT)


@pytest.fixture(scope="module")
def built_library() -> Path:
    lib = native_build.build()   # the checkout's library (a no-op when up to date)
    if lib is None:
        pytest.skip("no C compiler here to build the library the check should accept")
    return lib


def test_an_empty_build_folder_fails_in_one_line(tmp_path):
    proc = _check(tmp_path)
    assert proc.returncode == 1
    assert proc.stdout == "" and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "native kernels missing" in proc.stderr and native_build.library_name() in proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_library_of_other_sources_does_not_count(built_library, tmp_path):
    """A stale library (an older hash) is not this build's kernels."""
    shutil.copy2(built_library, tmp_path / f"{native_build.LIB_STEM}-0123456789abcdef{native_build.lib_suffix()}")
    proc = _check(tmp_path)
    assert proc.returncode == 1 and "native kernels missing" in proc.stderr


def test_a_file_that_does_not_load_fails_in_one_line(tmp_path):
    (tmp_path / native_build.library_name()).write_bytes(b"not a shared library\n" * 64)
    proc = _check(tmp_path)
    assert proc.returncode == 1
    assert len(proc.stderr.strip().splitlines()) == 1 and "do not load" in proc.stderr, proc.stderr


def test_the_built_library_passes(built_library, tmp_path):
    shutil.copy2(built_library, tmp_path / built_library.name)
    proc = _check(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert built_library.name in proc.stdout


def test_build_sh_requires_the_kernels_without_a_compiler(tmp_path):
    """What packaging/build.sh runs first: with AMBER_REQUIRE_KERNELS=1 a missing C compiler is an
    error (exit 2, one line), not the development note (exit 0)."""
    env = {**os.environ, "CC": "/nonexistent/amber-cc"}   # $CC alone is looked at when set
    cmd = [sys.executable, "-m", "engine.native.build", "--out", str(tmp_path / "out")]
    note = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False, cwd=ROOT, env=env)
    assert note.returncode == 0 and "no C compiler" in note.stdout
    env["AMBER_REQUIRE_KERNELS"] = "1"
    required = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False, cwd=ROOT, env=env)
    assert required.returncode == 2
    assert len(required.stderr.strip().splitlines()) == 1 and "AMBER_REQUIRE_KERNELS=1" in required.stderr
    script = (ROOT / "packaging" / "build.sh").read_text()
    assert 'AMBER_REQUIRE_KERNELS=1 "$PYTHON" -m engine.native.build' in script
    assert script.index("packaging/check_kernels.py") < script.index("-m PyInstaller")
