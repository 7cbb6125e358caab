"""`python -m bench spin [--shapes 135m,/converted/folder]`: ONNX Runtime's intra-op thread spinning
against competing processes.

ORT's intra-op worker threads spin while they wait for work (`session.intra_op.allow_spinning`,
on by default): fast on an idle machine, but a spinning thread burns a core that another process
wants, and when the machine is oversubscribed the spinner and the thread it waits for take turns
on the same cores. This bench runs Amber's engine path (`Runner.forward`, greedy `Sampler`, as in
bench.suites.shapes) in fresh processes under each spin setting in SETTINGS, each with 0, 1 and 2 busy
processes competing (pure-Python loops at normal priority, the way a browser tab or a compile
competes), interleaved, several rounds; medians per (setting, busy). It also records what Amber
leaves to the others: the CPU share the busy processes got while Amber ran (wait4 rusage).

Other work on the machine counts too: the load average before each process is recorded and
reported; the ratios between settings at the same busy count are the figures to read. On a VM
shared with other sessions (each in its own scheduler autogroup, where `nice` does not reach),
the figures in docs/BENCHMARKS.md were taken with the bench's autogroup at nice -20
(`echo -20 > /proc/self/autogroup` in the shell that starts it; `echo 0` after).

`python -m bench.suites.spin idle [MODEL]` measures the other side, what a session costs while
the app waits between replies: the process CPU time in 50 ms windows of waiting after a run, with
Amber's policy (AMBER_ORT_SPIN auto, off) and ORT's default (on) for contrast.

Knobs: AMBER_BENCH_SPIN_SETTINGS ("name;name", from CATALOG), AMBER_BENCH_SPIN_BUSY ("0,1,2"),
AMBER_BENCH_SPIN_ROUNDS, AMBER_BENCH_SPIN_CONDITION (a label for the tables), AMBER_BENCH_SPIN_JSON
(where the run's figures go); `python -m bench.suites.spin write [--notes F] RUN.json …` writes
the section from saved runs.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from engine.runtime.host.spin import ALLOW, BACKOFF, BLOCK, DURATION, STOP

from bench.harness import common
from bench.harness.common import Section, median, table

# name -> ORT session config entries (CPU session). The first is ORT's own default (the reference
# of the "÷ default" columns). AMBER_BENCH_SPIN_SETTINGS="name;name" picks others from CATALOG.
CATALOG: dict[str, dict[str, str]] = {
    "spin (ORT default)": {ALLOW: "1"},
    "no spin": {ALLOW: "0"},
    "spin 10 µs": {ALLOW: "1", DURATION: "10"},
    "spin 20 µs": {ALLOW: "1", DURATION: "20"},
    "spin 50 µs": {ALLOW: "1", DURATION: "50"},
    "spin 100 µs": {ALLOW: "1", DURATION: "100"},
    "spin 500 µs": {ALLOW: "1", DURATION: "500"},
    "spin 1000 µs, backoff 8": {ALLOW: "1", DURATION: "1000", BACKOFF: "8"},
    "spin 50 µs, backoff 8": {ALLOW: "1", DURATION: "50", BACKOFF: "8"},
    "spin, stop after run": {ALLOW: "1", STOP: "1"},
    "no spin, dynamic blocks 4": {ALLOW: "0", BLOCK: "4"},
    "spin 50 µs, dynamic blocks 4": {ALLOW: "1", DURATION: "50", BLOCK: "4"},
    "spin 100 µs, dynamic blocks 4": {ALLOW: "1", DURATION: "100", BLOCK: "4"},
}
SETTINGS: dict[str, dict[str, str]] = {k: CATALOG[k] for k in (
    "spin (ORT default)", "no spin", "spin 20 µs", "spin 50 µs", "spin 100 µs", "spin 1000 µs, backoff 8",
    "no spin, dynamic blocks 4", "spin 50 µs, dynamic blocks 4")}


def chosen_settings() -> dict[str, dict[str, str]]:
    names = [n.strip() for n in os.environ.get("AMBER_BENCH_SPIN_SETTINGS", "").split(";") if n.strip()]
    unknown = [n for n in names if n not in CATALOG]
    if unknown:
        raise SystemExit(f"spin: unknown setting(s) {unknown}; choose from {list(CATALOG)}")
    return {n: CATALOG[n] for n in names} if names else SETTINGS


BUSY = tuple(int(x) for x in os.environ.get("AMBER_BENCH_SPIN_BUSY", "0,1,2").split(","))
# A pure-Python loop that ends when the bench that started it is gone (never an orphan spinning on).
BUSY_CODE = ("import os\nparent = os.getppid()\nwhile os.getppid() == parent:\n"
             "    for _ in range(1000000):\n        pass\n")


# ---- worker (a fresh process per setting) ---------------------------------------------------------
def worker_spin(model_dir: str, entries: dict[str, str], threads: int, tokens: list[int],
                prefill: int, contexts: list[int], steps: int, runs: int) -> dict[str, Any]:
    """Prefill and decode figures with `entries` as the CPU session's spin settings."""
    import numpy as np

    from engine.runtime import providers
    providers.spin_entries = lambda *a, **k: dict(entries)   # type: ignore[assignment]
    from engine.api import SamplingParams
    from engine.generation.generate import Generator
    from engine.runtime.model import load_model
    from engine.text.sampling import Sampler, resolve_sampling
    model = load_model(model_dir, "cpu", threads)
    so = model.session.get_session_options()
    applied = {k: so.get_session_config_entry(k) for k in entries}
    runner = Generator(model).runner
    sampler = Sampler(resolve_sampling(SamplingParams(greedy=True), model.generation_config))
    out: dict[str, Any] = {"applied": applied, "prefill": [], "decode": {}, "cpu_per_token": {}}

    def one_prefill() -> float:
        cache = runner.new_cache()
        t0 = time.perf_counter()
        runner.forward(cache, tokens[:prefill])
        return time.perf_counter() - t0

    one_prefill()   # warm-up
    out["prefill"] = [prefill / one_prefill() for _ in range(runs)]
    for ctx in contexts:
        cache = runner.new_cache()
        cache.reserve(ctx + steps + 8)
        history = np.empty(ctx + steps + 16, dtype=np.int64)
        history[:ctx] = tokens[:ctx]
        first = runner.forward(cache, tokens[:ctx])

        def decode(n_steps: int, cache: Any = cache, ctx: int = ctx, first: Any = first,
                   history: Any = history) -> tuple[float, float]:
            cache.truncate(ctx)
            n = ctx
            c0, t0 = time.process_time(), time.perf_counter()
            tok = sampler.sample(first, history[:n])
            for _ in range(n_steps):
                history[n] = tok
                n += 1
                tok = sampler.sample(runner.forward(cache, [tok]), history[:n])
            return n_steps / (time.perf_counter() - t0), (time.process_time() - c0) / n_steps

        decode(4)
        pairs = [decode(steps) for _ in range(runs)]
        out["decode"][str(ctx)] = [r for r, _ in pairs]
        out["cpu_per_token"][str(ctx)] = [c for _, c in pairs]
    return out


