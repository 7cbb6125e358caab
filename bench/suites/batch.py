"""Concurrent chats: aggregate decode tok/s of 1, 2 and 4 sessions generating together
through the real SessionManager (one thread per session, as the API server runs its clients),
with their decode steps batched into one ONNX Runtime call (engine.runtime.batcher) or taking
turns (`Runner.batch_decode = False`, what Amber did before).

Aggregate decode tok/s counts the tokens every session streamed while ALL of them were decoding
(from the last session's first token to the first session's last one), over that window; with one
session it is that session's decode rate. Modes alternate within one process (batched, turns,
batched, …), so a change in machine load hits both alike; the ratios are the figures to read.
Target: with 4 sessions, aggregate decode ≥ 2.5× one session.

The default model always; `--shapes 0.5b` adds a random-weight Qwen2.5-0.5B shape in Q4_0
(bench.suites.convert's writer, Amber's converter), made in a temporary folder and deleted after.
"""
from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.harness import common
from bench.harness.common import Section, ok, table

COUNTS = (1, 2, 4)
TARGET = 2.5
PROMPT_WORDS = 40


def _session_run(mgr: Any, sid: str, ids: list[int], n_new: int, start: threading.Barrier,
                 out: dict[str, Any]) -> None:
    from engine.api import GenerationResult, SamplingParams, TextChunk
    sampling = SamplingParams(greedy=True, repetition_penalty=1.0, max_new_tokens=n_new)
    stamps: list[tuple[float, int]] = []
    start.wait()
    for event in mgr.generate_tokens(sid, ids, sampling):
        if isinstance(event, TextChunk) and event.token_ids:
            stamps.append((time.perf_counter(), len(event.token_ids)))
        elif isinstance(event, GenerationResult):
            out["tokens"] = len(event.token_ids)
    out["stamps"] = stamps


def measure(mgr: Any, prompts: list[list[int]], n_new: int, batched: bool) -> dict[str, Any]:
    """One round: len(prompts) temporary sessions generate at once; the aggregate decode rate."""
    from engine.api import SessionKind
    runner = mgr.generator.runner
    runner.batch_decode = batched
    batcher = runner.batcher
    steps0, rows0 = (batcher.batched_steps, batcher.batched_rows) if batcher else (0, 0)
    ids = [mgr.open(kind=SessionKind.TEMPORARY).session_id for _ in prompts]
    outs: list[dict[str, Any]] = [{} for _ in prompts]
    barrier = threading.Barrier(len(prompts))
    threads = [threading.Thread(target=_session_run, args=(mgr, sid, p, n_new, barrier, o))
               for sid, p, o in zip(ids, prompts, outs, strict=True)]
    samples: list[tuple[float, float]] = []      # (perf_counter, process CPU seconds), every ~5 ms
    done = threading.Event()

    def sample_cpu() -> None:
        while not done.is_set():
            samples.append((time.perf_counter(), time.process_time()))
            done.wait(0.005)
    sampler = threading.Thread(target=sample_cpu, daemon=True)
    sampler.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    sampler.join()
    for sid in ids:
        mgr.close(sid)
    # The window in which every session was decoding (each session's first token is the end of
    # its prefill; its stamps after that are decode steps).
    lo = max(o["stamps"][0][0] for o in outs)
    hi = min(o["stamps"][-1][0] for o in outs)
    count = sum(n for o in outs for t, n in o["stamps"] if lo < t <= hi)
    inside = [c for t, c in samples if lo <= t <= hi]
    cpu_ms = 1000 * (inside[-1] - inside[0]) / count if len(inside) > 1 and count else float("nan")
    res = {"tok_s": count / (hi - lo) if hi > lo and count else float("nan"), "window_s": hi - lo,
           "cpu_ms_per_token": cpu_ms, "tokens": [o.get("tokens", 0) for o in outs]}
    if batcher is not None:
        steps, rows = batcher.batched_steps - steps0, batcher.batched_rows - rows0
        res["rows_per_batch"] = rows / steps if steps else 0.0
    return res


