"""ONNX Runtime intra-op thread spinning on CPU: the policy, and AMBER_ORT_SPIN to override it.

ORT's intra-op worker threads spin while they wait for work (on by default, and for milliseconds
after each run): on an idle machine that saves a wake-up per parallel section, but a spinning
thread burns CPU time that other programs want (a desktop app shares the machine with a browser
and an IDE), and on an oversubscribed machine the spinner and the thread it waits for take turns
on the same cores. These are session options, fixed when the model is loaded (ORT 1.31 has no run
option for them). Figures: docs/BENCHMARKS.md "ONNX Runtime thread spinning under competing load"
(bench/suites/spin.py); the choice: docs/DESIGN.md "Thread spinning".

`auto` (the default): spin for at most SPIN_US microseconds before blocking — long enough to bridge
the gaps between the parallel sections of one run, short enough that the threads block between
decode steps (idle: 0.98–1.10× ORT's default speed; beside one or two busy processes 1.06–1.46×) —
and not at all when other programs already load the machine to OVERLOAD × its cores when the
model loads, where not spinning was the fastest (1.3× the bounded spin beside 4 busy processes
on 2 cores).
"""
from __future__ import annotations

import math
import os

from engine import config

SPIN_ENV = config.ORT_SPIN
SPIN_US_ENV = config.ORT_SPIN_US     # the bounded spin's duration (µs), default SPIN_US
ALLOW = "session.intra_op.allow_spinning"          # 0: a worker with no work blocks at once
DURATION = "session.intra_op.spin_duration_us"     # spin this long (µs) before blocking
BACKOFF = "session.intra_op.spin_backoff_max"      # exponential back-off cap of the spin loop's pauses
STOP = "session.force_spinning_stop"               # 1: stop spinning when a Run returns
BLOCK = "session.dynamic_block_base"               # >0: parallel loops hand out shrinking blocks
SPIN_MODES = config.SPIN_MODES
SPIN_US = 50
OVERLOAD = 2.0      # others' load average ÷ CPUs from which auto does not spin
SETTINGS: dict[str, dict[str, str]] = {
    "on": {ALLOW: "1"},                             # ORT's default
    "off": {ALLOW: "0"},
    "bounded": {ALLOW: "1", DURATION: str(SPIN_US)},
}


def spin_mode(env: dict[str, str] | None = None) -> str:
    """The mode AMBER_ORT_SPIN asks for (auto, on, off, bounded; case and spaces ignored); anything
    else is auto."""
    return config.settings(env).ort_spin


def machine_load() -> tuple[float, int]:
    """Other programs' load — the 1-minute load average less this process's own share of it — and
    the CPUs this process may run on (load 0 where unknown)."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):   # Windows has no load average
        load = 0.0
    affinity = getattr(os, "sched_getaffinity", None)
    cpus = len(affinity(0)) if affinity else (os.cpu_count() or 1)
    return max(0.0, load - _own_load()), max(1, cpus)


def _own_load() -> float:
    """This process's estimated part of the 1-minute load average: its mean CPU rate since it
    started, weighted as the kernel's exponential average weighs a process that ran that long (a
    model reloaded after a long reply must not read Amber's own decoding as other programs' load)."""
    try:
        import resource  # noqa: PLC0415 - POSIX only
        with open(f"/proc/{os.getpid()}/stat", "rb") as f:
            start_ticks = int(f.read().rsplit(b")", 1)[1].split()[19])
        with open("/proc/uptime", "rb") as f:
            uptime = float(f.read().split()[0])
    except (ImportError, OSError, ValueError, IndexError):
        return 0.0
    age = uptime - start_ticks / os.sysconf("SC_CLK_TCK")
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cpu = usage.ru_utime + usage.ru_stime
    if age <= 0:
        return 0.0
    return (cpu / age) * (1.0 - math.exp(-age / 60.0))


def auto_setting(load: float, cpus: int) -> str:
    """auto's choice from other programs' load and the CPUs: "off" on a machine that others already
    oversubscribe when the model loads, else "bounded"."""
    return "off" if load >= OVERLOAD * cpus else "bounded"


# `amber-engine serve` batches its clients' decode steps: between two batched runs the sessions'
# threads hand their tokens over, a gap longer than 50 µs, so its workers block and wake once a run.
# Spinning 500 µs gave the batched path 0.89-0.92x of ORT's default spinning against 0.80-0.89x at
# 50 µs (docs/BENCHMARKS.md, "ONNX Runtime thread spinning under competing load").
SERVE_SPIN_US = 500


def prefer_server_spin(env: dict[str, str] | None = None) -> None:
    """For a serving process: the bounded spin lasts SERVE_SPIN_US unless AMBER_ORT_SPIN_US says
    otherwise (call before the model is loaded)."""
    (os.environ if env is None else env).setdefault(SPIN_US_ENV, str(SERVE_SPIN_US))


def spin_us(env: dict[str, str] | None = None) -> int:
    """The bounded spin's duration: AMBER_ORT_SPIN_US (1-100000 µs) or SPIN_US."""
    return config.settings(env).ort_spin_us or SPIN_US


def spin_entries(mode: str | None = None, load: tuple[float, int] | None = None) -> dict[str, str]:
    """ORT session config entries for a CPU session's intra-op threads in `mode` (default: the env's);
    `load`: (load average, cpus) for auto (default: this machine's, now)."""
    mode = mode or spin_mode()
    if mode == "auto":
        mode = auto_setting(*(load or machine_load()))
    entries = dict(SETTINGS[mode])
    if DURATION in entries:
        entries[DURATION] = str(spin_us())
    return entries
