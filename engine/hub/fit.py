"""Before a download: the disk space it needs, and whether the model fits this machine's memory.

Estimates, not promises. The factors are the converter's measured output/GGUF size ratios
(Q4_K_M 1.4x, Q4_0 1.14x, Q8_0 1.09x; F16 stays float16); a model runs from its ONNX
weights plus the KV cache and ONNX Runtime's own buffers, for which a flat allowance is added.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import psutil

FITS, TIGHT, TOO_LARGE = "fits", "tight", "too large"
RUNTIME_OVERHEAD = 600 << 20          # ORT arenas, tokenizer, KV cache at a few thousand tokens
KV_SHARE = 0.10                       # ... and the KV cache grows with the model


def onnx_ratio(quant: str) -> float:
    """Converted size / GGUF size for a quantization name."""
    q = quant.upper()
    if q.startswith("ONNX"):
        return 1.0
    if q in ("F16", "BF16", "FP16", "F32", "FP32"):
        return 1.0
    if q.startswith("Q8"):
        return 1.1
    if q in ("Q4_0", "Q4_1", "Q4"):
        return 1.15
    return 1.5                        # K-quants, Q5/Q6, IQ: int4/int8 plus float32 scales


@dataclass(frozen=True)
class Fit:
    download_bytes: int      # still to download (a partial download counts as done)
    disk_bytes: int          # free space needed: the download plus the converted model
    disk_free: int
    memory_bytes: int        # memory estimate to run the model
    memory_total: int
    verdict: str             # fits / tight / too large

    @property
    def disk_ok(self) -> bool:
        return self.disk_free >= self.disk_bytes

    def summary(self) -> str:
        return (f"download {human(self.download_bytes)}, disk needed {human(self.disk_bytes)} "
                f"({human(self.disk_free)} free), memory ~{human(self.memory_bytes)} of "
                f"{human(self.memory_total)}: {self.verdict}")


def verdict(need: int, total: int) -> str:
    if need <= total * 0.5:
        return FITS
    if need <= total * 0.8:
        return TIGHT
    return TOO_LARGE


def estimate(size: int, quant: str, target_dir: Path, already: int = 0,
             memory_total: int | None = None) -> Fit:
    converted = int(size * onnx_ratio(quant))
    remaining = max(0, size - already)
    # An ONNX repo downloads straight into place; a GGUF is converted next to it, then deleted
    disk = remaining if quant.upper().startswith("ONNX") else remaining + converted
    memory = int(converted * (1 + KV_SHARE)) + RUNTIME_OVERHEAD
    total = memory_total if memory_total is not None else int(psutil.virtual_memory().total)
    return Fit(download_bytes=remaining, disk_bytes=disk, disk_free=free_space(target_dir),
               memory_bytes=memory, memory_total=total, verdict=verdict(memory, total))


def free_space(path: Path) -> int:
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        return int(shutil.disk_usage(p).free)
    except OSError:
        return 0


def human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"