def raw_steps(model: Any, blocks: int, per_block: int = 10, ctx: int = 100) -> dict[str, float]:
    """ms per decode step of the bare ONNX Runtime call at batch 1 and batch 4 (each row at
    context `ctx`, KV bound in place as the batcher binds it), in alternating blocks."""
    session = model.session
    keep: list[Any] = []
    binds = {b: common.decode_binding(model, b, ctx, keep) for b in (1, 4)}
    times: dict[int, list[float]] = {1: [], 4: []}
    for b in (1, 4):
        session.run_with_iobinding(binds[b])      # warm-up
    for _ in range(blocks):
        for b in (1, 4):
            t0 = time.perf_counter()
            for _ in range(per_block):
                session.run_with_iobinding(binds[b])
            times[b].append((time.perf_counter() - t0) / per_block)
    ms1, ms4 = 1000 * statistics.median(times[1]), 1000 * statistics.median(times[4])
    return {"ms_1": ms1, "ms_4": ms4, "ratio": 4 * ms1 / ms4}


# (label, K, N, bits): layer matrices of the benched models, for the kernel's own cost by rows.
MATMULS = (("135M gate+up", 576, 3072, 4), ("135M lm_head (8-bit)", 576, 49152, 8),
           ("0.5B gate+up", 896, 9728, 4), ("0.5B down", 4864, 896, 4))


