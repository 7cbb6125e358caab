"""pyproject.toml's `cuda` extra is the one list of NVIDIA wheels: a source install gets it with
`pip install "amber-chat[cuda]"`, a GPU build of the installer bundles it (packaging/cuda_wheels.py,
read by amber.spec). Checked against the installed onnxruntime-gpu's own metadata and its
`preload_dlls` layout, so a new ORT release that needs other libraries fails here."""
from __future__ import annotations

import importlib.util
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import onnxruntime as ort
import pytest
from packaging.requirements import Requirement

from engine.base import cuda_libs

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("cuda_wheels", REPO / "packaging" / "cuda_wheels.py")
cuda_wheels = importlib.util.module_from_spec(_spec)
sys.modules["cuda_wheels"] = cuda_wheels
_spec.loader.exec_module(cuda_wheels)

LINUX = {"sys_platform": "linux", "platform_machine": "x86_64"}
WINDOWS = {"sys_platform": "win32", "platform_machine": "AMD64"}
NOT_CUDA = [{"sys_platform": "darwin", "platform_machine": "arm64"},
            {"sys_platform": "darwin", "platform_machine": "x86_64"},
            {"sys_platform": "linux", "platform_machine": "aarch64"}]


def _extra() -> list[Requirement]:
    with (REPO / "pyproject.toml").open("rb") as f:
        return [Requirement(r) for r in tomllib.load(f)["project"]["optional-dependencies"]["cuda"]]


def test_the_installer_bundles_exactly_the_extra():
    assert [str(r) for r in cuda_wheels.pins()] == [str(r) for r in _extra()]
    # no second list beside it: CI's GPU jobs install the extra, nothing else names wheel versions
    assert not (REPO / "packaging" / "requirements-gpu.txt").exists()
    workflow = (REPO / ".github" / "workflows" / "installers.yml").read_text()
    assert "extras=package,cuda" in workflow and "nvidia-" not in workflow
    assert "cuda_wheels.pins()" in (REPO / "packaging" / "amber.spec").read_text()


def test_every_wheel_is_pinned_for_linux_x86_64_and_windows_only():
    for r in _extra():
        assert r.name.startswith("nvidia-") and str(r.specifier).startswith("=="), r
        assert r.marker is not None and r.marker.evaluate(LINUX) and r.marker.evaluate(WINDOWS), r
        for env in NOT_CUDA:
            assert not r.marker.evaluate(env), (r, env)


def test_the_extra_satisfies_onnxruntime_gpus_own_cuda_and_cudnn_extras():
    pinned = {r.name: r for r in _extra()}
    wanted = [Requirement(line) for line in metadata.requires("onnxruntime-gpu") or []]
    ort_cuda = [r for r in wanted if r.marker is not None
                and (r.marker.evaluate({"extra": "cuda"}) or r.marker.evaluate({"extra": "cudnn"}))]
    assert ort_cuda, "onnxruntime-gpu lists no [cuda]/[cudnn] extras: the check below would be empty"
    for r in ort_cuda:
        assert r.name in pinned, f"onnxruntime-gpu needs {r}; the cuda extra lacks it"
        version = str(pinned[r.name].specifier).removeprefix("==")
        assert r.specifier.contains(version), f"{pinned[r.name]} does not satisfy onnxruntime-gpu's {r}"
    # its CUDA provider links cuBLAS, which ORT's extras leave out
    assert "nvidia-cublas" in pinned


@pytest.mark.parametrize("windows", [False, True])
def test_the_preload_guard_looks_where_preload_dlls_loads_from(windows):
    """cuda_libs.wheels_installed checks the folders ORT 1.31's preload_dlls reads (CUDA 13's
    consolidated nvidia/cu13 wheel and nvidia/cudnn), on Linux and Windows."""
    folders = {"/".join(p[:2]) for p in ort._get_nvidia_dll_paths(windows, True, True)}
    assert folders == set(cuda_libs.WHEEL_FOLDERS)
