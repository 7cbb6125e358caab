"""`make gpu-check`: the float16 GPU variant on a real CUDA device, against the CPU.

    python -m bench.suites.gpu_check [--cpu-part] [--no-write] [--quick] [--save-cost]

With CUDA: converts the default model for CUDA (its float16 variant), then greedy tokens CPU vs
CUDA token for token on a few prompts, the logits difference (teacher-forced on the same tokens),
prefill tok/s at 512 and 2048 tokens, decode tok/s at context 100 and 1000, a pinned chat saved
and resumed on CUDA (TTFT against re-prefill), and device memory before and after 20 temporary
chats. Prints one table and writes it to its section of docs/BENCHMARKS.md.

Without a usable CUDA it prints one skip line and exits 0. `--cpu-part` runs what a CPU can: the
float16 variant on the CPU provider against the float32 graph (agreement, logits, speed), written
to its own section. `--save-cost` only measures what saving a pinned chat costs the generating
thread, KV on the host and in staged device buffers (a CPU is enough). Needs nothing beyond the
project's install; under 5 minutes on a GPU.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from bench.harness.common import Section, cpu_model, table, write_section

PROMPTS = ["Write a short poem about the sea.", "What is the capital of France? Explain briefly.",
           "List three uses of a paperclip.", "Explain how a bicycle works to a child."]
GREEDY_TOKENS = 48
PREFILL_SIZES = (512, 2048)
DECODE_CONTEXTS = (100, 1000)
DECODE_STEPS = 32
TEMP_CHATS = 20


def default_model_dir() -> Path:
    from engine.convert import default_model
    from engine.base import paths
    home = os.environ.get("AMBER_TEST_HOME") or os.environ.get("AMBER_HOME")
    if home:
        os.environ["AMBER_HOME"] = home
    folder = paths.default_model_dir()
    if not default_model.is_ready(folder):
        default_model.ensure_default_model()
    return folder


# ---- measurements ---------------------------------------------------------------------------------
def greedy(model: Any, prompt: list[int], n: int) -> list[int]:
    """Plain argmax decoding (no penalties): the tokens two providers must agree on."""
    from engine.runtime.runner import Runner
    runner = Runner(model)
    cache = runner.new_cache()
    logits = runner.forward(cache, prompt)
    out: list[int] = []
    for _ in range(n):
        tok = int(np.argmax(logits))
        out.append(tok)
        if tok in model.eos_token_ids:
            break
        logits = runner.forward(cache, [tok])
    cache.clear()
    return out


def forced_logits(model: Any, prompt: list[int], continuation: list[int]) -> np.ndarray:
    """Logits after the prompt and after each continuation token, fed one at a time (decode steps)."""
    from engine.runtime.runner import Runner
    runner = Runner(model)
    cache = runner.new_cache()
    rows = [np.array(runner.forward(cache, prompt), np.float32)]
    for tok in continuation[:-1]:
        rows.append(np.array(runner.forward(cache, [tok]), np.float32))
    cache.clear()
    return np.stack(rows)


def compare(ref: Any, other: Any, prompts: list[list[int]], n: int) -> dict[str, Any]:
    """Token-for-token greedy agreement of `other` with `ref`, and logit differences on ref's tokens."""
    identical, first_diff, max_d, mean_d, top1 = 0, [], 0.0, [], []
    for p in prompts:
        a, b = greedy(ref, p, n), greedy(other, p, n)
        same = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
        identical += int(a == b)
        first_diff.append(same)
        la, lb = forced_logits(ref, p, a), forced_logits(other, p, a)
        d = np.abs(la - lb)
        max_d = max(max_d, float(d.max()))
        mean_d.append(float(d.mean()))
        top1.append(float(np.mean(la.argmax(-1) == lb.argmax(-1))))
    return {"prompts": len(prompts), "identical": identical, "first_divergence": first_diff,
            "max_dlogit": max_d, "mean_dlogit": float(np.mean(mean_d)), "top1_agree": float(np.mean(top1))}