def matmul_rows(blocks: int = 3, per_block: int = 100) -> list[dict[str, Any]]:
    """µs of one MatMulNBits (block 32, accuracy level 4 as Amber's graphs use) for 1 and 4 rows,
    random weights, alternating blocks: how much a 4-row batch costs the kernel itself."""
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
    out = []
    for label, k, n, bits in MATMULS:
        rng = np.random.default_rng(0)
        w = rng.integers(0, 255, (n, k // 32, 32 * bits // 8), dtype=np.uint8)
        scales = (rng.random(n * k // 32, dtype=np.float32) * 0.01).astype(np.float32)
        node = helper.make_node("MatMulNBits", ["A", "B", "S"], ["Y"], domain="com.microsoft", K=k, N=n,
                                bits=bits, block_size=32, accuracy_level=4)
        graph = helper.make_graph([node], "mm", [helper.make_tensor_value_info("A", TensorProto.FLOAT, ["M", k])],
                                  [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["M", n])],
                                  [numpy_helper.from_array(w, "B"), numpy_helper.from_array(scales, "S")])
        proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                        helper.make_opsetid("com.microsoft", 1)], ir_version=10)
        so = ort.SessionOptions()
        so.intra_op_num_threads = common.THREADS
        sess = ort.InferenceSession(proto.SerializeToString(), so, providers=["CPUExecutionProvider"])
        feeds = {m: {"A": rng.random((m, k), dtype=np.float32)} for m in (1, 4)}
        times: dict[int, list[float]] = {1: [], 4: []}
        for m in (1, 4):
            sess.run(None, feeds[m])
        for _ in range(blocks):
            for m in (1, 4):
                t0 = time.perf_counter()
                for _ in range(per_block):
                    sess.run(None, feeds[m])
                times[m].append((time.perf_counter() - t0) / per_block * 1e6)
        us1, us4 = statistics.median(times[1]), statistics.median(times[4])
        out.append({"label": label, "k": k, "n": n, "bits": bits, "us_1": us1, "us_4": us4, "ratio": us4 / us1})
        print(f"batch: MatMulNBits {label} {k}x{n} {bits}-bit: 1 row {us1:.0f} us, 4 rows {us4:.0f} us "
              f"({us4 / us1:.2f}x)", flush=True)
    return out


# (label, K, N, GGML type): the same matrices in the native form's GGUF types (the default model's
# layers are Q4_1, its lm_head Q8_0; the 0.5B shape here is Q4_0).
NATIVE_MATMULS = (("135M gate+up", 576, 3072, 3), ("135M down", 1536, 576, 3), ("135M lm_head", 576, 49152, 8),
                  ("0.5B gate+up", 896, 9728, 2), ("0.5B down", 4864, 896, 2))
GGML_NAMES = {2: "Q4_0", 3: "Q4_1", 8: "Q8_0"}


def native_matmul_rows(blocks: int = 3, per_block: int = 100) -> list[dict[str, Any]]:
    """µs of one ai.amber.GgufMatMul (the native form's op, engine/native) for 1, 2 and 4 rows,
    random GGUF blocks, one intra-op thread, alternating blocks in one process, the median of the
    calls timed one by one; [] without the native library."""
    import numpy as np

    from engine import native
    lib = native.library_path()
    if lib is None:
        return []
    from tests.support.native_op import gguf_matmul_model, random_rows
    out = []
    for label, k, n, t in NATIVE_MATMULS:
        rng = np.random.default_rng(0)
        # one thread: the kernel's own cost by rows, less at the mercy of a loaded machine's scheduler
        sess = common.op_session(gguf_matmul_model(random_rows(t, n, k, rng), ggml_type=t, k=k, n=n, x_rank=2), lib, 1,
                                 spinning=True)
        feeds = {m: {"X": rng.standard_normal((m, k)).astype(np.float32)} for m in (1, 2, 4)}
        times: dict[int, list[float]] = {1: [], 2: [], 4: []}
        for m in feeds:
            sess.run(None, feeds[m])
        reps = max(5, per_block * 3072 // n)
        for _ in range(blocks):
            for m in feeds:
                for _ in range(reps):   # each call timed alone: a preemption spoils one sample, not a block
                    t0 = time.perf_counter()
                    sess.run(None, feeds[m])
                    times[m].append((time.perf_counter() - t0) * 1e6)
        us = {m: statistics.median(v) for m, v in times.items()}
        out.append({"label": label, "k": k, "n": n, "type": GGML_NAMES[t], "us_1": us[1], "us_2": us[2],
                    "us_4": us[4], "ratio": us[4] / us[1]})
        print(f"batch: GgufMatMul {label} {k}x{n} {GGML_NAMES[t]}: 1 row {us[1]:.0f} us, 2 rows {us[2]:.0f} us, "
              f"4 rows {us[4]:.0f} us ({us[4] / us[1]:.2f}x)", flush=True)
    return out


def _prompts(mgr: Any, n: int) -> list[list[int]]:
    """Distinct prompts of similar length (no shared prefix: each session prefills its own)."""
    return [mgr.generator.encode_prompt(common.pseudo_text(PROMPT_WORDS, seed=100 + i)) for i in range(n)]


def bench_model(folder: Path, label: str, n_new: int, reps: int) -> dict[str, Any]:
    from engine.runtime.model import load_model
    from engine.sessions.manager import SessionManager
    model = load_model(folder, "cpu", common.THREADS)
    state = Path(tempfile.mkdtemp(prefix="amber-bench-batch-"))
    mgr = SessionManager(model, state)
    try:
        measure(mgr, _prompts(mgr, 2), 8, True)      # warm-up: ORT's first runs, batch shapes
        runs: dict[tuple[int, str], list[dict[str, Any]]] = {}
        for rep in range(reps):
            for n in COUNTS:
                modes = ("batched", "turns") if rep % 2 == 0 else ("turns", "batched")
                for mode in modes if n > 1 else ("batched",):   # one session: nothing to batch
                    r = measure(mgr, _prompts(mgr, n), n_new, mode == "batched")
                    runs.setdefault((n, mode), []).append(r)
                    print(f"batch: {label} {n} session(s) {mode}: {r['tok_s']:.1f} tok/s aggregate "
                          f"(window {r['window_s']:.2f} s, {r['cpu_ms_per_token']:.1f} CPU ms/token, "
                          f"rows/batch {r.get('rows_per_batch', 0):.2f}, "
                          f"load {common.load_average():.2f})", flush=True)
        raw = raw_steps(model, blocks=max(3, 2 * reps))
        print(f"batch: {label} bare step: batch 1 {raw['ms_1']:.2f} ms, batch 4 {raw['ms_4']:.2f} ms "
              f"({raw['ratio']:.2f}x)", flush=True)
        med = {f"{n}_{mode}": statistics.median(r["tok_s"] for r in rs) for (n, mode), rs in runs.items()}
        rows = {f"{n}_{mode}": statistics.median(r.get("rows_per_batch", 0.0) for r in rs)
                for (n, mode), rs in runs.items()}
        cpu = {f"{n}_{mode}": statistics.median(r["cpu_ms_per_token"] for r in rs) for (n, mode), rs in runs.items()}
        return {"label": label, "raw": raw, "median_tok_s": med, "rows_per_batch": rows, "cpu_ms_per_token": cpu,
                "n_new": n_new, "reps": reps, "kv_heads": model.kv.kv_heads, "layers": model.kv.n_layers}
    finally:
        mgr.shutdown()
        shutil.rmtree(state, ignore_errors=True)


def _make_shape(shape: str, root: Path) -> tuple[Path, str]:
    """The shape's Q4_0 model converted into `root`, and its label: llama.cpp's own Q4_0 file of the
    shape where the bench models folder has it (bench.suites.shapes; its tied head is Q8_0, as
    llama.cpp quantizes a head whose width is no multiple of 256), else an all-Q4_0 GGUF written here."""
    from bench.suites import convert as bench_convert
    from bench.suites.shapes import models_root
    label = f"Qwen2.5-{shape.upper()} shape, Q4_0 (random)"
    made = models_root() / f"{shape}-Q4_0.gguf"
    if made.is_file():
        src, label = made, f"Qwen2.5-{shape.upper()} shape, llama.cpp Q4_0 (random)"
    else:
        src = root / f"{shape}-Q4_0.gguf"
        bench_convert._child("write_gguf_worker", {"path": str(src), "shape": shape, "wtype": "Q4_0"}, common.REPO)
    dest = root / f"{shape}-Q4_0"
    bench_convert._child("convert_worker", {"src": str(src), "dest": str(dest), "exact": False,
                                            "gpu_variant": False}, common.REPO)
    if src != made:
        src.unlink(missing_ok=True)
    return dest, label


FEATURES = ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_vbmi", "avx512_bf16",
            "avx_vnni", "amx_tile")


def cpu_features() -> str:
    """The SIMD features the kernels care about, from /proc/cpuinfo (empty elsewhere)."""
    try:
        flags = next((line.split(":", 1)[1].split() for line in Path("/proc/cpuinfo").read_text().splitlines()
                      if line.startswith("flags")), [])
    except OSError:
        return ""
    have = [f for f in FEATURES if f in flags]
    return " ".join(have) + ("" if "amx_tile" in flags else " (no AMX)")


def _server_round(url: str, model: str, n: int, n_new: int) -> float:
    """n streaming clients at once (completions, greedy): aggregate streamed chunks/s while all stream."""
    import openai
    client = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=600)
    stamps: list[list[float]] = [[] for _ in range(n)]
    barrier = threading.Barrier(n)

    def worker(i: int) -> None:
        barrier.wait()
        stream = client.completions.create(model=model, prompt=common.pseudo_text(PROMPT_WORDS, seed=300 + 10 * n + i),
                                           max_tokens=n_new, temperature=0, stream=True)
        for chunk in stream:
            if chunk.choices and chunk.choices[0].text:
                stamps[i].append(time.perf_counter())
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lo, hi = max(s[0] for s in stamps), min(s[-1] for s in stamps)
    count = sum(1 for s in stamps for t in s if lo < t <= hi)
    return count / (hi - lo) if hi > lo else float("nan")