# ---- the idle cost --------------------------------------------------------------------------------
def idle_cpu(model_dir: Path, mode: str, windows: int = 10, seconds: float = 0.05,
             threads: int = 2) -> list[float]:
    """Process CPU seconds in each of `windows` waits of `seconds` right after a decode step, the
    session made under AMBER_ORT_SPIN=`mode` (ORT's default "on" goes on spinning for milliseconds
    after a run; auto's spin is bounded to microseconds; off never spins)."""
    import resource

    from engine.runtime.host import spin
    from engine.runtime.model import load_model
    from engine.runtime.runner import Runner
    os.environ[spin.SPIN_ENV] = mode
    try:
        runner = Runner(load_model(model_dir, provider="cpu", threads=threads))
    finally:
        del os.environ[spin.SPIN_ENV]
    cache = runner.new_cache()
    runner.forward(cache, list(range(3, 60)))
    used = []
    for _ in range(windows):
        runner.forward(cache, [5])
        before = resource.getrusage(resource.RUSAGE_SELF)
        time.sleep(seconds)
        after = resource.getrusage(resource.RUSAGE_SELF)
        used.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
    return used


def print_idle_cpu(shape: str = "135m") -> None:
    label, folder = _model(shape)
    print(f"spin idle: {label}, CPU ms in each 50 ms wait after a decode step (median, max of 10)")
    for mode in ("auto", "off", "on"):
        used = idle_cpu(folder, mode)
        print(f"  AMBER_ORT_SPIN={mode:<4}  {median(used) * 1000:6.2f}  {max(used) * 1000:6.2f}")


# ---- the load generator ---------------------------------------------------------------------------
class Busy:
    """`n` busy processes at normal priority for the duration of a `with`; afterwards `.share` is the
    CPU they got per process (CPU seconds ÷ wall seconds, from wait4)."""

    def __init__(self, n: int):
        self.n, self.procs, self.share = n, [], None   # type: ignore[var-annotated]

    def __enter__(self) -> "Busy":
        self.t0 = time.perf_counter()
        self.procs = [subprocess.Popen([sys.executable, "-c", BUSY_CODE]) for _ in range(self.n)]
        time.sleep(0.3 if self.n else 0)   # let them reach the loop
        return self

    def __exit__(self, *exc: Any) -> None:
        wall = time.perf_counter() - self.t0
        cpu = []
        for p in self.procs:
            p.kill()
            _, _, usage = os.wait4(p.pid, 0)
            cpu.append(usage.ru_utime + usage.ru_stime)
        self.share = (sum(cpu) / len(cpu) / wall) if cpu else None


