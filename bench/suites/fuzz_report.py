"""`python -m bench.suites.fuzz_report [--seconds 180] [--examples 300] [--no-write]`: the fuzz campaign.

Runs every Hypothesis target under tests/fuzz (whoever wrote it) under the "campaign" profile,
in rounds with fresh random seeds, until the time budget would be exceeded by another round.
tests/fuzz/conftest.py counts the examples each target ran; this sums them over the rounds,
prints a table, and rewrites the "Fuzzing" section of docs/BENCHMARKS.md with the CPU model.
A failing round prints its seed: rerun it with
`HYPOTHESIS_PROFILE=campaign AMBER_FUZZ_EXAMPLES=N python -m pytest tests/fuzz --hypothesis-seed=SEED`.
Exit status 1 when any target failed.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness import common

REPO = common.REPO


def _round(seed: int, examples: int, timeout: float) -> tuple[dict[str, Any], float, str]:
    with tempfile.TemporaryDirectory(prefix="amber-fuzz-") as tmp:
        counts = Path(tmp) / "counts.json"
        env = dict(os.environ, HYPOTHESIS_PROFILE="campaign", AMBER_FUZZ_COUNTS=str(counts),
                   AMBER_FUZZ_EXAMPLES=str(examples), QT_QPA_PLATFORM=os.environ.get("QT_QPA_PLATFORM", "offscreen"),
                   PYTHONPATH=os.pathsep.join([str(REPO)] + ([os.environ["PYTHONPATH"]]
                                                            if os.environ.get("PYTHONPATH") else [])))
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/fuzz",
               f"--hypothesis-seed={seed}", "-W", "ignore::hypothesis.errors.HypothesisWarning"]
        started = time.perf_counter()
        try:
            proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
            tail = (proc.stdout + proc.stderr)[-4000:]
        except subprocess.TimeoutExpired as exc:
            tail = f"round timed out after {timeout:.0f} s\n{(exc.stdout or b'')[-2000:]!r}"
        elapsed = time.perf_counter() - started
        data = json.loads(counts.read_text()) if counts.is_file() else {}
    return data, elapsed, tail


def _short(nodeid: str) -> str:
    return nodeid.split("tests/fuzz/", 1)[-1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.suites.fuzz_report", description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=180.0, help="time budget for the whole campaign")
    ap.add_argument("--examples", type=int, default=300, help="max_examples per target per round")
    ap.add_argument("--no-write", action="store_true", help="do not rewrite docs/BENCHMARKS.md")
    args = ap.parse_args(argv)

    load_before = common.load_average()
    start = time.perf_counter()
    totals: dict[str, dict[str, Any]] = {}
    seeds: list[int] = []
    failures: list[str] = []
    last = 0.0
    while True:
        remaining = args.seconds - (time.perf_counter() - start)
        if seeds and remaining < last:      # another round would overrun the budget
            break
        seed = random.SystemRandom().randrange(2 ** 32)
        data, last, tail = _round(seed, args.examples, timeout=max(remaining, last, 60.0) + 120.0)
        seeds.append(seed)
        if not data:
            failures.append(f"round with seed {seed} reported nothing: {tail.strip().splitlines()[-1:]}")
            print(tail, file=sys.stderr)
            break
        for nodeid, entry in data.items():
            total = totals.setdefault(nodeid, {"cases": 0, "failed_rounds": 0, "error": ""})
            total["cases"] += int(entry.get("cases", 0))
            if entry.get("failed"):
                total["failed_rounds"] += 1
                total["error"] = total["error"] or f"seed {seed}: {entry.get('error', '')}"
                failures.append(f"{_short(nodeid)} (seed {seed}): {entry.get('error', '')}")
        cases = sum(int(e.get("cases", 0)) for e in data.values())
        print(f"round {len(seeds)}: seed {seed}, {cases} examples in {last:.0f} s, "
              f"{sum(1 for e in data.values() if e.get('failed'))} failing target(s)", flush=True)
        if any(e.get("failed") for e in data.values()):
            print(tail, file=sys.stderr)
    elapsed = time.perf_counter() - start

    rows = [[f"`{_short(n)}`", t["cases"], t["failed_rounds"], t["error"][:120] or ""]
            for n, t in sorted(totals.items())]
    print(common.table(["Target", "Examples", "Failed rounds", "First failure"], rows))
    total_cases = sum(t["cases"] for t in totals.values())
    print(f"{total_cases} examples over {len(totals)} targets in {len(seeds)} rounds, {elapsed:.0f} s; "
          f"{len(failures)} failure(s)")
    if not args.no_write:
        body = "\n".join([
            "Written by `make fuzz` (`python -m bench.suites.fuzz_report --seconds 180`): every Hypothesis target "
            "in `tests/fuzz/` under the `campaign` profile, in rounds with fresh random seeds, for a bounded "
            "time. Each example checks \"success or the reader's own one-line error; no other exception, "
            "no hang (SIGALRM), bounded traced memory\". `make test` runs the same targets under the small, "
            "derandomized `default` profile.", "",
            common.table(["Target", "Examples", "Failed rounds", "First failure"], rows), "",
            f"Total: **{total_cases:,} examples**, {len(totals)} targets, {len(seeds)} rounds of up to "
            f"{args.examples} examples per target (expensive targets run a fraction), {elapsed:.0f} s; "
            f"**{len(failures)} failure(s)**. Seeds: {', '.join(map(str, seeds))}.", "",
            common.facts_line(common.machine_facts(), load_before)])
        common.write_section(common.Section("fuzz", "Fuzzing", body, 60))
        print(f"wrote the Fuzzing section of {common.BENCHMARKS_MD}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