def bench_server(folder: Path, n_new: int, reps: int) -> dict[str, float]:
    """`amber-engine serve` in a child process, 1 and 4 clients; batched, then AMBER_BATCH_DECODE=0
    (the server then steps generations round-robin from one thread, as before batched decode)."""
    import subprocess
    import sys
    out: dict[str, list[float]] = {}
    for mode in ("batched", "turns"):
        state = Path(tempfile.mkdtemp(prefix="amber-bench-batch-serve-"))
        env = dict(os.environ, AMBER_HOME=str(state / "home"), PYTHONPATH=str(common.REPO))
        env.pop("AMBER_API_KEYS", None)
        if mode == "turns":
            env["AMBER_BATCH_DECODE"] = "0"
        proc = subprocess.Popen([sys.executable, "-m", "engine", "serve", "--model", str(folder), "--port", "0",
                                 "--provider", "cpu", "--state-dir", str(state / "state")],
                                cwd=common.REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline().strip()
            if not line.startswith("amber-engine: serving "):
                raise RuntimeError(f"the server did not start: {line!r}")
            url = line.split()[-1]
            _server_round(url, folder.name, 2, 8)     # warm-up
            for _ in range(reps):
                for n in (1, 4):
                    r = _server_round(url, folder.name, n, n_new)
                    out.setdefault(f"{n}_{mode}", []).append(r)
                    print(f"batch: server, {n} client(s), {mode}: {r:.1f} tok/s aggregate "
                          f"(load {common.load_average():.2f})", flush=True)
        finally:
            proc.terminate()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
            shutil.rmtree(state, ignore_errors=True)
    return {k: statistics.median(v) for k, v in out.items()}


def run(quick: bool = False, shapes: list[str] | None = None) -> dict[str, Any]:
    from bench.suites.engine import model_dir
    load_before = common.load_average()
    reps, n_new = (1, 24) if quick else (5, 64)
    models = [bench_model(model_dir(), "SmolLM2-135M (default)", n_new, reps)]
    server = bench_server(model_dir(), n_new, 1 if quick else 3)
    for shape in [s for s in (shapes or []) if s not in ("tiny", "135m")]:   # the default model always runs
        root = Path(tempfile.mkdtemp(prefix="amber-bench-batch-shape-", dir=os.environ.get("AMBER_BENCH_SCRATCH")))
        try:
            folder, label = _make_shape(shape, root)
            models.append(bench_model(folder, label, n_new // 3 if not quick else 12, reps))
        finally:
            shutil.rmtree(root, ignore_errors=True)
    targets = {}
    for m in models:
        med = m["median_tok_s"]
        m["ratio_batched"] = {n: med[f"{n}_batched"] / med["1_batched"] for n in COUNTS}
        m["ratio_turns"] = {n: med.get(f"{n}_turns", med["1_batched"]) / med["1_batched"] for n in COUNTS}
    r4 = models[0]["ratio_batched"][4]
    targets["4_sessions_vs_1"] = {"ratio": r4, "target": TARGET, "met": r4 >= TARGET}
    if server:
        rs = server["4_batched"] / server["1_batched"]
        targets["server_4_clients_vs_1"] = {"ratio": rs, "target": TARGET, "met": rs >= TARGET}
    return {"models": models, "targets": targets, "server": server, "matmuls": matmul_rows(1 if quick else 3),
            "native_matmuls": native_matmul_rows(1 if quick else 3),
            "features": cpu_features(),
            "facts": common.machine_facts(), "load_before": load_before, "quick": quick}


def section(res: dict[str, Any]) -> Section:
    rows = []
    for m in res["models"]:
        med = m["median_tok_s"]
        cpu = m.get("cpu_ms_per_token", {})
        for n in COUNTS:
            batched, turns = med[f"{n}_batched"], med.get(f"{n}_turns")
            c1, cn = cpu.get("1_batched"), cpu.get(f"{n}_batched")
            rows.append([m["label"], str(n), f"{turns:.1f}" if turns is not None else f"{batched:.1f}",
                         f"{m['ratio_turns'][n]:.2f}×", f"{batched:.1f}", f"{m['ratio_batched'][n]:.2f}×",
                         f"{m['rows_per_batch'].get(f'{n}_batched', 0.0):.2f}" if n > 1 else "—",
                         f"{cn:.1f}" if cn else "—", f"{c1 / cn:.2f}×" if c1 and cn else "—",
                         ok(m["ratio_batched"][n] >= TARGET) if n == 4 else ""])
    facts = res["facts"]
    body = "\n".join([
        "`python -m bench batch [--shapes 0.5b]` (bench/suites/batch.py). Sessions generate at once through the "
        "real SessionManager, one thread each (temporary sessions, distinct prompts of ~50 tokens, greedy). "
        "*Aggregate decode tok/s* counts every session's streamed tokens while all of them were decoding, "
        "over that window (one session: its own decode rate). *turns*: each session's step is its own "
        "ONNX Runtime run (`Runner.batch_decode = False`, as before batched decode); *batched*: steps of sessions "
        "decoding at the same moment run as one run over a batch (engine/runtime/batcher.py; KV in one "
        "pool of per-session slots, engine/runtime/kvpool.py). Modes alternate within one process; medians "
        f"of {res['models'][0]['reps']} rounds of {res['models'][0]['n_new']} new tokens per session. "
        "*rows/batch*: sessions per batched run on average. *CPU ms/token*: the process's CPU time per "
        "streamed token over the window (batched), and one session's ÷ that: the work a batch saves per "
        "token. Where other programs oversubscribe the cores, read that column: the tok/s ratio then also "
        "counts the bigger share of the cores that 4 busy threads get from the scheduler than 1 does.",
        "",
        table(["Model", "Sessions", "turns: tok/s", "turns ÷ 1 session", "batched: tok/s",
               "batched ÷ 1 session", "rows/batch", "batched: CPU ms/token", "CPU: 1 session ÷ this",
               f"≥ {TARGET}× at 4"], rows),
        "",
        "Through the API server (`amber-engine serve`, the default model, streaming `completions` from "
        "threads of one client process, greedy): *batched* runs each active generation on its own "
        "thread so that their steps batch; *turns* (`AMBER_BATCH_DECODE=0`) is the server before "
        "batched decode, one thread stepping the generations round-robin. Medians of "
        f"{1 if res.get('quick') else 3} rounds.",
        "",
        table(["Clients", "turns: tok/s", "turns ÷ 1 client", "batched: tok/s", "batched ÷ 1 client"],
              [[str(n), f"{sv[f'{n}_turns']:.1f}", f"{sv[f'{n}_turns'] / sv['1_turns']:.2f}×",
                f"{sv[f'{n}_batched']:.1f}", f"{sv[f'{n}_batched'] / sv['1_batched']:.2f}×"]
               for sv in [res["server"]] if sv for n in (1, 4)]),
        "",
        "One bare ONNX Runtime decode step (no threads, no sampling, no Python between steps; context "
        "~100, blocks of runs alternating batch 1 and batch 4 in one process). The aggregate figures "
        "above can beat this ratio: a solo session also pays its per-token costs outside the run "
        "(binding, logits copy, sampling, detokenizing, thread hand-offs), which a batch shares.",
        "",
        table(["Model", "batch 1: ms/step", "batch 4: ms/step", "4 × t(1) ÷ t(4)"],
              [[m["label"], f"{m['raw']['ms_1']:.2f}", f"{m['raw']['ms_4']:.2f}", f"{m['raw']['ratio']:.2f}×"]
               for m in res["models"]]),
        "",
        "Where the ceiling came from in the ONNX Runtime form (`convert --kernels ort`, the default before "
        "the native kernels): ONE `MatMulNBits` (block 32, accuracy level 4, as that form's graphs "
        "use; random weights) for 1 and 4 rows. A kernel bound by reading its weights would cost about "
        "the same for 4 rows; ONNX Runtime's costs nearly 4× for the layer matrices (it is bound by "
        "its arithmetic at these sizes), so a batched step saves mainly the per-step costs around the "
        "matmuls (the other ops, the vocabulary-wide lm_head, Python), not the matmuls themselves.",
        "",
        table(["Matrix", "K × N, bits", "1 row: µs", "4 rows: µs", "4 rows ÷ 1 row"],
              [[m["label"], f"{m['k']} × {m['n']}, {m['bits']}", f"{m['us_1']:.0f}", f"{m['us_4']:.0f}",
                f"{m['ratio']:.2f}×"] for m in res.get("matmuls", [])]),
        "",
        "The native form (the default on CPU machines since Amber's own kernels): ONE `ai.amber.GgufMatMul` "
        "over the GGUF's own blocks (engine/native; random blocks, 1 intra-op thread, median of single "
        "calls in interleaved blocks; the weights are reused, so the small ones stay in the L3 where a "
        "decode step streams them). Below 16 rows the AVX-512 kernels "
        "decode each weight block once for up to 8 rows and pay the int8 dot, conversion and scaling per "
        "row; Q4_0 / Q5_0 at up to 4 rows and Q8_0 at 2..4 rows take 2 or 4 weight rows a step, loading "
        "each activation vector once for all of them (\"Multi-row kernels with unchanged bits\" below); "
        "a row's bits are the same alone or batched.",
        "",
        table(["Matrix", "K × N, type", "1 row: µs", "2 rows: µs", "4 rows: µs", "4 rows ÷ 1 row"],
              [[m["label"], f"{m['k']} × {m['n']}, {m['type']}", f"{m['us_1']:.0f}", f"{m['us_2']:.0f}",
                f"{m['us_4']:.0f}", f"{m['ratio']:.2f}×"] for m in res.get("native_matmuls", [])]),
        "",
        common.facts_line(facts, res.get("load_before"),
                          f"CPU features: {res.get('features') or 'unknown'}."
                          + (" Other work shared the cores while this ran (load average above 1): absolute "
                             "tok/s swing with the load, the ratios less." if facts["load_avg"][0] > 1.0 else "")),
    ])
    return Section("batch", "Concurrent chats", body, common.ORDER.get("batch", 62))
