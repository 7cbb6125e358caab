"""ONNX Runtime intra-op thread spinning on CPU (issue 18): the policy, and AMBER_ORT_SPIN to override it.

ORT's intra-op worker threads spin while they wait for work (on by default): on an idle machine
that saves a wake-up per parallel section, but a spinning thread keeps a core that other programs
want (a desktop app shares the machine with a browser and an IDE), and when the machine is
oversubscribed the spinner and the thread it waits for take turns on the same cores. These are
session options (fixed when the model is loaded; ORT 1.31 has no run option for them), see
docs/DESIGN.md "Thread spinning" and docs/BENCHMARKS.md (bench/bench_spin.py) for the figures.
"""
from __future__ import annotations

import os

SPIN_ENV = "AMBER_ORT_SPIN"
ALLOW = "session.intra_op.allow_spinning"          # 0: a worker with no work blocks at once
DURATION = "session.intra_op.spin_duration_us"     # spin this long (µs) before blocking
BACKOFF = "session.intra_op.spin_backoff_max"      # exponential back-off cap of the spin loop's pauses
STOP = "session.force_spinning_stop"               # 1: stop spinning when a Run returns
BLOCK = "session.dynamic_block_base"               # >0: parallel loops hand out shrinking blocks
SPIN_MODES = ("auto", "on", "off")
SETTINGS: dict[str, dict[str, str]] = {
    "on": {ALLOW: "1"},                             # ORT's default
    "off": {ALLOW: "0"},
    "auto": {ALLOW: "1", DURATION: "100"},
}


def spin_mode(env: dict[str, str] | None = None) -> str:
    """The mode AMBER_ORT_SPIN asks for (auto, on, off; case and spaces ignored); anything else is auto."""
    value = (os.environ if env is None else env).get(SPIN_ENV, "").strip().lower()
    return value if value in SPIN_MODES else "auto"


def spin_entries(mode: str | None = None) -> dict[str, str]:
    """ORT session config entries for a CPU session's intra-op threads in `mode` (default: the env's)."""
    return dict(SETTINGS[mode or spin_mode()])