# ---- the bench ------------------------------------------------------------------------------------
def _model(shape: str) -> tuple[str, Path]:
    if shape in ("135m", "default", "tiny"):
        from bench.suites.engine import model_dir
        return "SmolLM2-135M (default model)", model_dir()
    folder = Path(shape)
    if not (folder / "model.onnx").is_file():
        raise SystemExit(f"spin: {folder}: not a converted model folder (give 135m or a folder with model.onnx)")
    return folder.name, folder


def measure_model(shape: str, quick: bool, settings: dict[str, dict[str, str]]) -> dict[str, Any]:
    label, folder = _model(shape)
    big = shape not in ("135m", "default", "tiny")
    import random
    cfg = json.loads((folder / "config.json").read_text())
    rng = random.Random(0)
    tokens = [rng.randrange(300, int(cfg.get("vocab_size", 49152)) - 10) for _ in range(1024)]
    rounds = int(os.environ.get("AMBER_BENCH_SPIN_ROUNDS") or (1 if quick else 2))
    args = {"model_dir": str(folder), "threads": common.THREADS, "tokens": tokens,
            "prefill": 128 if quick else 512, "contexts": [100] if quick else [100, 1000],
            "steps": 8 if quick else (16 if big else 32), "runs": 1 if quick else 2}
    raw: dict[str, list[dict[str, Any]]] = {}
    names = list(settings)
    for rnd in range(rounds):
        for busy in BUSY:
            # Rotated each round, so no setting always runs first after a change of load.
            order = names[rnd % len(names):] + names[:rnd % len(names)]
            for name in order:
                load = common.load_average()
                with Busy(busy) as b:
                    r = common.run_worker("bench.suites.spin", "worker_spin", {**args, "entries": settings[name]},
                                          timeout=1800)
                d = r.data
                d.update(busy=busy, load=load, busy_share=b.share, name=name, round=rnd)
                raw.setdefault(f"{name}|{busy}", []).append(d)
                print(f"spin: {label} {name} busy {busy}: prefill {median(d['prefill']):.0f} tok/s, decode "
                      + ", ".join(f"ctx {c}: {median(v):.1f}" for c, v in d["decode"].items())
                      + f" tok/s; busy got {b.share or 0:.2f} core each; load before {load:.2f}", flush=True)
    cells: dict[str, dict[str, Any]] = {}
    for key, ds in raw.items():
        cell: dict[str, Any] = {"prefill": median(x for d in ds for x in d["prefill"]),
                                "load": median(d["load"] for d in ds), "processes": len(ds),
                                "applied": ds[0]["applied"]}
        for c in ds[0]["decode"]:
            cell[f"decode_{c}"] = median(x for d in ds for x in d["decode"][c])
            cell[f"cpu_ms_{c}"] = 1000 * median(x for d in ds for x in d["cpu_per_token"][c])
        # Against the first setting (ORT's default) at the same busy count in the same round: the
        # processes ran back to back, so the machine's other load moved less between them.
        name, busy = key.split("|")
        base = {d["round"]: d for d in raw.get(f"{names[0]}|{busy}", [])}
        for c in ds[0]["decode"]:
            ratios = [median(d["decode"][c]) / median(base[d["round"]]["decode"][c]) for d in ds if d["round"] in base]
            cell[f"vs_default_{c}"] = median(ratios) if ratios else None
        shares = [d["busy_share"] for d in ds if d["busy_share"] is not None]
        cell["busy_share"] = median(shares) if shares else None
        cells[key] = cell
    return {"label": label, "folder": str(folder), "cells": cells, "settings": settings, "args":
            {k: v for k, v in args.items() if k != "tokens"}, "rounds": rounds}


def run(quick: bool = False, shapes: list[str] | None = None,
        settings: dict[str, dict[str, str]] | None = None) -> dict[str, Any]:
    shapes = [s for s in (shapes or ["135m"]) if s != "tiny"] or ["135m"]
    load0 = common.load_average()
    models = [measure_model(s, quick, settings or chosen_settings()) for s in shapes]
    condition = os.environ.get("AMBER_BENCH_SPIN_CONDITION") or f"nice {os.nice(0)}"
    for m in models:
        m["condition"] = condition
    res = {"models": models, "facts": common.machine_facts(), "load_before": load0, "quick": quick}
    out = Path(os.environ.get("AMBER_BENCH_SPIN_JSON") or (Path(os.environ.get("TMPDIR", "/tmp")) / "bench_spin.json"))
    out.write_text(json.dumps(res, indent=1))
    print(f"spin: raw figures in {out}", flush=True)
    return res


