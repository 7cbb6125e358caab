"""A fake machine for engine.base.cuda_probe.gpu_presence: the files an NVIDIA GPU and its driver
leave under /proc, /dev and /sys, and an `nvidia-smi` on a PATH, written under a temporary root.
The real detection reads them through its `root` and `search_path` parameters: nothing of the
probe is patched.

    machine = fake_machine(tmp_path, "driver")
    gpu_presence(machine.root, machine.search_path)   # -> "driver"
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engine.base.cuda_probe import GpuPresence, gpu_presence

DRIVER_VERSION = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build\n"
                  "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n")


@dataclass(frozen=True)
class FakeMachine:
    root: Path           # stands for "/"
    search_path: str     # stands for PATH

    def presence(self) -> GpuPresence:
        return gpu_presence(self.root, self.search_path)


def _pci_device(root: Path, slot: str, vendor: str, klass: str) -> None:
    d = root / "sys/bus/pci/devices" / slot
    d.mkdir(parents=True)
    (d / "vendor").write_text(vendor + "\n")
    (d / "class").write_text(klass + "\n")


def fake_machine(tmp: Path, gpu: GpuPresence) -> FakeMachine:
    """`tmp`/root as a Linux machine with an Intel GPU and, for "no-driver", an NVIDIA one on the
    PCI bus; for "driver", that one with its driver (/proc/driver/nvidia/version, /dev/nvidia0,
    nvidia-smi on the PATH)."""
    root, bin_dir = tmp / "root", tmp / "bin"
    bin_dir.mkdir(parents=True)
    _pci_device(root, "0000:00:02.0", "0x8086", "0x030000")            # Intel integrated graphics
    if gpu in ("no-driver", "driver"):
        _pci_device(root, "0000:01:00.0", "0x10de", "0x030000")        # NVIDIA VGA controller
    if gpu == "driver":
        (root / "proc/driver/nvidia").mkdir(parents=True)
        (root / "proc/driver/nvidia/version").write_text(DRIVER_VERSION)
        (root / "dev").mkdir()
        (root / "dev/nvidia0").write_bytes(b"")
        smi = bin_dir / "nvidia-smi"
        smi.write_text("#!/bin/sh\necho 'NVIDIA-SMI 580.95.05'\n")
        smi.chmod(0o755)
    return FakeMachine(root, str(bin_dir))
