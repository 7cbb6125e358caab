"""Is an NVIDIA GPU usable here? Asked of the CUDA driver itself, without ONNX Runtime.

onnxruntime-gpu lists CUDAExecutionProvider on every machine, GPU or not, so the provider list
cannot tell a CPU-only Linux machine from one with a GPU; the driver library can.

`nvidia_gpu_present` asks less: whether the machine has an NVIDIA GPU at all, from what its
driver installs (no CUDA library is loaded). A GPU that is present but cannot be used is worth
a warning; a CUDA failure on a machine without one is not. `gpu_presence` tells the two kinds of
present apart: a GPU whose driver is installed, and one seen only on the PCI bus (no driver). Both
read the file system under a root (default "/") and a PATH, so a test can point them at a fake
machine (tests/support/fake_nvidia.py).
"""
from __future__ import annotations

import ctypes
import functools
import os
import shutil
import sys
from pathlib import Path
from typing import Literal

GpuPresence = Literal["none", "no-driver", "driver"]

NVIDIA_PCI_VENDOR = "0x10de"
_DRIVER = "nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1"


@functools.lru_cache(maxsize=1)
def cuda_device_count() -> int:
    """Devices the CUDA driver reports (0 without a driver, without a device, or on any error)."""
    try:
        lib = ctypes.CDLL(_DRIVER)
        if lib.cuInit(0) != 0:
            return 0
        count = ctypes.c_int(0)
        if lib.cuDeviceGetCount(ctypes.byref(count)) != 0:
            return 0
        return max(0, int(count.value))
    except (OSError, AttributeError):   # no driver library, or one without these entry points
        return 0


def _system32() -> Path:
    return Path(os.environ.get("SystemRoot") or os.environ.get("windir") or r"C:\Windows") / "System32"


@functools.lru_cache(maxsize=1)
def nvidia_gpu_present() -> bool:
    """An NVIDIA GPU is here, with or without its driver (whether or not CUDA can start on it)."""
    return machine_gpu() != "none"


@functools.lru_cache(maxsize=1)
def machine_gpu() -> GpuPresence:
    """`gpu_presence` of this machine, asked once."""
    return gpu_presence()


def gpu_presence(root: Path = Path("/"), search_path: str | None = None) -> GpuPresence:
    """"driver": an NVIDIA GPU with its driver installed; "no-driver": an NVIDIA display controller
    on the PCI bus and no driver; "none": no NVIDIA GPU (always on macOS). `root` is where /proc,
    /dev and /sys are read (Linux); `search_path` is the PATH searched for nvidia-smi (default: the
    process's)."""
    try:
        if sys.platform == "win32":      # the driver puts these in System32; no PCI view without it
            found = any((_system32() / name).is_file() for name in ("nvml.dll", "nvcuda.dll"))
            return "driver" if found else "none"
        if sys.platform == "darwin":
            return "none"                # no CUDA on macOS
        if ((root / "proc/driver/nvidia/version").exists() or (root / "dev/nvidia0").exists()
                or shutil.which("nvidia-smi", path=search_path) is not None):
            return "driver"
        return "no-driver" if _nvidia_on_pci(root / "sys/bus/pci/devices") else "none"
    except OSError:                      # unreadable: nothing says a GPU is there
        return "none"


def _nvidia_on_pci(root: Path = Path("/sys/bus/pci/devices")) -> bool:
    """Linux: an NVIDIA display or 3D controller on the PCI bus, even with no driver installed."""
    if not root.is_dir():
        return False
    for dev in root.iterdir():
        try:
            vendor = (dev / "vendor").read_text().strip()
            klass = (dev / "class").read_text().strip()
        except OSError:
            continue
        if vendor.lower() == NVIDIA_PCI_VENDOR and klass.startswith("0x03"):
            return True
    return False