def section(res: dict[str, Any]) -> Section:
    parts = ["`python -m bench spin [--shapes 135m,/converted/folder]` (bench/suites/spin.py). Amber's engine "
             "path (Runner.forward + greedy Sampler), 2 intra-op threads, one fresh process per (setting, "
             "competing processes), interleaved and rotated, medians over rounds. *busy*: pure-Python busy "
             "loops at normal priority started before Amber's process and killed after it; *busy got*: the "
             "CPU each of them got meanwhile (cores; 1.00 = a whole core). *CPU ms/token*: Amber's process "
             "CPU time per decoded token at context 100 (spinning counts). *load*: the 1-minute load average "
             "before the process (other sessions share this VM). *÷ default*: median over rounds of the ratio to "
             "ORT's default run at the same busy count in the same round (back to back)."]
    for m in res["models"]:
        contexts = [k.split("_")[1] for k in next(iter(m["cells"].values())) if k.startswith("decode_")]
        rows = []
        counts = sorted({int(k.split("|")[1]) for k in m["cells"]})
        for name in m["settings"]:
            for busy in counts:
                c = m["cells"].get(f"{name}|{busy}")
                if c is None:
                    continue
                rows.append([name, str(busy), f"{c['prefill']:.0f}"]
                            + [f"{c[f'decode_{x}']:.1f}" for x in contexts]
                            + [f"{c[f'vs_default_{x}']:.2f}×" if c.get(f"vs_default_{x}") else "—" for x in contexts]
                            + [f"{c[f'cpu_ms_{contexts[0]}']:.2f}",
                               f"{c['busy_share']:.2f}" if c["busy_share"] is not None else "—",
                               f"{c['load']:.1f}"])
        parts += ["", f"**{m['label']}**, {m.get('condition', '')} ({m['rounds']} rounds, "
                  f"{m['args']['steps']} decode steps × "
                  f"{m['args']['runs']} runs per process):", "",
                  table(["setting", "busy", f"prefill {m['args']['prefill']} tok/s"]
                        + [f"decode ctx {x} tok/s" for x in contexts]
                        + [f"decode ctx {x} ÷ default" for x in contexts]
                        + ["CPU ms/token", "busy got", "load"], rows)]
    every: dict[str, dict[str, str]] = {}
    for m in res["models"]:
        every.update(m["settings"])
    parts += ["", "Settings (ORT session config entries): " + "; ".join(
        f"*{n}*: " + ", ".join(f"`{k}={v}`" for k, v in e.items()) for n, e in every.items()),
        "", common.facts_line(res["facts"], res["load_before"])]
    return Section("spin", "ONNX Runtime thread spinning under competing load", "\n".join(parts),
                   common.ORDER.get("spin", 100))


def combine(paths: list[str]) -> dict[str, Any]:
    """Several runs' JSON (e.g. one per model or machine condition) as one result for `section`."""
    runs = [json.loads(Path(p).read_text()) for p in paths]
    latest = max(runs, key=lambda r: r["facts"]["date"])
    return {"models": [m for r in runs for m in r["models"]], "facts": latest["facts"],
            "load_before": runs[0]["load_before"], "quick": any(r["quick"] for r in runs)}


if __name__ == "__main__":
    # `python -m bench.suites.spin write [--notes FILE.md] RUN.json [RUN.json ...]`: the section from
    # saved runs (each `python -m bench spin` run saves its JSON: AMBER_BENCH_SPIN_JSON), with FILE's
    # text (what the figures decided) first.
    # `python -m bench.suites.spin idle [MODEL]`: an idle session's CPU under each spin mode.
    args = sys.argv[1:]
    if args[:1] == ["idle"] and len(args) <= 2:
        print_idle_cpu(*args[1:])
        raise SystemExit(0)
    if args[:1] != ["write"] or len(args) < 2:
        raise SystemExit("usage: python -m bench.suites.spin write [--notes FILE.md] RUN.json [RUN.json ...]\n"
                         "       python -m bench.suites.spin idle [135m | CONVERTED_FOLDER]")
    args = args[1:]
    notes = ""
    if args[:1] == ["--notes"]:
        notes, args = Path(args[1]).read_text(encoding="utf-8").strip(), args[2:]
    sec = section(combine(args))
    if notes:
        sec.body = notes + "\n\n" + sec.body
    common.write_section(sec)
    print(f"spin: section written to {common.BENCHMARKS_MD}")
