"""Where the memory of a generating Amber process goes: RSS per stage, per model.

Each model runs in a fresh process (common.run_worker: the environment every bench worker gets,
with the huge-page tunable the built app uses) that imports the libraries, loads the model on CPU,
prefills a prompt (KV reserved for the prompt and the reply, as `Generator.stream` does) and
decodes. /proc/self/smaps_rollup is read after each stage (resident, anonymous, file-backed); the
process's peak is its ru_maxrss (wait4), as the compare bench measures every engine.

  python -m bench memory                         # the default model (135M), `make bench`
  python -m bench memory --shapes 135m,/path/to/converted-folder,...
"""
from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path
from typing import Any

from bench.harness import common
from bench.harness.common import Section, table

PROMPT = 2048
DECODE = 32


def _rollup() -> dict[str, int]:
    out: dict[str, int] = {}
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[-1] == "kB":
            out[parts[0].rstrip(":")] = int(parts[1]) * 1024
    return out


def worker_stages(model_dir: str, prompt: int, decode: int) -> dict[str, Any]:
    """Worker: RSS after each stage of a generating process."""
    stages: list[dict[str, Any]] = []

    def stage(name: str) -> None:
        r = _rollup()
        stages.append({"stage": name, "rss": r.get("Rss", 0), "anon": r.get("Anonymous", 0),
                       "file": r.get("Rss", 0) - r.get("Anonymous", 0),
                       "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024})

    stage("interpreter")
    import numpy as np
    import onnxruntime  # noqa: F401 - the stage measures the import
    import tokenizers  # noqa: F401
    stage("numpy, onnxruntime, tokenizers imported")
    from engine.runtime.model import load_model
    from engine.runtime.runner import Runner
    stage("engine imported")
    model = load_model(model_dir, "cpu", common.THREADS)
    stage("session created")
    runner = Runner(model)
    cache = runner.new_cache()
    cache.reserve(prompt + decode)
    ids = [int(x) for x in np.random.default_rng(0).integers(100, min(40000, model.config["vocab_size"]), prompt)]
    t0 = time.perf_counter()
    logits = runner.forward(cache, ids)
    prefill_s = time.perf_counter() - t0
    stage(f"prefill of {prompt} tokens")
    tok = int(np.argmax(logits))
    t0 = time.perf_counter()
    for _ in range(decode):
        tok = int(np.argmax(runner.forward(cache, [tok])))
    decode_s = time.perf_counter() - t0
    stage(f"{decode} tokens decoded")
    return {"stages": stages, "kv_bytes": cache.nbytes, "prefill_tok_s": prompt / prefill_s,
            "decode_tok_s": decode / decode_s, "name": model.name}


def run(quick: bool = False, shapes: list[str] | None = None) -> dict[str, Any]:
    from bench.suites import engine as bench_engine
    load_before = common.load_average()
    results: dict[str, Any] = {"models": {}, "prompt": PROMPT, "decode": DECODE}
    for shape in shapes or ["135m"]:
        folder = bench_engine.model_dir() if shape in ("135m", "tiny", "default") else Path(shape)
        prompt = 256 if quick else PROMPT
        try:
            r = common.run_worker("bench.suites.memory", "worker_stages",
                                  {"model_dir": str(folder), "prompt": prompt, "decode": DECODE}, timeout=3600)
        except common.WorkerError as exc:
            results["models"][str(folder)] = {"error": str(exc).strip().splitlines()[-1][:300]}
            print(f"memory: {folder} could not run: {results['models'][str(folder)]['error']}", flush=True)
            continue
        r.data["peak_rss_bytes"] = r.peak_rss_bytes
        results["models"][r.data["name"]] = r.data
        print(f"memory: {r.data['name']}: peak RSS {r.peak_rss_bytes / 2**20:.0f} MiB, "
              f"KV {r.data['kv_bytes'] / 2**20:.0f} MiB", flush=True)
    results["load_before"] = load_before
    results["facts"] = common.machine_facts()
    results["quick"] = quick
    return results


NOTES = """\
What the memory work changed, and what remains (measured by hand on this machine, 2026-12-01, ONNX
Runtime 1.31.1, the same stage script in fresh processes; before = main before the change):

| Default model (135M), bench-compare's workload (prefill 128/512/2048 ×2, decode at 100/1000) | before | after |
|---|---|---|
| Peak RSS, plain malloc (varies with heap fragmentation) | 524 MiB | 356–385 MiB |
| Peak RSS, with the huge-page tunable (how bench workers and the built app run) | 529 MiB | 351 MiB |
| The same after merging main at 15:15 UTC (conv-size's `prefold`, perf-decode's kernel forms); main alone: 501 MiB | | 386 MiB |

| Change | Peak RSS saved (135M) | Why |
|---|---|---|
| CPU memory arena off (`providers.session_options`) | ~64 MiB | the arena keeps every chunk a prefill asked for, rounded up; decode allocates little per step |
| KV reserved once for the whole prompt (`Runner.forward`) | ~45 MiB at 2048 tokens | chunk-by-chunk growth doubled the buffer while the old one was held |
| Prefill chunks bounded by the attention scratch (`ATTENTION_SCRATCH_BYTES`, 24 MiB) | ~35 MiB at 2048 tokens | ORT's CPU GroupQueryAttention holds float32 scores heads × chunk × cache positions, about twice |
| Mapped weights given back after session creation (`engine/runtime/host/residency.py`) | 45 MiB resident after load (135M), 135 MiB (0.5B), 240 MiB (1.5B) | ORT maps the initializers it keeps (the embedding table the Gather reads); a step reads a few pages |
| ...and again after each prefill chunk (`residency.drop_mapped_pages`, via /proc/self/maps, ~1 ms) | 15 MiB at 2048 tokens (135M) | each row a prompt reads maps 64 KiB around it back in (the kernel's fault-around) |
| No `onnx` / converter import in the loader (`engine/onnx/graph_scan.py`) | 17 MiB before main's `prefold` (merged 15:15 UTC), which imports both again to form Amber graphs' weights at load | the loader read two facts from the graph with `onnx`; protobuf alone reads them |
| Fixed 1 MiB mmap threshold with the huge-page tunable (`hugepages.TUNABLE`) | 43 MiB | glibc's moving threshold let 1–2 MiB prefill blocks fill a heap held in 2 MiB pages |
| `malloc_trim` once the session is made (`host.malloc.trim_heap`) | small at 135M; 66 MiB at 0.5B, 760 MiB at 1.5B (steady state, plain malloc) | the graph optimiser's and prepacking's freed temporaries stayed in the heap |

Bigger shapes (random-weight Qwen2.5 shapes, Q4_K_M quantized by llama.cpp, converted by Amber),
plain malloc, same stage script (prefill 2048 at 0.5B, 512 at 1.5B; before = main):

| Model | session created, before → after | while generating, before → after | peak of the process, before → after |
|---|---|---|---|
| Qwen2.5-0.5B shape, Q4_K_M | 956 → 768 MiB | 1073 → 889 MiB | 1073 → 947 MiB (the load's own peak) |
| Qwen2.5-1.5B shape, Q4_K_M | 3040 → 1948 MiB | 3336 → 2125 MiB (after: a 512-token prompt; 2048 in the table above) | 3336 → 3037 MiB (the load's own peak) |

At 0.5B and 1.5B the process's peak is now the model load's (ORT's prepacking holds the
initializers and their packed copies at once), the converter's side of the memory work (weight forms,
load-time peak); while generating, the process holds much less.

Speed: main against this, interleaved fresh processes (4 pairs, load average 10–15 on 2 cores
while six engineers shared it): prefill of 512 tokens 0.95–1.04× pair by pair; decode pairs
scattered 0.7–1.7× (noise of that load; no ratio can be claimed). Load-independent: under one
page fault per decode step either way (after 512 / 2048 tokens: main 0.61 / 0.84, now 0.75 / 0.13).

Tried and not kept: a fixed 128–256 KiB mmap threshold without the huge-page tunable (−26 MiB,
but +160,000 page faults per 2048-token prefill at ~4.4 µs each on this VM); `malloc_trim` after
a prefill (nothing to give back once the arena is off); memory patterns off (no change).

What remains at 135M after the prompt (2048 tokens): ~57 MiB of interpreter and libraries,
~150 MiB of ONNX Runtime's session (the prepacked MatMulNBits weights: 4-bit data plus float
scales and block sums, larger than the file's 110 MiB), the KV (float32: 46 KiB a token, 94 MiB at
2048; llama.cpp's is float16 but sized for its whole n_ctx), and ~35 MiB of attention and
activation scratch. At the 0.5B and 1.5B Q4_K_M shapes the session dominates: 780 MiB and 2.7 GiB
of anonymous memory for 480 MiB / 1.1 GiB of initializers, the float forms ORT derives from the
converter's Q4_K/Q5_0/Q6_K weight forms (constant folding, prepacking); that is the converter's
weight forms' business, not the runtime's: a form that MatMulNBits takes as it is
would remove it.
"""  # noqa: E501 - markdown table rows


def section(res: dict[str, Any]) -> Section:
    body: list[str] = [
        f"A fresh process per model: imports, model load (CPU, {common.THREADS} threads), a prefill of "
        f"{res['prompt']} tokens with the KV reserved for it and the reply, {res['decode']} decoded tokens; "
        "resident memory after each stage from /proc/self/smaps_rollup (anonymous vs file-backed), and the "
        "process's peak (ru_maxrss). Workers run with the huge-page tunable the built app uses.", ""]
    for name, m in res["models"].items():
        if "error" in m:
            body += [f"**{name} could not run.** {m['error']}", ""]
            continue
        rows = [[s["stage"], f"{s['rss'] / 2**20:.0f}", f"{s['anon'] / 2**20:.0f}", f"{s['file'] / 2**20:.0f}"]
                for s in m["stages"]]
        rows.append(["**peak of the process**", f"**{m['peak_rss_bytes'] / 2**20:.0f}**", "", ""])
        body += [f"**{name}** (KV {m['kv_bytes'] / 2**20:.0f} MiB; prefill {m['prefill_tok_s']:.0f} tok/s, "
                 f"decode {m['decode_tok_s']:.1f} tok/s on a shared machine)", "",
                 table(["Stage", "RSS (MiB)", "anonymous", "file-backed"], rows), ""]
    body += [NOTES, common.facts_line(res["facts"], res.get("load_before"),
                                      "QUICK RUN (short prompt): validation only." if res.get("quick") else "")]
    return Section("memory", "Memory while generating", "\n".join(body), common.ORDER.get("memory", 22))


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv), indent=1, default=str))
