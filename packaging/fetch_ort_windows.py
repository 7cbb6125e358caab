"""Puts the Windows x64 ONNX Runtime DLL where the Windows tests (tests/engine/test_native_windows.py,
under wine) look for it: build/ort-windows-<version>/ with onnxruntime.dll, its LICENSE and
ThirdPartyNotices.txt, taken from the release's win_amd64 wheel (`pip download`, the one step that
needs the network; `make test` runs it). A no-op when they are there.

The release is the Windows pin's (pyproject.toml: onnxruntime-gpu 1.31.1); the CPU-only wheel of the
same release has the same CPU execution provider in a 15 MB download instead of the CUDA one's.

    python packaging/fetch_ort_windows.py
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VERSION = "1.31.1"
DEST = ROOT / "build" / f"ort-windows-{VERSION}"
# wheel member -> file name in DEST (the DLL, and the licence terms it ships under)
MEMBERS = {"onnxruntime/capi/onnxruntime.dll": "onnxruntime.dll", "onnxruntime/LICENSE": "LICENSE",
           "onnxruntime/ThirdPartyNotices.txt": "ThirdPartyNotices.txt"}


class FetchError(Exception):
    """pip could not download the wheel, or it lacks a file; the message says which."""


def dll_path() -> Path:
    return DEST / "onnxruntime.dll"


def installed() -> bool:
    return all((DEST / name).is_file() for name in MEMBERS.values())


def install() -> Path:
    """Downloads and unpacks the DLL unless it is there; its folder."""
    if installed():
        return DEST
    DEST.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".ort-windows-", dir=DEST.parent) as scratch:
        wheels = Path(scratch) / "wheel"
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--only-binary=:all:",
             "--platform", "win_amd64", "--python-version", "3.11", "--no-deps", f"onnxruntime=={VERSION}",
             "-d", str(wheels)], capture_output=True, text=True, check=False)
        found = sorted(wheels.glob("onnxruntime-*-win_amd64.whl")) if proc.returncode == 0 else []
        if not found:
            raise FetchError(f"pip download onnxruntime=={VERSION} (win_amd64) failed: "
                             f"{(proc.stderr or proc.stdout).strip()[-500:]}")
        unpacked = Path(scratch) / DEST.name
        unpacked.mkdir()
        with zipfile.ZipFile(found[0]) as wheel:
            names = set(wheel.namelist())
            for member, name in MEMBERS.items():
                if member not in names:
                    raise FetchError(f"{found[0].name} has no {member}")
                (unpacked / name).write_bytes(wheel.read(member))
        if DEST.exists():   # a partial folder from an older run
            for p in DEST.iterdir():
                p.unlink()
            DEST.rmdir()
        unpacked.rename(DEST)
    return DEST


def main() -> int:
    try:
        print(f"Windows ONNX Runtime {VERSION}: {install()}")
    except (FetchError, OSError) as exc:
        print(f"fetch_ort_windows: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
