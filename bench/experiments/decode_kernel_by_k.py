"""`python -m bench.experiments.decode_kernel_by_k`: the m = 1 (decode) kernels' rate against K, one thread.

By hand, not part of `make bench`. Each K gets the same bytes per call
(`--kib`, default 512: in L2, so the kernel's own rate; `--copies 7` of 16384 KiB stream from DRAM);
the Ks are timed in interleaved rounds, medians. With `--against OTHER.so` the same calls also run
on another build of the library (e.g. main's sources built into a scratch folder with
`engine.native.build.build(out, src_dir=...)`), interleaved, and the outputs must be the same bits.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from bench.harness.common import cpu_model


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.experiments.decode_kernel_by_k",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--types", default="12,13,14", help="GGML type ids (12 Q4_K, 13 Q5_K, 14 Q6_K, 2 Q4_0, ...)")
    ap.add_argument("--ks", default="1536,2048,4096,8960")
    ap.add_argument("--kib", type=int, default=512, help="weight bytes a call (KiB)")
    ap.add_argument("--copies", type=int, default=0, help="extra copies of the weights (> L3: from DRAM)")
    ap.add_argument("--rounds", type=int, default=16)
    ap.add_argument("--against", help="another build of the kernels library to compare with")
    ap.add_argument("--isa", help="force this ISA in both (scalar, avx2, avxvnni, avx512vnni)")
    args = ap.parse_args(argv)
    import engine.native as native
    from tests.support.native_op import random_rows
    lib = native.kernels()
    if lib is None:
        print("the native library is not built: python -m engine.native.build", file=sys.stderr)
        return 2
    libs = {"this": lib}
    if args.against:
        libs["other"] = native.open_library(Path(args.against))
    for one in libs.values():
        if args.isa and one.amber_set_isa(args.isa.encode()) != 0:
            print(f"this CPU lacks {args.isa}", file=sys.stderr)
            return 2
    print(f"cpu: {cpu_model()}; ISA {lib.amber_isa().decode()}; one thread; {args.kib} KiB x "
          f"{args.copies + 1} a call; load average {os.getloadavg()[0]:.1f}")
    rng = np.random.default_rng(0)
    for t in (int(v) for v in args.types.split(",")):
        for k in (int(v) for v in args.ks.split(",")):
            rb = int(lib.amber_row_bytes(t, k))
            if rb <= 0:
                continue
            n = max(1, (args.kib << 10) // rb)
            base = random_rows(t, n, k, rng)
            pool = [base] + [base.copy() for _ in range(args.copies)]
            x = rng.standard_normal(k).astype(np.float32)
            act = np.zeros(int(lib.amber_act_bytes(t, k)), np.uint8)
            lib.amber_quantize_act(t, x.ctypes.data, k, act.ctypes.data)
            reps = max(1, 8 // len(pool))
            ys = {name: np.zeros(n, np.float32) for name in libs}
            times: dict[str, list[float]] = {name: [] for name in libs}
            for r in range(args.rounds):
                for name in (list(libs) if r % 2 == 0 else list(libs)[::-1]):
                    one, y = libs[name], ys[name]
                    start = time.thread_time()   # CPU time: descheduled time (a shared machine) left out
                    for _ in range(reps):
                        for w in pool:
                            one.amber_gemm_rows(t, act.ctypes.data, 1, w.ctypes.data, k, 0, n, y.ctypes.data, n)
                    times[name].append(time.thread_time() - start)
            nbytes = reps * len(pool) * base.nbytes
            line = f"type {t:2d} K {k:5d}: " + ", ".join(
                f"{name} {nbytes / statistics.median(v) / 1e9:5.1f} GB/s" for name, v in times.items())
            if "other" in libs:
                same = bool(np.array_equal(ys["this"], ys["other"]))
                ratio = statistics.median(o / s for o, s in zip(times["other"], times["this"], strict=True))
                line += f"; this / other speed {ratio:.3f} ({'same bits' if same else 'BITS DIFFER'})"
            print(line + f"; load {os.getloadavg()[0]:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
