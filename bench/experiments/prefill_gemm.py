"""Prefill GgufMatMul nodes at the 135M / 0.5B / 1B shapes: `python -m bench.experiments.prefill_gemm`.

One ai.amber.GgufMatMul node per (type, K, N) that SmolLM2-135M at Q4_1, the Qwen2.5-0.5B and Llama-3.2-1B GGUFs at
Q4_0 and Q4_K_M hold, and Qwen2.5-1.5B's Q4_K_M K-quant nodes (llama.cpp's quantizer: 0.5B Q4_K_M
is Q5_0/Q8_0 with a Q6_K ffn_down),
m prompt rows (512 = one prefill chunk), 2 intra-op threads with spinning off, timed in process
CPU seconds (so other processes on a loaded machine take nothing from the figure; spinning would
add to it). GOPS = 2*m*K*N / CPU second: per-core throughput, to read against the VNNI peak of a
core. `--baseline LIB` times a second build of the library (a git worktree's _build/*.so) in the
same process, interleaved, and checks that both give the same bits. Needs the native library
(`python -m engine.native.build`).
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

import engine.native as native
from bench.harness.common import cpu_model, op_session
from tests.support.native_op import gguf_matmul_model, random_rows

# (label, ggml type, K, N): the prompt-time matmuls of one layer
SHAPES: tuple[tuple[str, int, int, int], ...] = (
    ("135M Q4_1 gate/up", 3, 576, 1536),
    ("135M Q4_1 down", 3, 1536, 576),
    ("0.5B Q4_0 gate/up", 2, 896, 4864),
    ("0.5B Q4_0 down", 2, 4864, 896),
    ("0.5B Q4_0 q/o", 2, 896, 896),
    ("0.5B Q4_K_M gate/up", 6, 896, 4864),
    ("0.5B Q4_K_M down", 14, 4864, 896),
    ("1B Q4_0 gate/up", 2, 2048, 8192),
    ("1B Q4_0 down", 2, 8192, 2048),
    ("1B Q4_K_M gate/up", 12, 2048, 8192),
    ("1B Q4_K_M q/o", 12, 2048, 2048),
    ("1B Q4_K_M down", 14, 8192, 2048),
    ("1.5B Q4_K_M gate/up", 12, 1536, 8960),
    ("1.5B Q4_K_M q/o", 12, 1536, 1536),
    ("1.5B Q4_K_M down", 14, 8960, 1536),
)


def cpu_seconds(sess: ort.InferenceSession, feed: dict[str, np.ndarray]) -> float:
    t0 = time.process_time()
    sess.run(None, feed)
    return time.process_time() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--m", type=int, default=512, help="prompt rows (default 512, one prefill chunk)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--baseline", type=Path, default=None, help="another build of the library")
    ap.add_argument("--only", default="", help="only the nodes whose label contains this (e.g. Q4_K_M)")
    args = ap.parse_args(argv)
    lib = native.library_path()
    if lib is None or not lib.is_file():
        raise SystemExit("the native library is not built: python -m engine.native.build")
    libs = {"this build": lib} if args.baseline is None else {"baseline": args.baseline, "this build": lib}
    rng = np.random.default_rng(18)
    print(f"CPU: {cpu_model()}; load average {os.getloadavg()[0]:.2f}; m = {args.m}, "
          f"{args.threads} threads, GOPS per CPU second (median of {args.rounds})")
    print("| node | type | K | N | " + " | ".join(libs) + " |")
    print("|---|---|---|---|" + "---|" * len(libs))
    for label, typ, k, n in SHAPES:
        if args.only not in label:
            continue
        model = gguf_matmul_model(random_rows(typ, n, k, rng), ggml_type=typ, k=k, n=n)
        sessions = {name: op_session(model, path, args.threads) for name, path in libs.items()}
        feed = {next(iter(sessions.values())).get_inputs()[0].name:
                rng.standard_normal((1, args.m, k)).astype(np.float32)}
        outs = [s.run(None, feed)[0] for s in sessions.values()]   # also the warm-up
        times: dict[str, list[float]] = {name: [] for name in sessions}
        for _ in range(args.rounds):
            for name, sess in sessions.items():
                times[name].append(cpu_seconds(sess, feed))
        gops = [2.0 * args.m * k * n / statistics.median(t) / 1e9 for t in times.values()]
        note = "" if all(np.array_equal(outs[0], o) for o in outs[1:]) else " (bits differ)"
        print(f"| {label} | {typ} | {k} | {n} | " + " | ".join(f"{g:.0f}" for g in gops) + f" |{note}",
              flush=True)
    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