def speed(model: Any, quick: bool = False) -> dict[str, float]:
    """Prefill tok/s at PREFILL_SIZES and decode tok/s at DECODE_CONTEXTS (best of a few runs)."""
    from engine.runtime.runner import Runner
    runner = Runner(model)
    rng = np.random.default_rng(0)
    vocab = int(model.config.get("vocab_size") or 1000)
    out: dict[str, float] = {}
    runs = 1 if quick else 3
    for n in PREFILL_SIZES:
        ids = [int(t) for t in rng.integers(10, vocab - 10, n)]
        best = float("inf")
        for _ in range(runs + 1):       # the first run warms up
            cache = runner.new_cache()
            t0 = time.perf_counter()
            runner.forward(cache, ids)
            best = min(best, time.perf_counter() - t0)
            cache.clear()
        out[f"prefill_{n}_tok_s"] = n / best
    for ctx in DECODE_CONTEXTS:
        ids = [int(t) for t in rng.integers(10, vocab - 10, ctx)]
        cache = runner.new_cache()
        logits = runner.forward(cache, ids)
        steps = 8 if quick else DECODE_STEPS
        t0 = time.perf_counter()
        for _ in range(steps):
            logits = runner.forward(cache, [int(np.argmax(logits))])
        out[f"decode_ctx{ctx}_tok_s"] = steps / (time.perf_counter() - t0)
        cache.clear()
    return out


def pinned_resume(model: Any, state_dir: Path, prompt_tokens: int = 2000) -> dict[str, Any]:
    """A pinned chat built, saved, dropped from memory and resumed: TTFT vs re-prefilling it."""
    from engine.api import GenerationResult, SamplingParams, SessionKind
    from engine.generation.generate import collect
    from engine.sessions.manager import SessionManager
    rng = np.random.default_rng(1)
    vocab = int(model.config.get("vocab_size") or 1000)
    ids = [int(t) for t in rng.integers(10, vocab - 10, prompt_tokens)]
    one = SamplingParams(greedy=True, max_new_tokens=1)

    def first_token(mgr: Any, sid: str, prompt: list[int], kind: Any = None) -> tuple[float, Any]:
        t0 = time.perf_counter()
        mgr.open(sid, kind=kind)
        events = mgr.generate_tokens(sid, prompt, one)
        first = next(events)
        ttft = time.perf_counter() - t0
        result = first
        while not isinstance(result, GenerationResult):
            result = next(events)
        return ttft, result

    mgr = SessionManager(model, state_dir)
    sid = str(uuid.uuid4())
    mgr.open(sid, kind=SessionKind.PINNED)
    built = collect(mgr.generate_tokens(sid, ids, one))
    assert mgr.wait_for_saves(120)
    mgr.shutdown()
    mgr = SessionManager(model, state_dir)
    warm = str(uuid.uuid4())
    first_token(mgr, warm, ids[:64], SessionKind.TEMPORARY)
    mgr.close(warm)
    resume_s, resumed = first_token(mgr, sid, ids + built.token_ids)
    tmp = str(uuid.uuid4())
    reprefill_s, _ = first_token(mgr, tmp, ids + built.token_ids, SessionKind.TEMPORARY)
    mgr.close(tmp)
    mgr.shutdown()
    return {"tokens": prompt_tokens, "resume_ttft_ms": resume_s * 1e3, "reprefill_ttft_ms": reprefill_s * 1e3,
            "resume": resumed.figures.resume, "fallback": resumed.figures.fallback_reason or ""}


