"""Shared benchmark helpers: timing, workers in fresh processes with their peak RSS, page-cache
control, machine facts, and the writer that updates `docs/BENCHMARKS.md` one section at a time.

Standard library only at import time: workers may run under another interpreter (the side venv
with llama-cpp-python / onnxruntime-genai) that has neither Amber nor its dependencies.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from engine.runtime.host.hugepages import tunable_env

from bench.harness.llama_build import side_venv

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
BENCHMARKS_MD = DOCS / "BENCHMARKS.md"
RESULT_MARK = "@@BENCH-RESULT@@ "
# The thread count every engine gets (llama.cpp's n_threads, ORT's intra-op threads).
THREADS = int(os.environ.get("AMBER_BENCH_THREADS", "2"))
# Optional side environment for engines that cannot share Amber's venv (see `python -m bench deps`).
# Keyed by the CPU features llama.cpp is built for (bench/harness/llama_build.py): `bench-venv` for the AVX2
# baseline, `bench-venv-avx512-…` on a CPU with AVX-512, so each machine finds a build made for it.
SIDE_VENV = side_venv(Path(os.environ.get("AMBER_TEST_HOME") or REPO / ".amber-dev"))


# ---- timing ---------------------------------------------------------------------------------------
def median(values: Iterable[float]) -> float:
    return float(statistics.median(list(values)))


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """Seconds one call took, and its result."""
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def repeat(fn: Callable[[], Any], runs: int, warmup: int = 1) -> list[float]:
    """Seconds per call for `runs` calls after `warmup` untimed ones."""
    for _ in range(warmup):
        fn()
    return [timed(fn)[0] for _ in range(runs)]


def spread(values: Sequence[float]) -> str:
    """'min–max' of the runs, for the tables (how noisy a median is)."""
    return f"{min(values):.4g}–{max(values):.4g}" if values else ""


# ---- page cache -----------------------------------------------------------------------------------
def drop_from_page_cache(paths: Iterable[Path]) -> int:
    """Evicts files' clean pages from the page cache (no root needed); returns the bytes covered."""
    total = 0
    for p in paths:
        try:
            fd = os.open(p, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.fsync(fd) if os.access(p, os.W_OK) else None   # dirty pages cannot be dropped
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            total += os.fstat(fd).st_size
        finally:
            os.close(fd)
    return total


def files_under(root: Path) -> list[Path]:
    return [p for p in Path(root).rglob("*") if p.is_file()]


def read_file_seconds(path: Path, chunk: int = 8 << 20) -> float:
    """Seconds to read a whole file into one reusable buffer (no Python-level copies)."""
    buf = bytearray(chunk)
    view = memoryview(buf)
    start = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        while f.readinto(view):
            pass
    return time.perf_counter() - start


def read_bandwidth(folder: Path, size: int = 256 << 20, runs: int = 3) -> dict[str, float]:
    """Sequential read bandwidth (bytes/s) of the file system holding `folder`: cold (the file
    dropped from the page cache first) and warm (already cached), median of `runs`."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / ".bench-bandwidth.bin"
    try:
        with open(path, "wb") as f:
            block = os.urandom(1 << 20)
            for _ in range(size >> 20):
                f.write(block)
            f.flush()
            os.fsync(f.fileno())
        cold, warm = [], []
        for _ in range(runs):
            drop_from_page_cache([path])
            cold.append(size / read_file_seconds(path))
            warm.append(size / read_file_seconds(path))
        return {"cold_bytes_per_s": median(cold), "warm_bytes_per_s": median(warm),
                "cold_runs": cold, "warm_runs": warm, "file_bytes": size}
    finally:
        path.unlink(missing_ok=True)


def resident_bytes(paths: Iterable[Path]) -> int | None:
    """Bytes of the files currently in the page cache (util-linux `fincore`), None if unknown."""
    paths = [str(p) for p in paths]
    if not paths:
        return 0
    try:
        out = subprocess.run(["fincore", "--bytes", "--noheadings", "--raw", "--output", "RES", *paths],
                             capture_output=True, text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return sum(int(x) for x in out.split() if x.isdigit())


# ---- workers in fresh processes -------------------------------------------------------------------
class WorkerError(RuntimeError):
    pass


@dataclass
class WorkerResult:
    data: dict[str, Any]
    peak_rss_bytes: int          # the worker's whole life (getrusage of the child: ru_maxrss)
    wall_s: float
    log: str = ""


def emit(data: dict[str, Any]) -> None:
    """Called by a worker: its result, as one marked JSON line on stdout."""
    sys.stdout.write(RESULT_MARK + json.dumps(data) + "\n")
    sys.stdout.flush()


def run_worker(module: str, func: str, args: dict[str, Any] | None = None, *, python: str | None = None,
               timeout: float = 900, env: dict[str, str] | None = None, echo: bool = False) -> WorkerResult:
    """Runs `module.func(**args)` in a fresh interpreter; the function calls `emit(...)` (or returns a
    dict). Returns the emitted data and the child's own peak RSS, read with wait4()."""
    code = ("import json,sys; from bench.harness.common import _worker_main; "
            f"_worker_main({module!r}, {func!r}, json.loads(sys.argv[1]))")
    cmd = [python or sys.executable, "-c", code, json.dumps(args or {})]
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = str(REPO) + (os.pathsep + full_env["PYTHONPATH"] if full_env.get("PYTHONPATH") else "")
    full_env.setdefault("PYTHONUNBUFFERED", "1")
    # Every engine's worker runs with the malloc huge-page tunable that Amber's built app sets
    # for itself (engine.runtime.host.hugepages): the same environment for all, as the installed app runs.
    tuned = tunable_env(full_env)
    if tuned is not None:
        full_env["GLIBC_TUNABLES"] = tuned["GLIBC_TUNABLES"]
    full_env.update(env or {})
    with tempfile.TemporaryFile(mode="w+") as out:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, env=full_env)
        killer = threading.Timer(timeout, proc.kill)
        killer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            killer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - start
        out.seek(0)
        log = out.read()
    if echo and log.strip():
        print(log.rstrip())
    results = [json.loads(line[len(RESULT_MARK):]) for line in log.splitlines() if line.startswith(RESULT_MARK)]
    if proc.returncode != 0 or not results:
        tail = "\n".join(line for line in log.splitlines() if not line.startswith(RESULT_MARK))[-3000:]
        why = "timed out" if wall >= timeout else f"exit status {proc.returncode}"
        raise WorkerError(f"{module}.{func} {why}:\n{tail}")
    data: dict[str, Any] = {}
    for r in results:
        data.update(r)
    return WorkerResult(data, usage.ru_maxrss * 1024, wall, log)   # ru_maxrss is in KiB on Linux


