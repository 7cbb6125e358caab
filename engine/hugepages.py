"""Transparent huge pages for ONNX Runtime's buffers on Linux (glibc).

ORT allocates its prepacked weights (~156 MiB for the default model) with malloc, which on most
distributions (THP mode `madvise`) leaves them on 4 KiB pages, so every decode step streams
through ~40,000 TLB entries. glibc's `glibc.malloc.hugetlb=1` tunable makes malloc ask for huge
pages on its large mappings: decode measured 3–5 % faster (docs/BENCHMARKS.md). glibc reads
tunables only when a process starts, so the entry points re-execute themselves once with it set.
`AMBER_NO_HUGEPAGES=1` turns this off.
"""
from __future__ import annotations

import os
import platform
import sys
from pathlib import Path
from typing import Mapping

TUNABLE = "glibc.malloc.hugetlb=1"
REEXEC_MARK = "AMBER_MALLOC_REEXEC"       # set in the re-executed process: never loop
OPT_OUT = "AMBER_NO_HUGEPAGES"
THP_SETTING = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def reexec_env(environ: Mapping[str, str], thp_setting: Path = THP_SETTING) -> dict[str, str] | None:
    """The environment to re-execute with, or None when there is nothing to gain (not Linux with
    glibc, THP off, the tunable already chosen, opted out, or already re-executed)."""
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        return None
    if environ.get(REEXEC_MARK) or environ.get(OPT_OUT):
        return None
    tunables = environ.get("GLIBC_TUNABLES", "")
    if "glibc.malloc.hugetlb" in tunables:
        return None     # the user chose a value
    try:
        if "[never]" in thp_setting.read_text():
            return None
    except OSError:
        return None     # no THP in this kernel
    env = dict(environ)
    env["GLIBC_TUNABLES"] = f"{tunables}:{TUNABLE}" if tunables else TUNABLE
    env[REEXEC_MARK] = "1"
    return env


def reexec_with_huge_pages(extra_env: Mapping[str, str] | None = None) -> None:
    """Replaces this process by the same command with the tunable set (when `reexec_env` says
    so), plus `extra_env`. Call first thing in an entry point, before any output or thread.
    Returns when not needed or when the re-exec fails (then the app runs on small pages)."""
    env = reexec_env(os.environ)
    if env is None:
        return
    env.update(extra_env or {})
    # A built app (PyInstaller) is its own executable; a Python run is the interpreter's command
    # line as given (`python -m app …`, or a console script's `python /…/bin/amber …`).
    argv = list(sys.argv) if getattr(sys, "frozen", False) else list(sys.orig_argv)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, argv, env)
    except OSError:
        return
