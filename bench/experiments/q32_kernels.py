"""Single-thread speed of Amber's q32 kernels (Q4_0 Q4_1 Q5_0 Q5_1 Q8_0) against the memory roofline
and ONNX Runtime's MatMulNBits, in one process, interleaved.

  python -m bench.experiments.q32_kernels [--reps 5] [--isa avx2 ...]

m = 1 (decode) and m = 4 (four chats batched): GB/s of weight bytes streamed (the weights cycle
through copies larger than the L3, so they come from memory), against np.copy of a same-sized
buffer from the same kind of pool (bytes copied / s; a copy also writes them). m = 64 (prefill):
GFLOP/s (2*m*K*N / s). Every ORT figure is in Amber's bytes/flops too (time ratios). ORT runs
MatMulNBits (bits 4, block 32, accuracy_level 4, one intra-op thread) on the Q4_0 weights
re-packed into its layout (same codes, float32 scales, the default zero point 8).
"""
from __future__ import annotations

import argparse
import ctypes
import os
import platform
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

TYPES = {"Q4_0": (2, 18), "Q4_1": (3, 20), "Q5_0": (6, 22), "Q5_1": (7, 24), "Q8_0": (8, 34)}
SHAPES = ((2048, 8192), (8192, 2048))   # (K, N): a 1B-ish layer, both ways round
POOL_BYTES = 160 << 20                  # > 4x this machine's 32 MiB L3


def open_kernels(out_dir: Path) -> ctypes.CDLL:
    """The kernels library as `python -m engine.native.build` makes it, built into out_dir and
    bound by engine.native (the one ctypes binding)."""
    from engine.native import build_and_open

    lib = build_and_open(out_dir)
    if lib is None:
        raise SystemExit("no C compiler (cc) found")
    return lib