def _worker_main(module: str, func: str, args: dict[str, Any]) -> None:
    import importlib
    result = getattr(importlib.import_module(module), func)(**args)
    if isinstance(result, dict):
        emit(result)
    sys.stdout.flush()
    # Skip interpreter teardown (ORT / llama.cpp destructors, background writer threads): the
    # measurements are done and some workers deliberately leave work unfinished.
    os._exit(0)


def side_python() -> str | None:
    """The side venv's interpreter, if `python -m bench deps` made one."""
    p = SIDE_VENV / "bin" / "python"
    return str(p) if p.is_file() else None


def python_with(module: str) -> str | None:
    """The first interpreter (this one, then the side venv) that can import `module`."""
    for py in (sys.executable, side_python()):
        if py is None:
            continue
        ok = subprocess.run([py, "-c", f"import {module}"], capture_output=True, timeout=120).returncode == 0
        if ok:
            return py
    return None


# ---- machine facts --------------------------------------------------------------------------------
def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_facts() -> dict[str, Any]:
    try:
        import onnxruntime as ort
        ort_version = ort.__version__
    except Exception:   # noqa: BLE001 # pragma: no cover - Amber always has it
        ort_version = "?"
    try:
        import psutil
        physical = psutil.cpu_count(logical=False)
        mem = psutil.virtual_memory().total
    except Exception:   # noqa: BLE001 - the host line then says less
        physical, mem = None, 0
    load = os.getloadavg()
    return {"cpu": cpu_model(), "logical_cores": os.cpu_count(), "physical_cores": physical,
            "memory_gib": round(mem / 2**30, 1), "ort": ort_version, "python": platform.python_version(),
            "os": f"{platform.system()} {platform.release()}", "threads": THREADS,
            "load_avg": [round(x, 2) for x in load],
            "date": _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")}


def load_average() -> float:
    return os.getloadavg()[0]


def facts_line(facts: dict[str, Any], load_before: float | None = None, extra: str = "") -> str:
    load = f"load average {facts['load_avg'][0]:.2f}"
    if load_before is not None:
        load = f"load average {load_before:.2f} at the start, {facts['load_avg'][0]:.2f} at the end"
    cores = f"{facts['logical_cores']} logical cores"
    if facts.get("physical_cores"):
        cores += f" ({facts['physical_cores']} physical)"
    return (f"_Measured {facts['date']} on {facts['cpu']}, {cores}, {facts['memory_gib']} GiB, "
            f"{facts['os']}, Python {facts['python']}, ONNX Runtime {facts['ort']}, "
            f"{facts['threads']} threads; {load}.{(' ' + extra) if extra else ''}_")


# ---- markdown -------------------------------------------------------------------------------------
def ok(passed: bool | None) -> str:
    return "—" if passed is None else ("✅" if passed else "❌")


def fmt(x: Any, digits: int = 3) -> str:
    if x is None:
        return "—"
    if isinstance(x, float):
        if x != x:   # NaN
            return "—"
        if abs(x) >= 1000:
            return f"{x:,.0f}"
        return f"{x:.{digits}g}" if abs(x) < 100 else f"{x:.0f}"
    if isinstance(x, int):
        return f"{x:,}"
    return str(x)


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(fmt(c) if not isinstance(c, str) else c for c in row) + " |")
    return "\n".join(lines)


