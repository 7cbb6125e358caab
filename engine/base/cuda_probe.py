"""Is an NVIDIA GPU usable here? Asked of the CUDA driver itself, without ONNX Runtime.

onnxruntime-gpu lists CUDAExecutionProvider on every machine, GPU or not, so the provider list
cannot tell a CPU-only Linux machine from one with a GPU; the driver library can.
"""
from __future__ import annotations

import ctypes
import functools
import sys

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