def save_cost(model: Any, state_dir: Path, device: str, prompt_tokens: int = 2000) -> dict[str, Any]:
    """What saving a pinned chat costs the generating thread with caches on `device`: the time in
    the save call there, the KV bytes copied (downloaded or exported) there and in the writer, and
    the writer's copy time (the part that used to run on the generating thread)."""
    import threading
    from engine.api import SamplingParams, SessionKind
    from engine.generation.generate import collect
    from engine.runtime.kvcache import KVCache, KVSnapshot
    from engine.sessions.manager import SessionManager
    rng = np.random.default_rng(2)
    vocab = int(model.config.get("vocab_size") or 1000)
    ids = [int(t) for t in rng.integers(10, vocab - 10, prompt_tokens)]
    gen = threading.current_thread()
    rec: dict[str, Any] = {"device": device, "tokens": prompt_tokens, "gen_save_ms": 0.0, "writer_copy_ms": 0.0,
                           "gen_copied_bytes": 0, "writer_copied_bytes": 0}
    mgr = SessionManager(model, state_dir)
    mgr.generator.runner.kv_device = device
    orig_save, orig_export, orig_hook = mgr.disk.save_async, KVSnapshot.export, KVCache.transfer_hook

    def timed_save(s: Any, publish: bool = False) -> None:
        t0 = time.perf_counter()
        orig_save(s, publish)
        rec["gen_save_ms"] += (time.perf_counter() - t0) * 1e3

    def timed_export(snap: KVSnapshot, start: int, end: int) -> np.ndarray:
        t0 = time.perf_counter()
        out = orig_export(snap, start, end)
        if threading.current_thread() is not gen:
            rec["writer_copy_ms"] += (time.perf_counter() - t0) * 1e3
        return out

    def hook(kind: str, nbytes: int) -> None:
        if kind in ("download", "export"):
            rec["gen_copied_bytes" if threading.current_thread() is gen else "writer_copied_bytes"] += nbytes

    mgr.disk.save_async = timed_save            # type: ignore[method-assign]
    KVSnapshot.export = timed_export            # type: ignore[method-assign]
    KVCache.transfer_hook = hook
    try:
        sid = str(uuid.uuid4())
        mgr.open(sid, kind=SessionKind.PINNED)
        collect(mgr.generate_tokens(sid, ids, SamplingParams(greedy=True, max_new_tokens=1)))
        assert mgr.wait_for_saves(120)
        rec["save_error"] = mgr.info(sid).save_error or ""
    finally:
        KVSnapshot.export = orig_export         # type: ignore[method-assign]
        KVCache.transfer_hook = orig_hook
        mgr.shutdown()
    return rec


