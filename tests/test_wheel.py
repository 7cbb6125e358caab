"""`pip wheel .` builds Amber's native kernel library into the wheel (setup.py's build_py hook), and
the library in the unpacked wheel loads: engine.native reports the kernels available from there.

The build runs without build isolation, in a venv holding exactly the setuptools that
pyproject.toml's [build-system] pins (packaging/wheel_backend.py: `make install-wheel-backend` makes
it once, from PyPI), so the test builds with the pinned backend and no network. `make test` sets
AMBER_WHEEL_TEST=required: there a missing backend venv fails instead of skipping."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from engine.native import build as native_build

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packaging"))
import wheel_backend  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow

# What a wheel is built from (a copy: the build writes build/ and *.egg-info beside setup.py).
TREE = ("pyproject.toml", "setup.py", "README.md", "app", "engine")


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=1200, check=False, **kw)


def _copy_tree(dst: Path) -> Path:
    dst.mkdir(parents=True)
    for name in TREE:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dst / name, ignore=shutil.ignore_patterns("__pycache__", "_build", "*.egg-info"))
        else:
            shutil.copy2(src, dst / name)
    return dst


@pytest.fixture(scope="module")
def backend_python() -> str:
    """The venv with pyproject.toml's pinned build requirements."""
    python = wheel_backend.ready()
    if python is None:
        why = f"no build-backend venv for {wheel_backend.requires()}: run `make install-wheel-backend`"
        if os.environ.get("AMBER_WHEEL_TEST") == "required":
            pytest.fail(why)
        pytest.skip(why)
    return str(python)


def _wheel(py: str, src: Path, out: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return _run([py, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation",
                 "--disable-pip-version-check", "-v", "-w", str(out)], cwd=src, env={**os.environ, **env})


def test_the_wheel_carries_the_kernel_library_and_it_loads(backend_python, tmp_path):
    if native_build.find_compiler() is None:
        pytest.skip("no C compiler here (the next test covers that case)")
    src = _copy_tree(tmp_path / "src")   # without engine/native/_build: the wheel's build compiles
    proc = _wheel(backend_python, src, tmp_path / "wheels")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (whl,) = (tmp_path / "wheels").glob("amber_chat-*.whl")
    name = native_build.library_name()
    with zipfile.ZipFile(whl) as z:
        names = set(z.namelist())
        assert f"engine/native/_build/{name}" in names, sorted(n for n in names if "native" in n)
        assert "engine/native/src/generic/dispatch.c" in names and "engine/native/src/ort/ort_abi.h" in names
        z.extractall(tmp_path / "unpacked")
    # The unpacked wheel alone on the path (run from elsewhere, so this checkout's engine is not found).
    probe = ("import engine, engine.native as n; lib = n.library_path(); "
             "print(engine.__file__); print(lib); print(n.available(), n.isa())")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "unpacked")}
    env.pop("AMBER_KERNELS", None)
    run = _run([sys.executable, "-c", probe], cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stderr
    where, lib, state = run.stdout.splitlines()[-3:]
    assert Path(where).is_relative_to(tmp_path / "unpacked")
    assert Path(lib) == tmp_path / "unpacked" / "engine" / "native" / "_build" / name
    assert state.split()[0] == "True" and state.split()[1] in ("avx512vnni", "avxvnni", "avx2", "scalar",
                                                                 "i8mm", "dotprod", "neon")


def test_without_a_compiler_the_wheel_is_built_with_a_note_unless_kernels_are_required(backend_python, tmp_path):
    src = _copy_tree(tmp_path / "src")
    no_cc = {"CC": "/nonexistent/amber-cc"}   # find_compiler takes $CC alone when it is set
    proc = _wheel(backend_python, src, tmp_path / "plain", **no_cc)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (whl,) = (tmp_path / "plain").glob("amber_chat-*.whl")
    with zipfile.ZipFile(whl) as z:
        assert not [n for n in z.namelist() if n.startswith("engine/native/_build/")]
    assert "no C compiler found" in proc.stdout + proc.stderr
    shutil.rmtree(src / "build", ignore_errors=True)
    proc = _wheel(backend_python, src, tmp_path / "required", AMBER_REQUIRE_KERNELS="1", **no_cc)
    assert proc.returncode != 0
    assert "AMBER_REQUIRE_KERNELS=1" in proc.stdout + proc.stderr
    assert not list((tmp_path / "required").glob("*.whl"))
