"""engine.base.cuda_probe asks the CUDA driver for devices: real shared libraries standing in for it;
and whether an NVIDIA GPU is present at all, from what its driver installs and the PCI bus (no CUDA
library loaded)."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engine.base import cuda_probe
from engine.convert import native_form
from tests.support.fake_nvidia import fake_machine

FAKE_DRIVER = """
static int init_result = INIT_RESULT;
int cuInit(unsigned int flags) { (void)flags; return init_result; }
int cuDeviceGetCount(int *count) { *count = DEVICES; return 0; }
"""


def _fake_driver(tmp_path: Path, devices: int, init_result: int = 0) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    src = tmp_path / f"fake{devices}_{init_result}.c"
    src.write_text(FAKE_DRIVER.replace("INIT_RESULT", str(init_result)).replace("DEVICES", str(devices)))
    lib = tmp_path / f"libfakecuda{devices}_{init_result}.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    return lib


@pytest.fixture(autouse=True)
def _fresh_cache():
    cuda_probe.cuda_device_count.cache_clear()
    yield
    cuda_probe.cuda_device_count.cache_clear()


def test_driver_devices_are_counted(tmp_path, monkeypatch):
    monkeypatch.setattr(cuda_probe, "_DRIVER", str(_fake_driver(tmp_path, 3)))
    assert cuda_probe.cuda_device_count() == 3


def test_a_driver_that_fails_to_initialise_means_no_device(tmp_path, monkeypatch):
    # cuInit's CUDA_ERROR_NO_DEVICE (100): a driver installed on a machine without a GPU
    monkeypatch.setattr(cuda_probe, "_DRIVER", str(_fake_driver(tmp_path, 2, init_result=100)))
    assert cuda_probe.cuda_device_count() == 0


def test_no_driver_library_means_no_device(tmp_path, monkeypatch):
    monkeypatch.setattr(cuda_probe, "_DRIVER", str(tmp_path / "libcuda-missing.so.1"))
    assert cuda_probe.cuda_device_count() == 0


def test_a_library_without_the_entry_points_means_no_device(tmp_path, monkeypatch):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    src = tmp_path / "other.c"
    src.write_text("int something_else(void) { return 1; }\n")
    lib = tmp_path / "libother.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    monkeypatch.setattr(cuda_probe, "_DRIVER", str(lib))
    assert cuda_probe.cuda_device_count() == 0


def test_cuda_listed_without_a_device_keeps_the_native_choice(tmp_path, monkeypatch):
    """onnxruntime-gpu lists CUDAExecutionProvider on CPU-only machines: the driver decides."""
    import onnxruntime as ort
    monkeypatch.setattr(ort, "get_available_providers", lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    monkeypatch.setattr(cuda_probe, "_DRIVER", str(tmp_path / "libcuda-missing.so.1"))
    assert native_form.gpu_would_run() is False


def test_cuda_listed_with_a_device_and_provider_library_is_a_gpu(tmp_path, monkeypatch):
    import onnxruntime as ort
    capi = Path(ort.__file__).parent / "capi"
    if not any(capi.glob("*onnxruntime_providers_cuda*")):
        pytest.skip("this onnxruntime ships no CUDA provider library")
    monkeypatch.setattr(ort, "get_available_providers", lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    monkeypatch.setattr(cuda_probe, "_DRIVER", str(_fake_driver(tmp_path, 1)))
    assert native_form.gpu_would_run() is True


# ---- an NVIDIA GPU present (usable or not) ----------------------------------------------------
def _device(root: Path, name: str, vendor: str, klass: str) -> None:
    d = root / name
    d.mkdir(parents=True)
    (d / "vendor").write_text(vendor + "\n")
    (d / "class").write_text(klass + "\n")


def test_pci_bus_finds_an_nvidia_display_controller(tmp_path):
    _device(tmp_path, "0000:00:02.0", "0x8086", "0x030000")          # an Intel GPU
    assert not cuda_probe._nvidia_on_pci(tmp_path)
    _device(tmp_path, "0000:01:00.1", "0x10de", "0x040300")          # NVIDIA audio: not a GPU
    assert not cuda_probe._nvidia_on_pci(tmp_path)
    _device(tmp_path, "0000:01:00.0", "0x10de", "0x030200")          # NVIDIA 3D controller
    assert cuda_probe._nvidia_on_pci(tmp_path)
    assert not cuda_probe._nvidia_on_pci(tmp_path / "missing")


def test_presence_is_a_plain_answer_here():
    cuda_probe.nvidia_gpu_present.cache_clear()
    cuda_probe.machine_gpu.cache_clear()
    present = cuda_probe.nvidia_gpu_present()
    assert isinstance(present, bool)
    assert cuda_probe.machine_gpu() in ("none", "no-driver", "driver")
    # a usable CUDA device implies a present GPU (the converse is what the warning is about)
    assert present or cuda_probe.cuda_device_count() == 0


def test_windows_finds_the_driver_dlls(tmp_path, monkeypatch):
    from types import SimpleNamespace

    monkeypatch.setattr(cuda_probe, "sys", SimpleNamespace(platform="win32"))
    monkeypatch.setenv("SystemRoot", str(tmp_path))
    (tmp_path / "System32").mkdir()
    assert cuda_probe.gpu_presence() == "none"
    (tmp_path / "System32" / "nvml.dll").write_bytes(b"MZ")   # the driver's, never loaded here
    assert cuda_probe.gpu_presence() == "driver"


@pytest.mark.skipif(sys.platform != "linux", reason="reads a Linux machine's files")
@pytest.mark.parametrize("gpu", ["none", "no-driver", "driver"])
def test_a_fake_machine_is_read_through_the_root_and_path(tmp_path, gpu):
    machine = fake_machine(tmp_path, gpu)
    assert cuda_probe.gpu_presence(machine.root, machine.search_path) == gpu


@pytest.mark.skipif(sys.platform != "linux", reason="reads a Linux machine's files")
def test_each_trace_of_the_driver_is_enough_alone(tmp_path):
    machine = fake_machine(tmp_path, "driver")
    nowhere = str(tmp_path / "empty")
    (machine.root / "dev/nvidia0").unlink()
    assert cuda_probe.gpu_presence(machine.root, nowhere) == "driver"        # /proc/driver/nvidia
    (machine.root / "proc/driver/nvidia/version").unlink()
    assert cuda_probe.gpu_presence(machine.root, machine.search_path) == "driver"   # nvidia-smi
    assert cuda_probe.gpu_presence(machine.root, nowhere) == "no-driver"     # the PCI bus only
