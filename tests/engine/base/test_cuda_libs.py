"""engine.base.cuda_libs.preload: ONNX Runtime's preload_dlls, called where the `cuda` extra's
NVIDIA wheels (or an installed build's bundled copies) are there, never otherwise, never raising,
and not at all with AMBER_NO_CUDA_PRELOAD. The ORT modules here are real module objects standing in
for onnxruntime, whose preload_dlls records its calls (no CUDA library is loaded)."""
from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from pathlib import Path

import onnxruntime
import pytest

from engine.base import cuda_libs

pytestmark = pytest.mark.skipif(sys.platform not in ("linux", "win32"), reason="no CUDA on this platform")


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    cuda_libs.forget()
    yield
    cuda_libs.forget()


def _ort(site: Path, calls: list[dict], *, prints: str = "", raises: Exception | None = None) -> types.ModuleType:
    """A module laid out like onnxruntime in `site` (site/onnxruntime/__init__.py)."""
    mod = types.ModuleType("onnxruntime")
    (site / "onnxruntime").mkdir(parents=True, exist_ok=True)
    mod.__file__ = str(site / "onnxruntime" / "__init__.py")

    def preload_dlls(cuda: bool = True, cudnn: bool = True, msvc: bool = True, directory: str | None = None) -> None:
        calls.append({"cuda": cuda, "cudnn": cudnn, "msvc": msvc, "directory": directory})
        if prints:
            print(prints)
        if raises is not None:
            raise raises

    mod.preload_dlls = preload_dlls   # type: ignore[attr-defined]
    return mod


def _wheels(site: Path) -> None:
    for folder in cuda_libs.WHEEL_FOLDERS:
        (site / folder / "lib").mkdir(parents=True)


def test_without_the_nvidia_wheels_nothing_is_called(tmp_path):
    calls: list[dict] = []
    assert cuda_libs.preload(_ort(tmp_path, calls), env={}) == "not here"
    assert calls == []


def test_the_installed_onnxruntime_here_has_no_wheels_beside_it():
    """This checkout's venv has no `cuda` extra: a no-op (a machine with it would load them)."""
    site = Path(onnxruntime.__file__).parent.parent
    if cuda_libs.wheels_installed(site):
        pytest.skip("the cuda extra is installed here")
    assert cuda_libs.preload(onnxruntime, env={}) == "not here"


def test_with_the_wheels_preload_dlls_loads_them_once(tmp_path, capsys):
    calls: list[dict] = []
    _wheels(tmp_path)
    ort = _ort(tmp_path, calls, prints="a note from ORT")
    assert cuda_libs.wheels_installed(tmp_path)
    assert cuda_libs.preload(ort, env={}) == "loaded"
    assert cuda_libs.preload(ort, env={}) == "loaded"
    assert calls == [{"cuda": True, "cudnn": True, "msvc": sys.platform == "win32", "directory": ""}]
    assert "a note from ORT" not in capsys.readouterr().out    # stdout is the CLI's output


def test_an_installed_builds_folder_is_passed_on(tmp_path):
    calls: list[dict] = []
    bundle = tmp_path / "bundle" / "cuda"
    bundle.mkdir(parents=True)
    assert cuda_libs.preload(_ort(tmp_path / "site", calls), directory=str(bundle), env={}) == "loaded"
    assert calls[0]["directory"] == str(bundle)


def test_a_missing_bundle_folder_is_a_no_op(tmp_path):
    calls: list[dict] = []
    assert cuda_libs.preload(_ort(tmp_path, calls), directory=str(tmp_path / "absent"), env={}) == "not here"
    assert calls == []


def test_failures_are_words_never_exceptions(tmp_path):
    _wheels(tmp_path)
    calls: list[dict] = []
    said = cuda_libs.preload(_ort(tmp_path, calls, raises=RuntimeError("Invalid parameter\nmore")), env={})
    assert said == "failed: Invalid parameter"
    cuda_libs.forget()
    printed = "Failed to load /x/libcublasLt.so.13: cannot open shared object file\nPlease follow ..."
    said = cuda_libs.preload(_ort(tmp_path, calls, prints=printed), env={})
    assert said == "failed: Failed to load /x/libcublasLt.so.13: cannot open shared object file"


@pytest.mark.parametrize("value", ["1", "yes"])
def test_amber_no_cuda_preload_turns_it_off(tmp_path, value):
    _wheels(tmp_path)
    calls: list[dict] = []
    assert cuda_libs.preload(_ort(tmp_path, calls), env={"AMBER_NO_CUDA_PRELOAD": value}) == "off"
    assert calls == []
    assert cuda_libs.preload(_ort(tmp_path, calls), env={"AMBER_NO_CUDA_PRELOAD": "0"}) == "loaded"


def test_an_ort_without_preload_dlls_is_left_alone(tmp_path):
    _wheels(tmp_path)
    mod = types.ModuleType("onnxruntime")
    mod.__file__ = str(tmp_path / "onnxruntime" / "__init__.py")
    assert cuda_libs.preload(mod, env={}) == "not here"


def test_the_command_lines_note_names_what_to_install():
    missing = "CUDA failed: libcublasLt.so.13: cannot open shared object file: No such file or directory"
    assert cuda_libs.unused_gpu_note(missing, "none") is None            # no GPU: nothing to say
    assert cuda_libs.unused_gpu_note(None, "driver") is None             # CUDA runs, or CPU was chosen
    note = cuda_libs.unused_gpu_note(missing, "driver")
    assert note is not None and missing in note and 'pip install "amber-chat[cuda]"' in note
    note = cuda_libs.unused_gpu_note(missing, "no-driver")
    assert note is not None and "driver (580 or newer)" in note and "amber-chat[cuda]" in note
    note = cuda_libs.unused_gpu_note("CUDA failed: CUDA driver version is insufficient", "driver")
    assert note is not None and "update NVIDIA's driver" in note and "amber-chat" not in note
