"""`python -m bench.experiments.decode_two_builds MODEL_DIR --against OTHER.so`:
decode tok/s of two builds of the op library.

By hand, not part of `make bench`. One process, one ONNX Runtime session per
build of Amber's op library (this worktree's, and e.g. main's sources built into a scratch folder),
the same model folder and token ids. At each context (`--ctx`) each session gets its own KV cache
filled with the same prompt, then `--rounds` interleaved rounds (the order alternates) of `--steps`
greedy decode steps (each round truncates the cache back to the prompt): medians of tok/s, the
ratio, and whether both builds chose the same tokens with the same logits bits. With `--threads 1`
the time is this thread's CPU time (a shared machine: descheduled time is left out).
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

from bench.harness.common import cpu_model, op_library_pair
from engine.runtime.model import load_model
from engine.runtime.providers import session_options
from engine.runtime.runner import Runner


def _runner(model_dir: str, lib: Path, threads: int) -> Runner:
    model = load_model(model_dir, provider="cpu", threads=threads)
    so = session_options(threads)
    so.register_custom_ops_library(str(lib))
    sess = ort.InferenceSession(str(model.graph), so, providers=["CPUExecutionProvider"])
    return Runner(dataclasses.replace(model, session=sess))


def _decode(runner: Runner, cache, ctx: int, first: int, steps: int, clock) -> tuple[float, list[int], np.ndarray]:
    """`steps` greedy steps after the first `ctx` positions; seconds, the tokens, the last logits."""
    cache.truncate(ctx)
    tok, toks = first, []
    start = clock()
    logits = np.zeros(1, np.float32)
    for _ in range(steps):
        logits = runner.forward(cache, [tok])
        assert logits is not None
        tok = int(np.argmax(logits))
        toks.append(tok)
    return clock() - start, toks, logits


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.experiments.decode_two_builds",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("model_dir")
    ap.add_argument("--against", required=True, help="another build of the op library (e.g. main's)")
    ap.add_argument("--ctx", default="100,1000")
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args(argv)
    libs = op_library_pair(a.against)
    if libs is None:
        return 2
    runners = {name: _runner(a.model_dir, path, a.threads) for name, path in libs.items()}
    vocab = int(runners["this"].model.config.get("vocab_size") or 1000)
    print(f"cpu: {cpu_model()}; {a.threads} threads; {a.steps} steps x {a.rounds} rounds; "
          f"load average {os.getloadavg()[0]:.1f}")
    rng = np.random.default_rng(0)
    for ctx in (int(c) for c in a.ctx.split(",")):
        ids = [int(t) for t in rng.integers(10, vocab - 10, ctx)]
        caches = {}
        for name, r in runners.items():
            c = r.new_cache()
            c.reserve(ctx + a.steps + 8)
            r.forward(c, ids)
            caches[name] = c
        times: dict[str, list[float]] = {n: [] for n in runners}
        # one thread runs in this thread: its CPU time leaves out the time other processes hold the core
        clock = time.thread_time if a.threads == 1 else time.perf_counter
        outs: dict[str, tuple[list[int], np.ndarray]] = {}
        for rd in range(a.rounds):
            for name in (list(runners) if rd % 2 == 0 else list(runners)[::-1]):
                sec, toks, logits = _decode(runners[name], caches[name], ctx, ids[-1], a.steps, clock)
                times[name].append(sec)
                outs[name] = (toks, logits)
        tps = {n: a.steps / statistics.median(v) for n, v in times.items()}
        ratio = statistics.median(o / s for o, s in zip(times["other"], times["this"], strict=True))
        same = outs["this"][0] == outs["other"][0] and np.array_equal(outs["this"][1], outs["other"][1])
        print(f"ctx {ctx:5d}: this {tps['this']:6.1f} tok/s, other {tps['other']:6.1f} tok/s; "
              f"this / other {ratio:.3f} ({'same tokens and logits' if same else 'OUTPUTS DIFFER'}); "
              f"load {os.getloadavg()[0]:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
