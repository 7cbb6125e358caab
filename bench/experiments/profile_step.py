"""`python -m bench.experiments.profile_step MODEL_DIR [--ctx 100] [--steps 48]`: where a decode step's time goes.

By hand, not part of `make bench`. Three views of the real path (engine.runtime.Runner over
a `KVCache`, engine.generation.Generator for the Python side):

* ONNX Runtime's own profiler (`enable_profiling`) over `--steps` decode steps at context `--ctx`:
  time per op type per step, nodes per step and per layer, what the optimizer fused (the optimized
  graph's op types, from `optimized_model_filepath`).
* The Python per-token path of `Generator.stream` (greedy and sampled): time in the ORT call, the
  sampler, the detokenizer and everything else, per token.
* With `--prefill N`: the same op table for one N-token prefill (chunked as the runner chunks it, or
  in `--chunk C`-token chunks), and per chunk: its depth (cache positions before it), its run time and
  the share of it in the attention op vs the rest (how a long prompt's attention grows with depth).
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import glob
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from engine.api import SamplingParams
from engine.generation import generate as gen_mod
from engine.generation.generate import Generator, collect
from engine import native
from engine.runtime.model import LoadedModel, load_model
from engine.runtime.native_ops import graph_is_native
from engine.runtime.providers import session_options
from engine.runtime.runner import Runner
from engine.text import detokenize, sampling


def _profiled_model(model: LoadedModel, threads: int, opt_path: Path | None, prefix: str) -> LoadedModel:
    """The same model with a session that profiles (and optionally dumps its optimized graph)."""
    so = session_options(threads)
    so.enable_profiling = True
    so.profile_file_prefix = prefix
    if graph_is_native(model.graph):
        native.register(so)   # the native form's GgufMatMul nodes need Amber's op library
    if opt_path is not None:
        so.optimized_model_filepath = str(opt_path)
        so.add_session_config_entry("session.optimized_model_external_initializers_file_name",
                                    opt_path.name + ".data")
        so.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")
    sess = ort.InferenceSession(str(model.graph), so, providers=["CPUExecutionProvider"])
    return dataclasses.replace(model, session=sess)


def _runs(events: list[dict[str, Any]]) -> list[tuple[int, int]]:
    return [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") == "Session" and e["name"] == "model_run"]


def op_table(profile: Path, last_runs: int) -> dict[str, Any]:
    """Per op type: µs per run and nodes per run, over the last `last_runs` runs of a profile file."""
    events = json.loads(profile.read_text())
    return _op_table_runs(events, _runs(events)[-last_runs:])


def profile_decode(model: LoadedModel, ctx: int, steps: int, threads: int, out_dir: Path,
                   prefill: int = 0, chunk: int = 0) -> dict[str, Any]:
    opt = out_dir / "optimized.onnx"
    pm = _profiled_model(model, threads, opt, str(out_dir / "ort_profile"))
    runner = Runner(pm)
    if chunk:   # --chunk: every prompt in chunks of this length instead of the runner's own
        runner.chunk_len = lambda cache, n: chunk     # type: ignore[method-assign]
    rng = np.random.default_rng(0)
    vocab = int(model.config.get("vocab_size") or 1000)
    res: dict[str, Any] = {}
    cache = runner.new_cache()
    cache.reserve(max(ctx, prefill) + steps + 8)
    ids = [int(t) for t in rng.integers(10, vocab - 10, max(ctx, 1))]
    # ORT runs per prompt: the runner's own chunk length (or --chunk)
    n_prefill_runs = -(-len(ids) // runner.chunk_len(cache, len(ids)))
    runner.forward(cache, ids)
    logits = None
    for _ in range(steps):
        logits = runner.forward(cache, [int(rng.integers(10, vocab - 10))])
    if prefill:
        c2 = runner.new_cache()
        c2.reserve(prefill + 8)
        p_runs = -(-prefill // runner.chunk_len(c2, prefill))
        res["prefill_chunks"] = p_runs
        runner.forward(c2, [int(t) for t in rng.integers(10, vocab - 10, prefill)])
    prof = Path(pm.session.end_profiling())
    assert logits is not None
    if prefill:
        events = json.loads(prof.read_text())
        runs = _runs(events)
        # decode: the `steps` runs after the context's prefill; prefill: the last p_runs runs
        res["decode"] = _op_table_runs(events, runs[n_prefill_runs:n_prefill_runs + steps])
        res["prefill"] = _op_table_runs(events, runs[-p_runs:], per_total=True)
        step = runner.chunk_len(c2, prefill)
        res["prefill_by_chunk"] = [{"depth": i * step, **_op_table_runs(events, [r])}
                                   for i, r in enumerate(runs[-p_runs:])]
    else:
        res["decode"] = op_table(prof, last_runs=steps)
    g = onnx.load(str(opt), load_external_data=False)
    events = json.loads(prof.read_text())
    runs = _runs(events)
    decode_runs = runs[n_prefill_runs:n_prefill_runs + steps] if prefill else runs[-steps:]
    res["matmul_forms"] = matmul_form_table(node_medians(events, decode_runs), g)
    res["optimized_ops"] = dict(collections.Counter(n.op_type for n in g.graph.node).most_common())
    res["optimized_nodes"] = len(g.graph.node)
    src = onnx.load(str(model.graph), load_external_data=False)
    res["source_ops"] = dict(collections.Counter(n.op_type for n in src.graph.node).most_common())
    res["layers"] = int(model.config.get("num_hidden_layers") or 0)
    prof.unlink()
    for f in glob.glob(str(out_dir / "optimized.onnx*")):
        os.unlink(f)
    return res


def _op_table_runs(events: list[dict[str, Any]], chosen: list[tuple[int, int]], per_total: bool = False
                   ) -> dict[str, Any]:
    per_op: dict[str, float] = collections.defaultdict(float)
    count: dict[str, int] = collections.defaultdict(int)
    spans = chosen
    for e in events:   # node events within the chosen runs
        if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time"):
            continue
        if not any(a <= e["ts"] <= b for a, b in spans):
            continue
        op = e.get("args", {}).get("op_name", "?")
        per_op[op] += e["dur"]
        count[op] += 1
    n = 1 if per_total else len(chosen)
    run_us = sum(b - a for a, b in chosen) / n
    return {"runs": len(chosen), "run_us": run_us,
            "ops": {k: {"us": v / n, "nodes": count[k] / n} for k, v in sorted(per_op.items(), key=lambda kv: -kv[1])}}


def node_medians(events: list[dict[str, Any]], chosen: list[tuple[int, int]]) -> dict[str, tuple[str, float]]:
    """Per node: (op type, median µs over the chosen runs). The median drops the runs in which the
    node was preempted, which a shared machine makes common."""
    durs: dict[str, list[float]] = collections.defaultdict(list)
    ops: dict[str, str] = {}
    for e in events:
        if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time"):
            continue
        if not any(a <= e["ts"] <= b for a, b in chosen):
            continue
        name = e["name"][:-len("_kernel_time")]
        durs[name].append(float(e["dur"]))
        ops[name] = e.get("args", {}).get("op_name", "?")
    return {k: (ops[k], float(np.median(v))) for k, v in durs.items()}


def matmul_form_table(medians: dict[str, tuple[str, float]], model: onnx.ModelProto) -> list[dict[str, Any]]:
    """MatMulNBits nodes of the optimized graph grouped by form (K, N, bits, block size, bytes of
    their constant inputs: levels, scales, zero points): nodes, µs per node (mean of the per-node
    medians), ms per step, and GB/s = bytes ÷ µs per node. Heaviest group first."""
    graph = model.graph
    sizes = {t.name: int(np.prod(t.dims, dtype=np.int64)) * onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
             for t in graph.initializer}
    groups: dict[tuple[int, int, Any, int, int], list[float]] = collections.defaultdict(list)
    for node in graph.node:
        if node.op_type not in ("MatMulNBits", "GgufMatMul") or node.name not in medians:
            continue
        a = {x.name: onnx.helper.get_attribute_value(x) for x in node.attribute}
        if node.op_type == "GgufMatMul":   # the native form: W is the GGUF's rows, "bits" the GGML type
            a = {"K": a["K"], "N": a["N"], "bits": f"ggml{a['ggml_type']}", "block_size": 0}
        nbytes = sum(sizes.get(i, 0) for i in node.input[1:] if i)
        groups[(a["K"], a["N"], a["bits"], a["block_size"], nbytes)].append(medians[node.name][1])
    rows = [{"K": k, "N": n, "bits": b, "block": blk, "bytes": nb, "nodes": len(v),
             "us_per_node": sum(v) / len(v), "ms_per_step": sum(v) / 1e3,
             "gb_s": nb / (sum(v) / len(v)) / 1e3 if sum(v) else 0.0}
            for (k, n, b, blk, nb), v in groups.items()]
    return sorted(rows, key=lambda r: -r["ms_per_step"])


class _Clock:
    """Accumulates wall time spent inside wrapped callables, by label."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = collections.defaultdict(float)
        self.calls: dict[str, int] = collections.defaultdict(int)

    def wrap(self, label: str, fn: Any) -> Any:
        def inner(*a: Any, **k: Any) -> Any:
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                self.spent[label] += time.perf_counter() - t
                self.calls[label] += 1
        return inner


