"""engine.base.cuda_probe.nvidia_gpu_present: an NVIDIA GPU found from what its driver installs and
from the PCI bus, without loading any CUDA library."""
from __future__ import annotations

from pathlib import Path

from engine.base import cuda_probe


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
    present = cuda_probe.nvidia_gpu_present()
    assert isinstance(present, bool)
    # a usable CUDA device implies a present GPU (the converse is what the warning is about)
    assert present or cuda_probe.cuda_device_count() == 0


def test_windows_finds_the_driver_dlls(tmp_path, monkeypatch):
    from types import SimpleNamespace

    monkeypatch.setattr(cuda_probe, "sys", SimpleNamespace(platform="win32"))
    monkeypatch.setenv("SystemRoot", str(tmp_path))
    (tmp_path / "System32").mkdir()
    cuda_probe.nvidia_gpu_present.cache_clear()
    try:
        assert not cuda_probe.nvidia_gpu_present()
        (tmp_path / "System32" / "nvml.dll").write_bytes(b"MZ")   # the driver's, never loaded here
        cuda_probe.nvidia_gpu_present.cache_clear()
        assert cuda_probe.nvidia_gpu_present()
    finally:
        cuda_probe.nvidia_gpu_present.cache_clear()


def test_linux_finds_nvidia_smi_without_cuda_libraries(tmp_path, monkeypatch):
    from types import SimpleNamespace

    monkeypatch.setattr(cuda_probe, "sys", SimpleNamespace(platform="linux"))
    monkeypatch.setattr(cuda_probe, "_nvidia_on_pci", lambda: False)
    monkeypatch.setattr(cuda_probe, "Path", lambda p: tmp_path / "absent" / str(p).lstrip("/"))
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text("#!/bin/sh\n")
    smi.chmod(0o755)
    cuda_probe.nvidia_gpu_present.cache_clear()
    try:
        monkeypatch.setenv("PATH", str(tmp_path / "empty"))
        assert not cuda_probe.nvidia_gpu_present()
        monkeypatch.setenv("PATH", str(smi.parent))
        cuda_probe.nvidia_gpu_present.cache_clear()
        assert cuda_probe.nvidia_gpu_present()
    finally:
        cuda_probe.nvidia_gpu_present.cache_clear()