@dataclass
class Section:
    key: str            # stable id: the markers around the section use it
    title: str
    body: str           # markdown after the heading
    order: int = 50     # position among sections (lower first); unknown sections keep theirs

    def render(self) -> str:
        return (f"<!-- bench:{self.key}:start -->\n## {self.title}\n\n{self.body.strip()}\n"
                f"<!-- bench:{self.key}:end -->")


ORDER = {"summary": 0, "engine": 10, "compare": 20, "sessions": 30, "prefix": 35, "store": 40, "convert": 45, "gui": 50,
         "server": 60}
ORDER.update({"perf18": 21, "perf18-notes": 22})   # real sizes, then what the figures show
# the spin section right before the notes (the others at 100 keep their order).
ORDER.update({"spin": 100.1, "notes": 100.2, "perf-decode": 100.3})
HEADER = """# Amber benchmarks

Written by `make bench` (`python -m bench [engine|compare|sessions|prefix|store|gui ...] [--quick]`).
Each bench rewrites only its own section below; the others keep their last results and dates.
Figures are medians of several runs after a warm-up unless a row says otherwise.
"""
_SECTION = re.compile(r"<!-- bench:(?P<key>[\w-]+):start -->.*?<!-- bench:(?P=key):end -->", re.S)


@dataclass
class _Doc:
    header: str
    sections: dict[str, str] = field(default_factory=dict)   # key -> rendered text
    # key -> the hand-written text after that section, up to the next one (kept with it, never rewritten)
    after: dict[str, str] = field(default_factory=dict)


def _parse(text: str) -> _Doc:
    first = _SECTION.search(text)
    header = text[:first.start()].rstrip() + "\n" if first else (text.rstrip() + "\n" if text.strip() else HEADER)
    doc = _Doc(header)
    matches = list(_SECTION.finditer(text))
    for i, m in enumerate(matches):
        doc.sections[m.group("key")] = m.group(0)
        stop = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        doc.after[m.group("key")] = text[m.end():stop].strip()
    return doc


