"""Refuses, with one clear line, to install Amber from source on a host its wheels do not cover.

Run by the Makefile before it creates .venv (stdlib only: it runs on the system Python). The table
is the one README.md's "Platforms" section states and `make check-platforms` verifies
(packaging/check_platforms.py TARGETS; tests/test_check_platforms.py keeps the two in step).
Exit 0 when supported, 2 (with the reason on stderr) when not.
"""
from __future__ import annotations

import platform
import sys

# (platform.system(), normalized machine) -> (name, oldest OS version, what that version is)
SUPPORTED: dict[tuple[str, str], tuple[str, tuple[int, int], str]] = {
    ("Linux", "x86_64"): ("linux-x86_64", (2, 35), "glibc 2.35 (Ubuntu 22.04, Debian 12)"),
    ("Linux", "aarch64"): ("linux-aarch64", (2, 39), "glibc 2.39 (Ubuntu 24.04, Debian 13)"),
    ("Windows", "x86_64"): ("windows-x86_64", (10, 0), "Windows 10"),
    ("Darwin", "arm64"): ("macos-arm64", (14, 0), "macOS 14 Sonoma"),
    ("Darwin", "x86_64"): ("macos-x86_64", (13, 0), "macOS 13 Ventura"),
}
MIN_PYTHON = (3, 11)
_MACHINES = {"amd64": "x86_64", "x64": "x86_64", "arm64": "arm64", "aarch64": "aarch64"}


def _version(text: str) -> tuple[int, int] | None:
    parts = text.split(".")
    try:
        return int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    except ValueError:
        return None


def host_problem(system: str, machine: str, os_version: str, python: tuple[int, int]) -> str | None:
    """Why this host cannot install Amber's wheels, or None. `os_version` is the glibc version on
    Linux, the macOS version on macOS ('' when unknown: then it is not held against the host)."""
    machine = _MACHINES.get(machine.lower(), machine.lower())
    if system == "Darwin" and machine == "aarch64":
        machine = "arm64"
    supported = ", ".join(f"{s} {m} ({v[2]} or newer)" for (s, m), v in SUPPORTED.items())
    if (system, machine) not in SUPPORTED:
        return f"Amber does not support {system} {machine}: its wheels exist for {supported}"
    name, oldest, what = SUPPORTED[(system, machine)]
    found = _version(os_version) if os_version else None
    if system != "Windows" and found is not None and found < oldest:
        kind = "glibc" if system == "Linux" else "macOS"
        return (f"Amber on {system} {machine} needs {what} or newer; this host has {kind} "
                f"{found[0]}.{found[1]}")
    if python < MIN_PYTHON:
        return f"Amber needs Python {MIN_PYTHON[0]}.{MIN_PYTHON[1]} or newer; this is {python[0]}.{python[1]}"
    return None


def this_host() -> tuple[str, str, str, tuple[int, int]]:
    system, machine = platform.system(), platform.machine()
    version = ""
    if system == "Linux":
        lib, ver = platform.libc_ver()
        version = ver if lib == "glibc" else ""
    elif system == "Darwin":
        version = platform.mac_ver()[0]
    return system, machine, version, sys.version_info[:2]


def main() -> int:
    problem = host_problem(*this_host())
    if problem:
        print(f"error: {problem}.", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