def device_memory_mib() -> float | None:
    """Used device memory as the driver reports it (nvidia-smi), or None without one."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20)
        return float(out.stdout.strip().splitlines()[0]) if out.returncode == 0 else None
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return None


def temporary_chats(model: Any, state_dir: Path, n: int = TEMP_CHATS) -> dict[str, Any]:
    from engine.api import SamplingParams, SessionKind
    from engine.generation.generate import collect
    from engine.sessions.manager import SessionManager
    from engine.runtime.kvcache import live_device_buffers
    mgr = SessionManager(model, state_dir)
    before = device_memory_mib()
    buffers_before = live_device_buffers()
    peak = before
    for i in range(n):
        sid = str(uuid.uuid4())
        mgr.open(sid, kind=SessionKind.TEMPORARY)
        collect(mgr.generate_text(sid, f"Chat {i}: tell me a fact about the number {i}.",
                                  SamplingParams(greedy=True, max_new_tokens=16)))
        now = device_memory_mib()
        peak = max(peak or 0.0, now or 0.0) if now is not None else peak
        mgr.close(sid)
    mgr.shutdown()
    # ONNX Runtime returns freed device memory to its arena, not to the driver: the driver's figure
    # shows that 20 chats do not grow it; the live KV buffers show that each close freed its own.
    return {"mem_before_mib": before, "mem_peak_mib": peak, "mem_after_mib": device_memory_mib(),
            "buffers_before": buffers_before, "buffers_after": live_device_buffers()}


# ---- the two runs ---------------------------------------------------------------------------------
def cuda_status() -> tuple[bool, str]:
    """(usable, why not): whether a strict CUDA session can be created at all."""
    import onnxruntime as ort
    from engine.runtime.providers import provider_library_problem
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return False, "this ONNX Runtime build has no CUDAExecutionProvider"
    problem = provider_library_problem("CUDAExecutionProvider")
    if problem:
        return False, f"the CUDA provider library cannot load ({problem})"
    if device_memory_mib() is None and not Path("/proc/driver/nvidia").exists():
        return False, "no NVIDIA driver or device"
    return True, ""


def chat_prompts(model: Any, texts: list[str]) -> list[list[int]]:
    from engine.generation.generate import Generator
    gen = Generator(model)
    return [gen.encode_chat([{"role": "user", "content": t}]) for t in texts]


def exact_copy(model_dir: Path, dest: Path) -> Path:
    """The model with MatMulNBits at accuracy level 0 (float32 activations, no int8 rounding): the
    float32 reference that isolates what float16 alone changes."""
    import onnx
    shutil.copytree(model_dir, dest, ignore=shutil.ignore_patterns("gpu", "amber_fingerprint.json"))
    proto = onnx.load(str(dest / "model.onnx"), load_external_data=False)
    for n in proto.graph.node:
        for a in n.attribute:
            if n.op_type == "MatMulNBits" and a.name == "accuracy_level":
                a.i = 0
    onnx.save_model(proto, str(dest / "model.onnx"))
    return dest


def run_cpu_part(model_dir: Path, quick: bool = False) -> dict[str, Any]:
    from engine.runtime.model import load_model
    threads = int(os.environ.get("AMBER_BENCH_THREADS", "2"))
    load = os.getloadavg()[0]
    fp32 = load_model(model_dir, "cpu", threads, variant="fp32")
    fp16 = load_model(model_dir, "cpu", threads, variant="fp16")
    prompts = chat_prompts(fp32, PROMPTS[:2] if quick else PROMPTS)
    n = 16 if quick else GREEDY_TOKENS
    res: dict[str, Any] = {"agreement": compare(fp32, fp16, prompts, n)}
    with tempfile.TemporaryDirectory() as tmp:
        exact = load_model(exact_copy(model_dir, Path(tmp) / model_dir.name), "cpu", threads, variant="fp32")
        res["agreement_exact"] = compare(exact, fp16, prompts, n)
        del exact
    from engine.runtime.kvcache import STAGED
    with tempfile.TemporaryDirectory() as tmp:
        res["save_cost"] = [save_cost(fp32, Path(tmp) / dev, dev, 500 if quick else 2000) for dev in ("cpu", STAGED)]
    res["speed_fp32"] = speed(fp32, quick)
    res["speed_fp16"] = speed(fp16, quick)
    res["cpu"] = cpu_model()
    res["threads"] = threads
    res["load"] = load
    return res


def run_cuda(model_dir: Path, quick: bool = False) -> dict[str, Any]:
    from engine.onnx.variants import build_variant
    from engine.runtime.model import load_model
    t0 = time.perf_counter()
    build_variant(model_dir)
    res: dict[str, Any] = {"convert_s": time.perf_counter() - t0}
    cuda = load_model(model_dir, "gpu")
    res["provider"], res["fallback"] = cuda.provider, cuda.provider_fallback_reason or ""
    if cuda.provider != "CUDAExecutionProvider":
        return res
    cpu32 = load_model(model_dir, "cpu", variant="fp32")
    cpu16 = load_model(model_dir, "cpu", variant="fp16")
    prompts = chat_prompts(cpu32, PROMPTS)
    n = 16 if quick else GREEDY_TOKENS
    res["vs_cpu_fp32"] = compare(cpu32, cuda, prompts, n)
    res["vs_cpu_fp16"] = compare(cpu16, cuda, prompts, n)
    res["speed"] = speed(cuda, quick)
    with tempfile.TemporaryDirectory() as state:
        res["pinned"] = pinned_resume(cuda, Path(state) / "pinned")
        res["memory"] = temporary_chats(cuda, Path(state) / "temp")
        res["save_cost"] = [save_cost(cuda, Path(state) / "save", "cuda")]
    res["gpu"] = _gpu_name()
    return res


def _gpu_name() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return "?"


# ---- reporting ------------------------------------------------------------------------------------
def _agree_rows(label: str, a: dict[str, Any]) -> list[list[Any]]:
    return [[f"{label}: greedy prompts identical", f"{a['identical']}/{a['prompts']}"],
            [f"{label}: first divergence (token index per prompt)", ", ".join(map(str, a["first_divergence"]))],
            [f"{label}: max \\|Δlogit\\| (teacher-forced)", a["max_dlogit"]],
            [f"{label}: mean \\|Δlogit\\|", a["mean_dlogit"]],
            [f"{label}: top-1 agreement", a["top1_agree"]]]


def _save_rows(costs: list[dict[str, Any]]) -> list[list[Any]]:
    rows = []
    for c in costs:
        label = f"pinned save, {c['tokens']} tokens, KV on '{c['device']}'"
        rows += [[f"{label}: time in the save call on the generating thread (ms)", c["gen_save_ms"]],
                 [f"{label}: KV bytes copied on the generating thread / in the writer",
                  f"{c['gen_copied_bytes']} / {c['writer_copied_bytes']}"],
                 [f"{label}: the writer's copy (ms)", c["writer_copy_ms"]]]
        if c["save_error"]:
            rows.append([f"{label}: save error", c["save_error"]])
    return rows


def cpu_section(res: dict[str, Any]) -> Section:
    rows = _agree_rows("fp16 vs fp32 (accuracy level 4, as Amber runs on CPU)", res["agreement"])
    rows += _agree_rows("fp16 vs fp32 exact (accuracy level 0)", res["agreement_exact"])
    for k in res["speed_fp32"]:
        rows.append([k.replace("_", " "), f"{res['speed_fp32'][k]:.1f} (fp32) / {res['speed_fp16'][k]:.1f} (fp16)"])
    rows += _save_rows(res["save_cost"])
    body = (f"`python -m bench.suites.gpu_check --cpu-part` on {res['cpu']}, {res['threads']} threads, CPU provider, "
            f"load average {res['load']:.1f} at the start (speed figures are only comparable at low load; "
            "the agreement figures do not depend on it). "
            "The float16 GPU variant against the float32 graph of the default model (greedy, "
            f"{GREEDY_TOKENS} tokens per prompt, {res['agreement']['prompts']} prompts). ONNX Runtime's CPU "
            "provider has no float16 kernels for the elementwise ops and wraps them in casts, so the "
            "variant is slower here: it is for checking numerics, not for running on a CPU.\n\n"
            + table(["Figure", "Value"], rows))
    return Section("gpu-cpu", "GPU variant (float16) on the CPU provider", body, order=60)


def cuda_section(res: dict[str, Any]) -> Section:
    rows: list[list[Any]] = [["device", res.get("gpu", "?")], ["convert for CUDA (s)", res["convert_s"]]]
    rows += _agree_rows("CUDA fp16 vs CPU fp32", res["vs_cpu_fp32"])
    rows += _agree_rows("CUDA fp16 vs CPU fp16", res["vs_cpu_fp16"])
    rows += [[k.replace("_", " "), v] for k, v in res["speed"].items()]
    p = res["pinned"]
    rows += [[f"pinned resume TTFT, {p['tokens']} tokens (ms)", p["resume_ttft_ms"]],
             [f"re-prefill TTFT, {p['tokens']} tokens (ms)", p["reprefill_ttft_ms"]],
             ["resume path", f"{p['resume']} {p['fallback']}".strip()]]
    m = res["memory"]
    rows += [[f"device memory before / peak / after {TEMP_CHATS} temporary chats (MiB)",
              f"{m['mem_before_mib']} / {m['mem_peak_mib']} / {m['mem_after_mib']}"],
             [f"live device KV buffers before / after {TEMP_CHATS} temporary chats",
              f"{m['buffers_before']} / {m['buffers_after']}"]]
    rows += _save_rows(res["save_cost"])
    body = "`make gpu-check` (bench/suites/gpu_check.py).\n\n" + table(["Figure", "Value"], rows)
    return Section("gpu", "GPU (CUDA, float16 variant) vs CPU", body, order=61)


def cpu_features() -> str:
    """The CPU family and the vector features that matter here, from /proc/cpuinfo (Linux)."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""
    fields = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
    flags = set(fields.get("flags\t\t", fields.get("flags", "")).split())
    family = fields.get("cpu family\t", "").strip()
    wanted = ["avx2", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile"]
    have = [f for f in wanted if f in flags]
    return f"CPU family {family}; {', '.join(have) or 'no AVX2'}{'' if 'amx_tile' in flags else ', no AMX'}."


def run_save_cost(model_dir: Path, rounds: int = 3, tokens: int = 2000) -> Section:
    """`--save-cost`: a pinned save's cost to the generating thread, KV on the host ('cpu') and in
    staged device buffers (the CUDA code path on a CPU), interleaved rounds; medians."""
    from engine.runtime.kvcache import STAGED
    from engine.runtime.model import load_model
    from bench.harness.common import facts_line, machine_facts
    load0 = os.getloadavg()[0]
    model = load_model(model_dir, "cpu", int(os.environ.get("AMBER_BENCH_THREADS", "2")))
    runs: dict[str, list[dict[str, Any]]] = {"cpu": [], STAGED: []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            for dev in runs:
                runs[dev].append(save_cost(model, Path(tmp) / f"{dev}-{r}", dev, tokens))
    med = []
    for cs in runs.values():
        m = dict(cs[0])
        for k in ("gen_save_ms", "writer_copy_ms"):
            m[k] = float(np.median([c[k] for c in cs]))
        m["save_error"] = "; ".join(sorted({c["save_error"] for c in cs if c["save_error"]}))
        med.append(m)
    body = (f"`python -m bench.suites.gpu_check --save-cost` ({facts_line(machine_facts(), load0, cpu_features())}), "
            "the default model, "
            f"a pinned chat of {tokens} tokens saved after its turn, medians of {rounds} interleaved rounds. "
            "'cpu-staged' keeps the KV in separate OrtValues copied to and from the host exactly as on CUDA. "
            "The KV bytes copied on the generating thread are the figure that matters (0: the save's "
            "device→host copy is in the writer); with KV on the host the generating thread still "
            "copies the full blocks into the prefix cache's memory tier, as before. The time in the "
            "save call includes waiting for the GIL while the writer starts; the writer's copy is "
            "what used to run on the generating thread.\n\n" + table(["Figure", "Value"], _save_rows(med)))
    return Section("gpu-kv", "KV on the device: what a pinned save costs the generating thread", body,
                   order=62)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.suites.gpu_check")
    ap.add_argument("--cpu-part", action="store_true", help="also run the float16 variant on CPU vs float32")
    ap.add_argument("--no-write", action="store_true", help="print only; leave docs/BENCHMARKS.md alone")
    ap.add_argument("--quick", action="store_true", help="fewer prompts, tokens and runs (harness check)")
    ap.add_argument("--save-cost", action="store_true",
                    help="only: what a pinned save costs the generating thread (KV on host / staged device buffers)")
    args = ap.parse_args(argv)
    if args.save_cost:
        sec = run_save_cost(default_model_dir(), 1 if args.quick else 3, 500 if args.quick else 2000)
        print(sec.body)
        if not args.no_write and not args.quick:
            write_section(sec)
        return 0
    usable, why = cuda_status()
    if not usable and not args.cpu_part:
        print(f"gpu-check: SKIP: no usable CUDA here: {why}")
        return 0
    model_dir = default_model_dir()
    if args.cpu_part:
        # A scratch copy: the check must not leave a variant in the user's model folder.
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp) / model_dir.name
            shutil.copytree(model_dir, copy, ignore=shutil.ignore_patterns("gpu", "amber_fingerprint.json"))
            res = run_cpu_part(copy, args.quick)
        sec = cpu_section(res)
        print(sec.body)
        if not args.no_write and not args.quick:
            write_section(sec)
    if not usable:
        print(f"gpu-check: SKIP (CUDA part): no usable CUDA here: {why}")
        return 0
    res = run_cuda(model_dir, args.quick)
    if res["provider"] != "CUDAExecutionProvider":
        print(f"gpu-check: FAILED: the CUDA session did not start: {res['fallback']}")
        return 1
    sec = cuda_section(res)
    print(sec.body)
    if not args.no_write and not args.quick:
        write_section(sec)
    return 0


if __name__ == "__main__":
    sys.exit(main())
