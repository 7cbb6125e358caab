"""`python -m bench.experiments.attention_prefill [--against OTHER.so] [--shape 1b] [--chunk 64] [--tokens 2048]`:
ai.amber.Attention over a whole prompt's chunks, one layer (by hand).

A one-node graph at a model's head shape (`--shape`: 135m 9/3 heads, 0.5b 14/2, 1b 32/8, 1.5b 12/2;
float16 KV, rotary), run chunk after chunk as the runner runs a `--tokens` prompt (past and present
bound to one buffer). Per build: CPU seconds of the process for the whole prompt (all threads; the
machine is shared, so descheduled time is left out), the GFLOP/s that gives (2 x positions attended x
head size x 2 per query head: QK and PV), and whether the two builds give the same bits. Builds are
interleaved, rounds alternate their order. Without `--against` only this tree's build runs.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

from bench.harness.common import cpu_model, op_session
from tests.support.attn_graphs import Case, model

SHAPES = {"135m": (9, 3, 64), "0.5b": (14, 2, 64), "1b": (32, 8, 64), "1.5b": (12, 2, 128)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.experiments.attention_prefill",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--against", help="another build of the op library (e.g. main's)")
    ap.add_argument("--shape", default="1b", choices=sorted(SHAPES))
    ap.add_argument("--chunk", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args(argv)
    from engine import native
    this = native.library_path()
    if this is None:
        print("the native library is not built: python -m engine.native.build")
        return 2
    libs = {"this": this, **({"other": Path(a.against)} if a.against else {})}
    hq, hkv, d = SHAPES[a.shape]
    n, s = a.tokens, a.chunk
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, n, hq * d)).astype(np.float32)
    k = rng.standard_normal((1, n, hkv * d)).astype(np.float32)
    v = rng.standard_normal((1, n, hkv * d)).astype(np.float32)
    inv = 1.0 / (10000 ** (np.arange(0, d, 2) / d))
    ang = np.outer(np.arange(n + 8), inv)
    cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    flops = sum(4.0 * d * hq * (p + 1) for p in range(n))
    print(f"cpu: {cpu_model()}; shape {a.shape} ({hq}/{hkv} heads, d {d}); {n} tokens in chunks of {s}; "
          f"{a.threads} threads; load average {os.getloadavg()[0]:.1f}", flush=True)
    sessions = {}
    for name, lib in libs.items():
        sessions[name] = {c: op_session(model(Case(s=c, hq=hq, hkv=hkv, d=d, cap=n, totals=[n]), True), lib, a.threads)
                          for c in sorted({min(s, n - st) for st in range(0, n, s)})}

    def prompt(name: str) -> tuple[float, np.ndarray]:
        kv = {x: ort.OrtValue.ortvalue_from_numpy(np.zeros((1, hkv, n, d), np.float16)) for x in ("k", "v")}
        outs = []
        t = time.process_time()
        for st in range(0, n, s):
            c = min(s, n - st)
            sess = sessions[name][c]
            b = sess.io_binding()
            for nm, arr in (("query", q[:, st:st + c]), ("key", k[:, st:st + c]), ("value", v[:, st:st + c]),
                            ("seqlens_k", np.array([st + c - 1], np.int32)),
                            ("total_sequence_length", np.array([st + c], np.int32)),
                            ("cos_cache", cos), ("sin_cache", sin)):
                b.bind_cpu_input(nm, np.ascontiguousarray(arr))
            b.bind_ortvalue_input("past_key", kv["k"])
            b.bind_ortvalue_input("past_value", kv["v"])
            out = np.empty((1, c, hq * d), np.float32)
            b.bind_ortvalue_output("out", ort.OrtValue.ortvalue_from_numpy(out))
            b.bind_ortvalue_output("present_key", kv["k"])
            b.bind_ortvalue_output("present_value", kv["v"])
            sess.run_with_iobinding(b)
            outs.append(out)
        return time.process_time() - t, np.concatenate(outs, axis=1)

    times: dict[str, list[float]] = {x: [] for x in libs}
    outs: dict[str, np.ndarray] = {}
    for name in libs:
        prompt(name)   # warm-up
    for rd in range(a.rounds):
        for name in (list(libs) if rd % 2 == 0 else list(libs)[::-1]):
            t, outs[name] = prompt(name)
            times[name].append(t)
    for name in libs:
        med = statistics.median(times[name])
        print(f"  {name}: {med:.3f} CPU s ({flops / med / 1e9:.1f} GFLOP/s per CPU s) "
              f"all {['%.3f' % x for x in times[name]]}")
    if "other" in libs:
        ratio = statistics.median(o / t for o, t in zip(times["other"], times["this"], strict=True))
        same = np.array_equal(outs["this"], outs["other"])
        diff = float(np.max(np.abs(outs["this"] - outs["other"])))
        print(f"  this / other speed {ratio:.3f}; {'same bits' if same else f'BITS DIFFER (max {diff:.2e})'}; "
              f"load {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
