"""One ai.amber.GgufMatMul node vs the equivalent MatMulNBits node: `python -m bench.experiments.gguf_matmul_node`.

A 1B-ish layer (K=2048, N=8192 by default), random GGUF blocks; Q4_0 against MatMulNBits 4-bit
(block 32, default zero point 8) and Q8_0 against MatMulNBits 8-bit (zero point 128), both at
accuracy_level 4 (int8 activations). Every variant is a session of its own in this process, timed
in interleaved blocks (A, B, A, B, ...), median of the blocks; speed ratios are what to read, on a
loaded machine especially (the load average is printed). Needs the native library built
(`python -m engine.native.build`).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import engine.native as native
from bench.harness.common import cpu_model
from tests.support.native_op import IR_VERSION, gguf_matmul_model, random_rows

MS_DOMAIN = "com.microsoft"


def nbits_model(rows: np.ndarray, ggml_type: int, k: int, n: int) -> tuple[bytes, int]:
    """The MatMulNBits node computing the same product from the same blocks; (model, weight bytes)."""
    nb = k // 32
    if ggml_type == 2:   # Q4_0: f16 d, 16 bytes of nibbles (element j low, j+16 high)
        blocks = rows.reshape(n, nb, 18)
        d = blocks[:, :, :2].copy().view(np.float16).astype(np.float32).reshape(n, nb)
        qs = blocks[:, :, 2:]
        q = np.concatenate([qs & 15, qs >> 4], axis=2)         # [n, nb, 32] in element order
        packed = (q[:, :, 0::2] | (q[:, :, 1::2] << 4)).astype(np.uint8)
        bits = 4
    elif ggml_type == 8:  # Q8_0: f16 d, 32 int8
        blocks = rows.reshape(n, nb, 34)
        d = blocks[:, :, :2].copy().view(np.float16).astype(np.float32).reshape(n, nb)
        packed = (blocks[:, :, 2:].view(np.int8).astype(np.int16) + 128).astype(np.uint8)
        bits = 8
    else:
        raise ValueError(f"no MatMulNBits form for ggml type {ggml_type} here")
    node = helper.make_node("MatMulNBits", ["X", "B", "S"], ["Y"], domain=MS_DOMAIN, K=k, N=n, bits=bits,
                            block_size=32, accuracy_level=4)
    graph = helper.make_graph(
        [node], "nbits", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["m", k])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["m", n])],
        [numpy_helper.from_array(packed, "B"), numpy_helper.from_array(d.reshape(-1), "S")])
    model = helper.make_model(graph, ir_version=IR_VERSION,
                              opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS_DOMAIN, 1)])
    return bytes(model.SerializeToString()), packed.nbytes + d.nbytes


def _session(data: bytes, threads: int, custom: bool) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.log_severity_level = 3
    if custom and not native.register(so):
        raise SystemExit("the native library is not available: python -m engine.native.build")
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


def run(ggml_types: list[int], k: int, n: int, ms: list[int], threads: list[int], rounds: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(18)
    results: list[dict[str, Any]] = []
    for t in ggml_types:
        rows = random_rows(t, n, k, rng)
        nb_model, nb_bytes = nbits_model(rows, t, k, n)
        gg_model = gguf_matmul_model(rows, ggml_type=t, k=k, n=n, x_rank=2)
        for th in threads:
            forms = {"GgufMatMul": _session(gg_model, th, True), "MatMulNBits": _session(nb_model, th, False)}
            for m in ms:
                x = rng.standard_normal((m, k)).astype(np.float32)
                outs = {name: s.run(None, {"X": x})[0] for name, s in forms.items()}   # warm, and agree?
                rel = float(np.abs(outs["GgufMatMul"] - outs["MatMulNBits"]).max() /
                            max(1e-9, float(np.abs(outs["MatMulNBits"]).max())))
                reps = max(3, 256 // m)
                times: dict[str, list[float]] = {name: [] for name in forms}
                for _ in range(rounds):
                    for name, s in forms.items():
                        start = time.perf_counter()
                        for _ in range(reps):
                            s.run(None, {"X": x})
                        times[name].append((time.perf_counter() - start) / reps)
                med = {name: statistics.median(v) for name, v in times.items()}
                results.append({"type": t, "threads": th, "m": m, "gguf_ms": med["GgufMatMul"] * 1e3,
                                "nbits_ms": med["MatMulNBits"] * 1e3, "gguf_bytes": rows.nbytes,
                                "nbits_bytes": nb_bytes, "max_rel_diff": rel, "load": os.getloadavg()[0]})
                r = results[-1]
                print(f"type {t:2d} threads {th} m {m:3d}: GgufMatMul {r['gguf_ms']:8.3f} ms  MatMulNBits "
                      f"{r['nbits_ms']:8.3f} ms  speedup {r['nbits_ms'] / r['gguf_ms']:5.2f}x  "
                      f"(outputs differ by {rel:.1e} of max; load {r['load']:.1f})", flush=True)
    return results


def markdown(results: list[dict[str, Any]], k: int, n: int) -> str:
    names = {2: "Q4_0", 8: "Q8_0"}
    lines = [f"CPU: {cpu_model()}; {native.isa()} kernels; ONNX Runtime {ort.__version__}; K={k}, N={n}; "
             f"load average {min(r['load'] for r in results):.1f}-{max(r['load'] for r in results):.1f}.",
             "",
             "| type | threads | m | GgufMatMul ms | MatMulNBits ms | NBits / Gguf | weight MB read (Gguf / NBits) |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {names.get(r['type'], r['type'])} | {r['threads']} | {r['m']} | {r['gguf_ms']:.3f} | "
                     f"{r['nbits_ms']:.3f} | {r['nbits_ms'] / r['gguf_ms']:.2f}x | "
                     f"{r['gguf_bytes'] / 1e6:.2f} / {r['nbits_bytes'] / 1e6:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.experiments.gguf_matmul_node",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, default=2048)
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--m", default="1,64")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--types", default="2,8", help="GGML type ids: 2 Q4_0, 8 Q8_0")
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args(argv)
    if native.kernels() is None:
        print("native kernels not built: python -m engine.native.build", file=sys.stderr)
        return 2
    results = run([int(v) for v in a.types.split(",")], a.k, a.n, [int(v) for v in a.m.split(",")],
                  [int(v) for v in a.threads.split(",")], a.rounds)
    print()
    print(markdown(results, a.k, a.n))
    return 0


if __name__ == "__main__":
    sys.exit(main())
