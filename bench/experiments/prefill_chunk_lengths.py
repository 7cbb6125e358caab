"""`python -m bench.experiments.prefill_chunk_lengths MODEL_DIR [--chunks 64,128,256,512] [--tokens 2048] [--rounds 3]`:
a whole-model prefill at fixed chunk lengths, interleaved in ONE process (by hand, not part of
`make bench`).

Per chunk length and round: CPU seconds of the process for one `Runner.forward` over `--tokens` prompt
tokens (time.process_time: all threads, descheduled time not counted; run with AMBER_ORT_SPIN=off so a
spinning worker's wait is not counted as work), wall seconds, the CPU seconds inside ONNX Runtime's
runs vs the Python around them, the peak RSS during that prefill (VmHWM reset through
/proc/self/clear_refs before it) and its rise over the RSS before it, and the largest difference of the
last logits from the first chunk length's. The order of the chunk lengths rotates every round.
`--per-chunk` also prints the CPU seconds of each chunk's run at the first chunk length (how the
attention's growing context shows).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.harness.common import cpu_model, median


def _status_kib(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def _reset_hwm() -> None:
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.experiments.prefill_chunk_lengths")
    ap.add_argument("model_dir")
    ap.add_argument("--chunks", default="64,128,256,512")
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--per-chunk", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args(argv)

    from engine.runtime.model import load_model
    from engine.runtime.runner import Runner

    chunks = [int(c) for c in a.chunks.split(",")]
    model = load_model(a.model_dir, "cpu", a.threads)
    runner = Runner(model)
    vocab = int(model.config.get("vocab_size") or 1000)
    ids = [int(t) for t in np.random.default_rng(7).integers(10, vocab - 10, a.tokens)]
    print(f"{a.model_dir}: default chunk {runner.chunk_len(runner.new_cache(), a.tokens)}, "
          f"load {os.getloadavg()[0]:.2f}, {cpu_model()}", flush=True)

    run_orig = model.session.run_with_iobinding
    ort_cpu: list[float] = []

    def timed_run(*args: Any, **kw: Any) -> Any:
        t = time.process_time()
        try:
            return run_orig(*args, **kw)
        finally:
            ort_cpu.append(time.process_time() - t)
    model.session.run_with_iobinding = timed_run     # type: ignore[method-assign]
    plain_chunk_len = runner.chunk_len

    def prefill(chunk: int) -> dict[str, Any]:
        runner.chunk_len = lambda cache, n: chunk    # type: ignore[method-assign]
        cache = runner.new_cache()
        ort_cpu.clear()
        rss0 = _status_kib("VmRSS")
        _reset_hwm()
        c0, w0 = time.process_time(), time.perf_counter()
        logits = runner.forward(cache, ids)
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        peak = _status_kib("VmHWM")
        runner.chunk_len = plain_chunk_len           # type: ignore[method-assign]
        assert logits is not None
        return {"cpu": cpu, "wall": wall, "ort_cpu": sum(ort_cpu), "chunks": list(ort_cpu),
                "rss0_mib": rss0 / 1024, "peak_mib": peak / 1024, "rise_mib": (peak - rss0) / 1024,
                "logits": logits.copy()}

    prefill(min(chunks))    # warm-up (ORT's first-run allocations)
    res: dict[int, list[dict[str, Any]]] = {c: [] for c in chunks}
    ref: np.ndarray | None = None
    for r in range(a.rounds):
        order = chunks[r % len(chunks):] + chunks[:r % len(chunks)]
        for c in order:
            out = prefill(c)
            if c == chunks[0] and ref is None:
                ref = out["logits"]
            res[c].append(out)
            print(f"round {r} chunk {c:4d}: cpu {out['cpu']:7.2f} s (ort {out['ort_cpu']:7.2f}) "
                  f"wall {out['wall']:7.2f} s peak {out['peak_mib']:7.1f} MiB (+{out['rise_mib']:.1f}) "
                  f"load {os.getloadavg()[0]:.2f}", flush=True)
    print(f"summary ({a.tokens} tokens, {a.rounds} rounds, medians; load {os.getloadavg()[0]:.2f}):")
    summary: dict[str, Any] = {}
    base = median(x["cpu"] for x in res[chunks[0]])
    for c in chunks:
        xs = res[c]
        cpu = median(x["cpu"] for x in xs)
        diff = max(float(np.max(np.abs(x["logits"] - ref))) for x in xs) if ref is not None else 0.0
        row = {"cpu_s": cpu, "ort_cpu_s": median(x["ort_cpu"] for x in xs),
               "python_cpu_s": median(x["cpu"] - x["ort_cpu"] for x in xs),
               "wall_s": median(x["wall"] for x in xs), "tok_per_cpu_s": a.tokens / cpu,
               "peak_mib": max(x["peak_mib"] for x in xs), "rise_mib": max(x["rise_mib"] for x in xs),
               "max_logit_diff": diff, "vs_first": base / cpu, "all_cpu": [x["cpu"] for x in xs]}
        summary[str(c)] = row
        print(f"  chunk {c:4d}: {cpu:7.2f} CPU s ({a.tokens / cpu:6.1f} tok/CPU s, x{base / cpu:.3f} vs {chunks[0]}), "
              f"python {row['python_cpu_s']:.3f} s, wall {row['wall_s']:.2f} s, peak {row['peak_mib']:.0f} MiB "
              f"(+{row['rise_mib']:.0f}), max |logit diff| {diff:.2e}  all {['%.2f' % v for v in row['all_cpu']]}")
    if a.per_chunk:
        per = np.median(np.array([x["chunks"] for x in res[chunks[0]]]), axis=0)
        print(f"  per-chunk ORT CPU s at chunk {chunks[0]}:", " ".join(f"{v:.3f}" for v in per))
        summary["per_chunk"] = per.tolist()
    if a.json:
        Path(a.json).write_text(json.dumps({"model": a.model_dir, "tokens": a.tokens, "rows": summary}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
