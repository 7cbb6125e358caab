"""Single-thread speed of Amber's K-quant kernels (engine/native/src/*/qk*.c) against the memory
roofline and ONNX Runtime's MatMulNBits: `python -m bench.experiments.kquant_kernels [--quick]`.

Per type (Q4_K Q5_K Q6_K) and shape (K=2048,N=8192 and K=8192,N=2048):
- m = 1 (decode): GB/s of weight bytes streamed, quantizing the activation row included, per ISA;
  against np.copy of the same number of bytes (bytes read per second: the roofline).
- m = 64 (prefill): GFLOP/s (2*m*K*N per call) per SIMD ISA.
- ONNX Runtime (1 intra-op thread, IOBinding): the form Amber's converter gives each type today at
  accuracy level 4 (engine/convert/graph.py): Q4_K = MatMulNBits bits 4 block 32 with uint4 zero
  points + float32 scales, plus the float32 correction MatMul over the 32-value block sums of x;
  Q5_K = MatMulNBits bits 8 block 32 + the same correction; Q6_K = MatMulNBits bits 8 block 16.
  One graph per form with random contents of those exact shapes (not a converted GGUF).
Every variant cycles through copies of its weights totalling more than 3x the L3 cache, so the
weights come from DRAM as in a real model; variants are timed interleaved (A, B, C, A, B, C ...)
in one process; the median and the best block are reported (ratios and rates from the best:
on a shared machine it is the block that had the core to itself), with the load average.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np

TYPES = {"Q4_K": (12, 144), "Q5_K": (13, 176), "Q6_K": (14, 210)}
ISAS = ("scalar", "avx2", "avxvnni", "avx512vnni")
SHAPES = ((2048, 8192), (8192, 2048))
POOL_BYTES = 112 << 20     # > 3x a 32 MiB L3: the weights stream from DRAM


def open_kernels(out_dir: Path) -> ctypes.CDLL:
    """The kernels library as `python -m engine.native.build` makes it, built into out_dir and
    bound by engine.native (the one ctypes binding)."""
    from engine.native import build_and_open

    lib = build_and_open(out_dir)
    if lib is None:
        raise SystemExit("no C compiler (cc) found")
    return lib


def random_weights(block: int, n: int, k: int, rng: np.random.Generator, typ: int) -> np.ndarray:
    raw = rng.integers(0, 256, (n * k // 256, block), dtype=np.uint8)
    d = np.full((raw.shape[0],), 0.01, np.float16).view(np.uint8).reshape(-1, 2)
    if typ == 14:
        raw[:, 208:210] = d
    else:
        raw[:, 0:2] = d
        raw[:, 2:4] = d
    return raw.reshape(-1)


def copies(make: Callable[[], object], nbytes: int) -> list[object]:
    return [make() for _ in range(max(2, -(-POOL_BYTES // max(nbytes, 1))))]


def native_runner(so: ctypes.CDLL, isa: str, typ: int, pool: list[np.ndarray], x: np.ndarray,
                  k: int, n: int) -> Callable[[], None]:
    m = x.shape[0]
    ab = so.amber_act_bytes(typ, k)
    act = np.zeros(m * ab, np.uint8)
    y = np.zeros((m, n), np.float32)
    state = {"i": 0}

    def run() -> None:
        so.amber_set_isa(isa.encode())
        w = pool[state["i"] % len(pool)]
        state["i"] += 1
        for i in range(m):
            so.amber_quantize_act(typ, x[i].ctypes.data, k, act.ctypes.data + i * ab)
        so.amber_gemm_rows(typ, act.ctypes.data, m, w.ctypes.data, k, 0, n, y.ctypes.data, n)
    return run


def ort_model(tname: str, k: int, n: int, rng: np.random.Generator) -> tuple[bytes, int]:
    """The converter's accuracy-level-4 form of one weight: (model bytes, weight bytes read per call)."""
    from onnx import TensorProto, helper, numpy_helper
    bits, blk, corr = {"Q4_K": (4, 32, True), "Q5_K": (8, 32, True), "Q6_K": (8, 16, False)}[tname]
    nb = k // blk
    b = rng.integers(0, 256, (n, nb, blk * bits // 8), dtype=np.uint8)
    scales = rng.uniform(0.001, 0.01, n * nb).astype(np.float32)
    inits = [numpy_helper.from_array(b, "B"), numpy_helper.from_array(scales, "S")]
    ins = ["x", "B", "S"]
    nbytes = b.nbytes + scales.nbytes
    if bits == 4:
        zp = rng.integers(0, 256, n * ((nb + 1) // 2), dtype=np.uint8)
        inits.append(numpy_helper.from_array(zp, "Z"))
        ins.append("Z")
        nbytes += zp.nbytes
    nodes = [helper.make_node("MatMulNBits", ins, ["mm"], domain="com.microsoft", K=k, N=n, bits=bits,
                              block_size=blk, accuracy_level=4)]
    out = "mm"
    if corr:
        c = rng.standard_normal((k // 32, n)).astype(np.float32) * 1e-3
        inits += [numpy_helper.from_array(c, "C"), numpy_helper.from_array(np.array([0, k // 32, 32], np.int64), "shp"),
                  numpy_helper.from_array(np.array([-1], np.int64), "ax")]
        nbytes += c.nbytes
        nodes += [helper.make_node("Reshape", ["x", "shp"], ["xb"]),
                  helper.make_node("ReduceSum", ["xb", "ax"], ["bs"], keepdims=0),
                  helper.make_node("MatMul", ["bs", "C"], ["cr"]),
                  helper.make_node("Add", ["mm", "cr"], ["y"])]
        out = "y"
    g = helper.make_graph(nodes, "w", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["m", k])],
                          [helper.make_tensor_value_info(out, TensorProto.FLOAT, ["m", n])], initializer=inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 9
    return model.SerializeToString(), nbytes


def ort_runner(tname: str, k: int, n: int, m: int, rng: np.random.Generator) -> tuple[Callable[[], None], int]:
    import onnxruntime as ort
    blob, nbytes = ort_model(tname, k, n, rng)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sessions = copies(lambda: ort.InferenceSession(blob, so, providers=["CPUExecutionProvider"]), nbytes)
    x = rng.standard_normal((m, k)).astype(np.float32)
    binds = []
    for s in sessions:
        bd = s.io_binding()
        bd.bind_ortvalue_input("x", ort.OrtValue.ortvalue_from_numpy(x))
        bd.bind_ortvalue_output(s.get_outputs()[0].name, ort.OrtValue.ortvalue_from_numpy(np.zeros((m, n), np.float32)))
        binds.append((s, bd))
    state = {"i": 0}

    def run() -> None:
        s, bd = binds[state["i"] % len(binds)]
        state["i"] += 1
        s.run_with_iobinding(bd)
    return run, nbytes


def interleaved(runners: dict[str, Callable[[], None]], rounds: int, block_s: float) -> dict[str, tuple[float, float]]:
    """(median, best) seconds per call of each runner over `rounds` interleaved blocks of about
    block_s each. On a shared machine the best block is the one that had the core to itself."""
    times: dict[str, list[float]] = {name: [] for name in runners}
    calls: dict[str, int] = {}
    for name, fn in runners.items():
        fn()
        t0 = time.perf_counter()
        fn()
        calls[name] = max(1, int(block_s / max(time.perf_counter() - t0, 1e-6)))
    for _ in range(rounds):
        for name, fn in runners.items():
            t0 = time.perf_counter()
            for _ in range(calls[name]):
                fn()
            times[name].append((time.perf_counter() - t0) / calls[name])
    return {name: (float(np.median(v)), float(np.min(v))) for name, v in times.items()}


def cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def cpu_features() -> list[str]:
    try:
        flags = open("/proc/cpuinfo").read().split("flags", 1)[1].split("\n", 1)[0] + " "
    except (OSError, IndexError):
        return []
    names = ("avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "amx_int8")
    return [f for f in names if f" {f} " in flags]


def bench_shape(so: ctypes.CDLL, avail: list[str], tname: str, k: int, n: int, rng: np.random.Generator,
                ort_too: bool, rounds: int, block_s: float) -> None:
    """Prints m = 1, 4 (GB/s) and m = 64 (GFLOP/s) for one type and shape."""
    typ, block = TYPES[tname]
    wbytes = n * k // 256 * block
    pool = copies(lambda: random_weights(block, n, k, rng, typ), wbytes)
    src = copies(lambda: rng.integers(0, 256, wbytes, dtype=np.uint8), wbytes)
    dst = np.empty(wbytes, np.uint8)
    cstate = {"i": 0}

    def copy_run() -> None:
        np.copyto(dst, src[cstate["i"] % len(src)])
        cstate["i"] += 1
    for m in (1, 4):
        x = rng.standard_normal((m, k)).astype(np.float32)
        runners: dict[str, Callable[[], None]] = {"np.copy": copy_run}
        for isa in avail:
            runners[isa] = native_runner(so, isa, typ, pool, x, k, n)
        ort_bytes = 0
        if ort_too:
            runners["ort"], ort_bytes = ort_runner(tname, k, n, m, rng)
        t = interleaved(runners, rounds, block_s)
        print(f"\n{tname} K={k} N={n} m={m}: weights {wbytes / 1e6:.2f} MB "
              f"(ORT form {ort_bytes / 1e6:.2f} MB), load {os.getloadavg()[0]:.2f}")
        for name, (med, best) in t.items():
            extra = ""
            if name not in ("np.copy", "ort"):
                extra = f"  {t['np.copy'][1] / best * 100:5.1f}% of copy"
                extra += f", {t['ort'][1] / best:.2f}x ORT" if "ort" in t else ""
            nb_read = ort_bytes if name == "ort" else wbytes
            print(f"  {name:11s} median {med * 1e3:8.3f} ms  best {best * 1e3:8.3f} ms  "
                  f"{nb_read / best / 1e9:7.2f} GB/s{extra}")
    m = 64
    xm = rng.standard_normal((m, k)).astype(np.float32)
    runners = {isa: native_runner(so, isa, typ, pool, xm, k, n) for isa in avail if isa != "scalar"}
    if ort_too:
        runners["ort"], _ = ort_runner(tname, k, n, m, rng)
    t = interleaved(runners, rounds, block_s)
    flop = 2.0 * m * k * n
    print(f"{tname} K={k} N={n} m={m}: load {os.getloadavg()[0]:.2f}")
    for name, (med, best) in t.items():
        extra = f"  {t['ort'][1] / best:.2f}x ORT" if "ort" in t and name != "ort" else ""
        print(f"  {name:11s} median {med * 1e3:8.2f} ms  best {best * 1e3:8.2f} ms  "
              f"{flop / best / 1e9:7.1f} GFLOP/s{extra}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer rounds (validates the harness)")
    ap.add_argument("--types", default=",".join(TYPES))
    ap.add_argument("--no-ort", action="store_true")
    args = ap.parse_args(argv)
    rounds, block_s = (3, 0.002) if args.quick else (15, 0.004)
    tmp = Path(tempfile.mkdtemp(prefix="qk-bench-"))
    try:
        so = open_kernels(tmp)
        avail = [isa for isa in ISAS if so.amber_set_isa(isa.encode()) == 0]
        print(f"cpu: {cpu_model()} ({os.cpu_count()} cpus) features: {' '.join(cpu_features())}")
        print(f"ISAs: {' '.join(avail)}; single thread; load average at start {os.getloadavg()}")
        rng = np.random.default_rng(0)
        for tname in args.types.split(","):
            for k, n in SHAPES:
                bench_shape(so, avail, tname, k, n, rng, not args.no_ort, rounds, block_s)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
