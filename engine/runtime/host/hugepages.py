"""Transparent huge pages for ONNX Runtime's buffers on Linux (glibc 2.35 or newer).

ORT allocates its prepacked weights (~156 MiB for the default model) with malloc, which on most
distributions (THP mode `madvise`) leaves them on 4 KiB pages, so every decode step streams
through ~40,000 TLB entries. glibc's `glibc.malloc.hugetlb=1` tunable (glibc 2.35+) makes malloc
ask for huge pages on its large mappings: decode measured 3–5 % faster (docs/benchmarks/decode.md); it comes
with a fixed mmap threshold (MMAP_THRESHOLD below).
glibc reads tunables only when a process starts, so an entry point re-executes itself once with
it set, then takes the variables out of its own environment again: the tunable stays with this
process only, and nothing it starts (pip, a browser, a server child) inherits it.

When: the built app (PyInstaller, packaging/entry.py) does it by default; a source run
(`python -m app`, `python -m engine`, the `amber` scripts of a pip install) only with
`AMBER_HUGEPAGES=1`. `AMBER_NO_HUGEPAGES=1` always turns it off; `--help`/`--version` never
re-execute. The re-executed process logs one line (`log_status`, shown by `amber --verbose`).
"""
from __future__ import annotations

import logging
import os
import platform
import sys
from pathlib import Path
from typing import Mapping, MutableMapping, Sequence

from engine import config

HUGETLB = "glibc.malloc.hugetlb=1"
# With huge pages, a heap that glibc's moving mmap threshold (raised up to 32 MiB as large blocks
# are freed) fills with a prefill's 1-2 MiB blocks is held in 2 MiB pages: the default model peaked
# 43 MiB higher (docs/benchmarks/decode.md). A fixed 1 MiB threshold maps those blocks and gives
# them back; a decode step's blocks are smaller and stay on the heap (no more page faults a step).
MMAP_THRESHOLD = "glibc.malloc.mmap_threshold=1048576"
TUNABLE = f"{HUGETLB}:{MMAP_THRESHOLD}"
REEXEC_MARK = config.MALLOC_REEXEC        # set in the re-executed process: never loop
BEFORE = config.GLIBC_TUNABLES_BEFORE     # the user's own GLIBC_TUNABLES, restored after the re-exec
OPT_IN = config.HUGEPAGES                 # source runs: re-execute only when this is "1"
OPT_OUT = config.NO_HUGEPAGES
THP_SETTING = Path("/sys/kernel/mm/transparent_hugepage/enabled")
MIN_GLIBC = (2, 35)                       # the first glibc with glibc.malloc.hugetlb
_NO_REEXEC_ARGS = frozenset({"-h", "--help", "--version"})

log = logging.getLogger(__name__)
_status: str | None = None                # the line `log_status` logs (set after a re-exec)


def glibc_version() -> tuple[int, int] | None:
    """The running C library's glibc version, or None when it is not glibc (or unreadable)."""
    text = ""
    try:
        text = os.confstr("CS_GNU_LIBC_VERSION") or ""   # "glibc 2.36": the loaded library
    except (AttributeError, ValueError, OSError):
        pass
    if not text:
        lib, ver = platform.libc_ver()
        text = f"{lib} {ver}" if lib == "glibc" and ver else ""
    return parse_libc_version(text)


def parse_libc_version(text: str) -> tuple[int, int] | None:
    """(2, 36) from "glibc 2.36"; None for another C library or anything unexpected."""
    name, _, ver = text.strip().partition(" ")
    parts = ver.split(".")
    if name != "glibc" or len(parts) < 2 or not (parts[0].isdigit() and parts[1].isdigit()):
        return None
    return int(parts[0]), int(parts[1])


def tunable_env(environ: Mapping[str, str], thp_setting: Path = THP_SETTING,
                glibc: tuple[int, int] | None = None) -> dict[str, str] | None:
    """`environ` plus the tunable, or None when it cannot help: not Linux, no glibc or one older
    than 2.35 (`glibc` defaults to the running one), THP off or absent, or the user chose a
    hugetlb value in GLIBC_TUNABLES. (bench/ gives its workers this environment.)"""
    if not sys.platform.startswith("linux"):
        return None
    version = glibc_version() if glibc is None else glibc
    if version is None or version < MIN_GLIBC:
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
    ours = HUGETLB if "glibc.malloc.mmap_threshold" in tunables else TUNABLE    # theirs stays
    env["GLIBC_TUNABLES"] = f"{tunables}:{ours}" if tunables else ours
    return env


def reexec_env(environ: Mapping[str, str], thp_setting: Path = THP_SETTING, *,
               frozen: bool = False, glibc: tuple[int, int] | None = None,
               argv: Sequence[str] = ()) -> dict[str, str] | None:
    """The environment to re-execute with, or None when not to: opted out, a source run
    (`frozen` False) without the opt-in, `--help`/`--version` in `argv`, already re-executed,
    or nothing to gain (`tunable_env`)."""
    wanted = config.settings(environ)
    if wanted.reexecuted or wanted.no_hugepages:
        return None
    if not frozen and not wanted.hugepages:
        return None
    if _NO_REEXEC_ARGS.intersection(argv):
        return None
    env = tunable_env(environ, thp_setting, glibc)
    if env is None:
        return None
    env[REEXEC_MARK] = "1"
    if "GLIBC_TUNABLES" in environ:
        env[BEFORE] = environ["GLIBC_TUNABLES"]
    return env


def strip_after_reexec(environ: MutableMapping[str, str]) -> bool:
    """In a re-executed process: put GLIBC_TUNABLES back as the user had it and drop the marks
    (glibc has read the tunable already; children must not inherit it). Whether it was one."""
    if REEXEC_MARK not in environ:
        return False
    environ.pop(REEXEC_MARK, None)
    before = environ.pop(BEFORE, None)
    if before is None:
        environ.pop("GLIBC_TUNABLES", None)
    else:
        environ["GLIBC_TUNABLES"] = before
    return True


def log_status() -> None:
    """Log the one line about the re-exec (once; nothing when there was none)."""
    global _status
    if _status is not None:
        log.info("%s", _status)
        _status = None


def reexec_with_huge_pages(extra_env: Mapping[str, str] | None = None) -> None:
    """Replaces this process by the same command with the tunable set (when `reexec_env` says
    so), plus `extra_env`. Call first thing in an entry point, before any output or thread.
    Returns when not needed, when the re-exec fails (then the app runs on small pages), or in
    the re-executed process (after `strip_after_reexec`)."""
    global _status
    tuned = os.environ.get("GLIBC_TUNABLES", "")
    if strip_after_reexec(os.environ):
        version = glibc_version()
        _status = (f"huge pages: re-executed once with GLIBC_TUNABLES={tuned} (glibc "
                   f"{'.'.join(map(str, version or ()))}); not passed on to child processes")
        return
    frozen = bool(getattr(sys, "frozen", False))
    env = reexec_env(os.environ, frozen=frozen, argv=sys.argv[1:])
    if env is None:
        return
    env.update(extra_env or {})
    # A built app (PyInstaller) is its own executable; a Python run is the interpreter's command
    # line as given (`python -m app …`, or a console script's `python /…/bin/amber …`).
    argv = list(sys.argv) if frozen else list(sys.orig_argv)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, argv, env)
    except OSError:
        return
