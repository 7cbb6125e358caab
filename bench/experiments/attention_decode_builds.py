"""`python -m bench.experiments.attention_decode_builds --against OTHER.so`:
ai.amber.Attention's decode step, two builds.

By hand, not part of `make bench`. A one-node graph of the default model's
attention (9 query heads, 3 KV heads, head size 64, float16 KV) at each context (`--ctx`), one new
token (past and present bound to one buffer, as the engine binds them); `--layers` copies of the
past KV (the model's 30 layers: ~23 MB at ctx 1000, from L3 as in a real step) taken in turn. One
session per build of the op library (this worktree's and e.g. main's), the same inputs,
interleaved rounds: median µs per call, the ratio, and whether the two builds' outputs are the
same bits. With one thread the time is this thread's CPU time (the machine is shared:
descheduled time is left out).
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
import onnxruntime as ort

from bench.harness.common import cpu_model, op_library_pair, op_session
from tests.support.attn_graphs import Case, as_half, feeds, model


def _bound(sess: ort.InferenceSession, f: dict[str, np.ndarray]) -> tuple[object, np.ndarray]:
    """An IOBinding with past and present as one buffer (as engine/runtime/kvcache.py binds them)
    and the output in a buffer of ours."""
    out = np.empty_like(f["query"])
    binding = sess.io_binding()
    for n, arr in f.items():
        if n.startswith("past_"):
            v = ort.OrtValue.ortvalue_from_numpy(arr.copy())
            binding.bind_ortvalue_input(n, v)
            binding.bind_ortvalue_output(n.replace("past_", "present_"), v)
        else:
            binding.bind_cpu_input(n, arr)
    binding.bind_ortvalue_output("out", ort.OrtValue.ortvalue_from_numpy(out))
    return binding, out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.experiments.attention_decode_builds",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--against", required=True, help="another build of the op library (e.g. main's)")
    ap.add_argument("--ctx", default="100,1000")
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args(argv)
    libs = op_library_pair(a.against)
    if libs is None:
        return 2
    print(f"cpu: {cpu_model()}; {a.threads} threads; {a.layers} KV copies; load average {os.getloadavg()[0]:.1f}")
    rng = np.random.default_rng(0)
    for ctx in (int(c) for c in a.ctx.split(",")):
        c = Case(hq=9, hkv=3, d=64, cap=ctx + 8, totals=[ctx])
        data = model(c, True)
        sess = {n: op_session(data, path, a.threads, spinning=True) for n, path in libs.items()}
        inputs = [as_half(feeds(c, rng)) for _ in range(a.layers)]
        bound = {n: [_bound(s, f) for f in inputs] for n, s in sess.items()}
        times: dict[str, list[float]] = {n: [] for n in sess}
        outs: dict[str, list[np.ndarray]] = {}
        # one thread runs in this thread: its CPU time leaves out the time other processes hold the core
        clock = time.thread_time if a.threads == 1 else time.perf_counter
        for rd in range(a.rounds):
            for name in (list(sess) if rd % 2 == 0 else list(sess)[::-1]):
                start = clock()
                for binding, _ in bound[name]:
                    sess[name].run_with_iobinding(binding)
                times[name].append((clock() - start) / len(inputs))
                outs[name] = [o.copy() for _, o in bound[name]]
        us = {n: statistics.median(v) * 1e6 for n, v in times.items()}
        ratio = statistics.median(o / s for o, s in zip(times["other"], times["this"], strict=True))
        same = all(np.array_equal(x, y) for x, y in zip(outs["this"], outs["other"], strict=True))
        print(f"ctx {ctx:5d}: this {us['this']:7.1f} us, other {us['other']:7.1f} us a call; this / other speed "
              f"{ratio:.3f} ({'same bits' if same else 'BITS DIFFER'}); load {os.getloadavg()[0]:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