def python_per_token(model: LoadedModel, ctx: int, tokens: int, sampled: bool) -> dict[str, Any]:
    """Time per generated token in Generator.stream, split into ORT run / sampler / detokenizer / rest."""
    g = Generator(model)
    clock = _Clock()
    run_orig = model.session.run_with_iobinding
    sample_orig = sampling.Sampler.sample
    push_orig = detokenize.IncrementalDecoder.push
    feed_orig = detokenize.StopStringMatcher.feed
    fwd_orig = g.runner.forward
    model.session.run_with_iobinding = clock.wrap("ort_run", run_orig)     # type: ignore[method-assign]
    g.runner.forward = clock.wrap("runner_forward", fwd_orig)             # type: ignore[method-assign]
    sampling.Sampler.sample = clock.wrap("sampler", sample_orig)          # type: ignore[method-assign]
    detokenize.IncrementalDecoder.push = clock.wrap("detokenize", push_orig)  # type: ignore[method-assign]
    detokenize.StopStringMatcher.feed = clock.wrap("stop_match", feed_orig)   # type: ignore[method-assign]
    try:
        vocab = int(model.config.get("vocab_size") or 1000)
        ids = [int(t) for t in np.random.default_rng(1).integers(10, vocab - 10, ctx)]
        params = (SamplingParams(max_new_tokens=tokens, temperature=0.7, top_k=50, top_p=0.9, seed=3,
                                 repetition_penalty=1.1)
                  if sampled else SamplingParams(max_new_tokens=tokens, greedy=True))
        # one untimed warm-up
        collect(g.stream(g.new_cache(), ids, SamplingParams(max_new_tokens=4, greedy=True)))
        for k in list(clock.spent):
            clock.spent[k] = 0.0
            clock.calls[k] = 0
        cache = g.new_cache()
        events = g.stream(cache, ids, params)
        t_first = None
        n = 0
        for ev in events:
            if isinstance(ev, gen_mod.GenerationResult):
                res = ev
            elif isinstance(ev, gen_mod.TextChunk) and t_first is None:
                t_first = time.perf_counter()
                base = dict(clock.spent)
        t_end = time.perf_counter()
        n = len(res.token_ids) - 1
    finally:
        model.session.run_with_iobinding = run_orig                       # type: ignore[method-assign]
        sampling.Sampler.sample = sample_orig                             # type: ignore[method-assign]
        detokenize.IncrementalDecoder.push = push_orig                    # type: ignore[method-assign]
        detokenize.StopStringMatcher.feed = feed_orig                     # type: ignore[method-assign]
    assert t_first is not None and n > 0
    wall = (t_end - t_first) / n
    spent = {k: (clock.spent[k] - base.get(k, 0.0)) / n for k in clock.spent}
    fwd_py = spent.get("runner_forward", 0.0) - spent.get("ort_run", 0.0)
    rest = wall - spent.get("runner_forward", 0.0) - spent.get("sampler", 0.0) - spent.get("detokenize", 0.0) \
        - spent.get("stop_match", 0.0)
    return {"tokens": n, "wall_ms": wall * 1e3, "ort_run_ms": spent.get("ort_run", 0.0) * 1e3,
            "runner_python_ms": fwd_py * 1e3, "sampler_ms": spent.get("sampler", 0.0) * 1e3,
            "detokenize_ms": (spent.get("detokenize", 0.0) + spent.get("stop_match", 0.0)) * 1e3,
            "loop_rest_ms": rest * 1e3, "tok_s": 1.0 / wall}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.experiments.profile_step")
    ap.add_argument("model_dir")
    ap.add_argument("--ctx", type=int, default=100)
    ap.add_argument("--steps", type=int, default=48)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prefill", type=int, default=0)
    ap.add_argument("--chunk", type=int, default=0, help="prompt chunk length (default: the runner's)")
    ap.add_argument("--no-ort", action="store_true")
    ap.add_argument("--no-python", action="store_true")
    ap.add_argument("--json", help="write the results here too")
    a = ap.parse_args(argv)
    model = load_model(a.model_dir, provider="cpu", threads=a.threads)
    out: dict[str, Any] = {"model": a.model_dir, "ctx": a.ctx, "load_avg": os.getloadavg()[0]}
    if not a.no_ort:
        with tempfile.TemporaryDirectory() as tmp:
            out["ort"] = profile_decode(model, a.ctx, a.steps, a.threads, Path(tmp), prefill=a.prefill, chunk=a.chunk)
        d = out["ort"]["decode"]
        layers = out["ort"]["layers"] or 1
        print(f"decode step at ctx {a.ctx}: {d['run_us'] / 1e3:.3f} ms "
              f"({sum(v['nodes'] for v in d['ops'].values()):.0f} nodes, "
              f"{sum(v['nodes'] for v in d['ops'].values()) / layers:.1f} per layer)")
        total = sum(v["us"] for v in d["ops"].values())
        for op, v in d["ops"].items():
            print(f"  {op:34s} {v['us'] / 1e3:8.3f} ms  {100 * v['us'] / total:5.1f} %  {v['nodes']:5.0f} nodes")
        if "prefill" in out["ort"]:
            p = out["ort"]["prefill"]
            total = sum(v["us"] for v in p["ops"].values())
            print(f"prefill {a.prefill}: {p['run_us'] / 1e3:.1f} ms ({out['ort']['prefill_chunks']} chunks)")
            for op, v in p["ops"].items():
                print(f"  {op:34s} {v['us'] / 1e3:9.1f} ms  {100 * v['us'] / total:5.1f} %")
            print("prefill by chunk: depth, run ms, attention op ms and share of the ops' time:")
            for c in out["ort"]["prefill_by_chunk"]:
                ops_us = sum(v["us"] for v in c["ops"].values()) or 1.0
                att = sum(v["us"] for k, v in c["ops"].items() if "Attention" in k)
                print(f"  depth {c['depth']:6d}: {c['run_us'] / 1e3:8.1f} ms  attention {att / 1e3:8.1f} ms "
                      f"{100 * att / ops_us:5.1f} %")
        print("MatMulNBits by form (median per node over the steps):")
        for r in out["ort"]["matmul_forms"]:
            print(f"  K {r['K']:6d} N {r['N']:7d} {r['bits']}-bit/{r['block']:<3d} {r['bytes'] / 1e6:7.2f} MB  "
                  f"{r['nodes']:4d} nodes  {r['us_per_node']:8.1f} us/node  {r['ms_per_step']:7.3f} ms/step  "
                  f"{r['gb_s']:5.1f} GB/s")
        print("optimized graph:", out["ort"]["optimized_ops"])
    if not a.no_python:
        for sampled in (False, True):
            r = python_per_token(model, a.ctx, a.steps, sampled)
            out["python_" + ("sampled" if sampled else "greedy")] = r
            print(("sampled" if sampled else "greedy "), {k: round(v, 4) if isinstance(v, float) else v
                                                          for k, v in r.items()})
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