def write_section(section: Section, path: Path = BENCHMARKS_MD) -> None:
    """Replaces (or adds) one section of the benchmarks file, keeping every other one as it was,
    and the hand-written text that follows any section where it is."""
    text = path.read_text(encoding="utf-8") if path.is_file() else HEADER
    doc = _parse(text)
    doc.sections[section.key] = section.render()
    keys = sorted(doc.sections, key=lambda k: (ORDER.get(k, 100), k))
    parts = [doc.sections[k] + ("\n\n" + doc.after[k] if doc.after.get(k) else "") for k in keys]
    out = doc.header.rstrip() + "\n\n" + "\n\n".join(parts) + "\n"
    write_page(path, out)


def write_page(path: Path, text: str) -> None:
    """Writes a docs page whole (engine.base.safefs.atomic_write): never a half-written page."""
    from engine.base.safefs import atomic_write
    atomic_write(path, text, parents=True)


# ---- token streams shared by every engine ---------------------------------------------------------
WORDS = ("the river", "a quiet morning", "engineers", "measured", "seventeen", "lanterns", "beneath",
         "copper roofs", "while", "the archive", "slowly", "remembered", "every", "unfinished letter",
         "and", "a cat", "crossed", "the square", "because", "nobody", "asked", "why", "ninety",
         "bridges", "were", "painted", "blue", "in", "winter", ";", "meanwhile,", "the", "bakery",
         "counted", "loaves", "of", "rye", "bread", "for", "the", "festival", ".", "Later", "that",
         "evening", "she", "wrote", "about", "tides", ",", "maps", "and", "clocks", "—", "then",
         "slept", "(", "briefly", ")", "42", "kilometres", "north", "of", "Lyon", "!")


def pseudo_text(n_words: int, seed: int) -> str:
    """Random-ish English-like text (a reproducible stream of words), for prompts and histories."""
    import random
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


def op_session(model: bytes, lib: Path, threads: int, *, spinning: bool = False) -> Any:
    """An ONNX Runtime CPU session over `model` with `lib`'s custom ops and `threads` intra-op
    threads (spinning off unless asked), for the by-hand op benches."""
    import onnxruntime as ort  # noqa: PLC0415 - only the op benches need it
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.log_severity_level = 3
    if not spinning:
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.register_custom_ops_library(str(lib))
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def op_library_pair(against: str) -> dict[str, Path] | None:
    """{"this": this tree's built op library, "other": `against`} for the by-hand A/B benches; None,
    with a note on stderr, when this tree's library is not built."""
    from engine import native  # noqa: PLC0415 - only the A/B benches need it
    this = native.library_path()
    if this is None:
        print("the native library is not built: python -m engine.native.build", file=sys.stderr)
        return None
    return {"this": this, "other": Path(against)}


def decode_binding(model: Any, b: int, ctx: int, keep: list[Any]) -> Any:
    """An ONNX Runtime IO binding for one bare decode step of `b` rows, each at context `ctx`, with
    the KV bound in place as engine.runtime.batcher binds it. The numpy buffers the OrtValues view
    go into `keep` (the bound values do not own them)."""
    import numpy as np
    import onnxruntime as ort

    from engine.runtime.kvcache import bind_kv_shared
    kv, session = model.kv, model.session
    vocab = next(o.shape[2] for o in session.get_outputs() if o.name == model.logits_name)
    arena = np.zeros((2, kv.n_layers, b, kv.kv_heads, ctx + 8, kv.head_dim), kv.dtype)
    bd = session.io_binding()
    logits = np.empty((b, 1, vocab), np.float32)
    bd.bind_ortvalue_output(model.logits_name, ort.OrtValue.ortvalue_from_numpy(logits))
    bind_kv_shared(bd, kv, [(ort.OrtValue.ortvalue_from_numpy(arena[0, i]),
                             ort.OrtValue.ortvalue_from_numpy(arena[1, i])) for i in range(kv.n_layers)])
    bd.bind_cpu_input("input_ids", np.full((b, 1), 5, np.int64))
    bd.bind_cpu_input("attention_mask", np.ones((b, ctx + 1), np.int64))
    if "position_ids" in model.input_names:
        bd.bind_cpu_input("position_ids", np.full((b, 1), ctx, np.int64))
    keep.append((arena, logits))
    return bd