def random_rows(bs: int, has_min: bool, n: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """n rows of random blocks with small finite fp16 scales."""
    nb = k // 32
    raw = rng.integers(0, 256, size=(n, nb, bs), dtype=np.uint8)
    ns = 2 if has_min else 1
    raw[:, :, : 2 * ns] = rng.uniform(0.002, 0.05, size=(n, nb, ns)).astype(np.float16).view(
        np.uint8).reshape(n, nb, 2 * ns)
    return raw.reshape(n, nb * bs)


def pool_of(first: np.ndarray) -> list[np.ndarray]:
    """Copies of `first` adding up to POOL_BYTES, so each call reads its weights from memory."""
    count = max(2, POOL_BYTES // first.nbytes)
    return [first] + [first.copy() for _ in range(count - 1)]


def quantize(lib: ctypes.CDLL, qtype: int, x: np.ndarray) -> np.ndarray:
    m, k = x.shape
    out = np.zeros((m, lib.amber_act_bytes(qtype, k)), np.uint8)
    for i in range(m):
        lib.amber_quantize_act(qtype, x[i].ctypes.data, k, out[i].ctypes.data)
    return out


def ort_session(q40: np.ndarray, k: int, n: int):
    """MatMulNBits over the Q4_0 rows' codes and scales (one thread)."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    nb = k // 32
    blk = q40.reshape(n, nb, 18)
    d = blk[:, :, :2].copy().view(np.float16).astype(np.float32).reshape(n * nb)
    qs = blk[:, :, 2:]
    codes = np.concatenate([qs & 15, qs >> 4], axis=2)            # (n, nb, 32): GGUF order
    packed = (codes[:, :, 0::2] | (codes[:, :, 1::2] << 4)).astype(np.uint8)   # ORT: low = even
    node = helper.make_node("MatMulNBits", ["A", "B", "scales"], ["Y"], domain="com.microsoft",
                            K=k, N=n, bits=4, block_size=32, accuracy_level=4)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("A", TensorProto.FLOAT, ["M", k])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["M", n])],
        [numpy_helper.from_array(packed, "B"), numpy_helper.from_array(d, "scales")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)], ir_version=10)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def time_rounds(fns: dict[str, object], calls: int, reps: int) -> dict[str, float]:
    """Best seconds a call of each fn, run in interleaved rounds (A, B, A, B ...)."""
    best = {name: float("inf") for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            fn()                                             # warm: one call outside the clock
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            best[name] = min(best[name], (time.perf_counter() - t0) / calls)
    return best


def cycler(items: list):
    state = {"i": 0}

    def nxt():
        state["i"] = (state["i"] + 1) % len(items)
        return items[state["i"]]
    return nxt


def cpu_line() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        model = next((ln.split(":", 1)[1].strip() for ln in out.splitlines()
                      if ln.startswith("Model name")), platform.processor())
        flags = next((ln.split(":", 1)[1].split() for ln in out.splitlines()
                      if ln.startswith("Flags")), [])
        keep = [f for f in flags if f.startswith(("avx512", "avx_vnni", "avx2", "amx"))]
        return f"{model} ({' '.join(keep)})"
    except (OSError, subprocess.CalledProcessError, StopIteration):
        return platform.processor() or "unknown CPU"


def bench_type(lib: ctypes.CDLL, tname: str, k: int, n: int, isas: list[str], reps: int,
               prefill_m: int, with_ort: bool, rng: np.random.Generator) -> list[str]:
    """The figure lines of one type at one shape."""
    qtype, bs = TYPES[tname]
    w0 = random_rows(bs, qtype in (3, 7), n, k, rng)
    pool = pool_of(w0)
    wbytes = w0.nbytes
    src = [np.empty(wbytes, np.uint8) for _ in range(len(pool))]
    dst = np.empty(wbytes, np.uint8)
    next_w, next_src = cycler(pool), cycler(src)
    x1 = rng.standard_normal((1, k)).astype(np.float32)
    xm = rng.standard_normal((prefill_m, k)).astype(np.float32)
    a1, am = quantize(lib, qtype, x1), quantize(lib, qtype, xm)
    y1 = np.zeros((1, n), np.float32)
    ym = np.zeros((prefill_m, n), np.float32)

    def kern(isa: str, act: np.ndarray, y: np.ndarray):
        name = isa.encode()

        def call() -> None:
            lib.amber_set_isa(name)
            lib.amber_gemm_rows(qtype, act.ctypes.data, act.shape[0], next_w().ctypes.data, k,
                                0, n, y.ctypes.data, n)
        return call

    x4 = rng.standard_normal((4, k)).astype(np.float32)
    a4, y4 = quantize(lib, qtype, x4), np.zeros((4, n), np.float32)
    dec = {isa: kern(isa, a1, y1) for isa in isas}
    dec["np.copy"] = lambda: np.copyto(dst, next_src())
    bat = {isa: kern(isa, a4, y4) for isa in isas if isa != "scalar"}
    pre = {isa: kern(isa, am, ym) for isa in isas if isa != "scalar"}
    if with_ort and tname == "Q4_0":
        next_s = cycler([ort_session(w, k, n) for w in pool[: max(2, len(pool) // 2)]])
        dec["ORT MatMulNBits"] = lambda: next_s().run(None, {"A": x1})
        bat["ORT MatMulNBits"] = lambda: next_s().run(None, {"A": x4})
        pre["ORT MatMulNBits"] = lambda: next_s().run(None, {"A": xm})
    calls = max(4, int(0.15e9 // wbytes))
    t = time_rounds(dec, calls=calls, reps=reps)
    lines = [f"{tname} m=1 ({wbytes / 2**20:.1f} MiB): GB/s  " +
             ", ".join(f"{name} {wbytes / s / 1e9:.1f}" for name, s in t.items())]
    t = time_rounds(bat, calls=calls, reps=reps)
    lines.append(f"{tname} m=4: GB/s  " +
                 ", ".join(f"{name} {wbytes / s / 1e9:.1f}" for name, s in t.items()))
    flops = 2.0 * prefill_m * k * n
    t = time_rounds(pre, calls=2, reps=max(2, reps // 2))
    lines.append(f"{tname} m={prefill_m}: GFLOP/s  " +
                 ", ".join(f"{name} {flops / s / 1e9:.1f}" for name, s in t.items()))
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--isa", nargs="*", default=None, help="ISAs to time (default: all this CPU has)")
    ap.add_argument("--types", nargs="*", default=list(TYPES))
    ap.add_argument("--no-ort", action="store_true")
    ap.add_argument("--prefill-m", type=int, default=64)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        lib = open_kernels(Path(tmp))
        best_isa = lib.amber_isa().decode()
        isas = args.isa or [n for n in ("scalar", "avx2", "avxvnni", "avx512vnni")
                            if lib.amber_set_isa(n.encode()) == 0]
        lib.amber_set_isa(best_isa.encode())
        print(f"CPU: {cpu_line()}; load average {os.getloadavg()[0]:.2f} at start; one thread")
        for k, n in SHAPES:
            print(f"\n== K={k} N={n} ==")
            for tname in args.types:
                for line in bench_type(lib, tname, k, n, isas, args.reps, args.prefill_m,
                                       not args.no_ort, rng):
                    print(line, flush=True)
        lib.amber_set_isa(best_isa.encode())
        print(f"\nload average {os.getloadavg()[0]:.2f} at end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
