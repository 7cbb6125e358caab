"""`python -m bench convert [--shapes tiny,0.5b,1.5b]`: the GGUF importer on models of real shapes.

Random-weight qwen2 models at real shapes (Qwen2.5-0.5B-like, 1.5B-like; `tiny` for `make bench`)
are written as F16 GGUFs, quantized Q4_K_M by llama.cpp's own quantizer
(`llama_cpp.llama_model_quantize` in the side venv, `python -m bench deps`), and written as
Q4_0 / Q8_0 directly with the gguf package's quantizers. Each is converted in a fresh process
(its peak RSS read with wait4), then loaded and run with ONNX Runtime: conversion time, peak RSS,
size ratio (total and by tensor type), load time, prefill and decode tokens/s.
The GGUFs live in a temporary folder (never in git).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness import common
from bench.harness.common import Section, table

SHAPES: dict[str, dict[str, int]] = {
    "tiny": dict(n_embd=512, n_layers=4, n_head=8, n_kv=2, head_dim=64, n_ff=1536, vocab=16384),
    "0.5b": dict(n_embd=896, n_layers=24, n_head=14, n_kv=2, head_dim=64, n_ff=4864, vocab=151936),   # Qwen2.5-0.5B
    "1.5b": dict(n_embd=1536, n_layers=28, n_head=12, n_kv=2, head_dim=128, n_ff=8960, vocab=151936),  # Qwen2.5-1.5B
    # Llama-3.2-1B: arch llama (no q/k/v biases), tied embeddings; its llama3 rope scaling is left out
    # (a per-frequency factor: no cost difference). `llama=1` selects the arch (SHAPES stays int-valued).
    "1b": dict(n_embd=2048, n_layers=16, n_head=32, n_kv=8, head_dim=64, n_ff=8192, vocab=128256, llama=1),
    # Llama-3.1-8B's layers; tied embeddings like the others (the real model has a separate output
    # matrix: ~0.4 GB more at Q6_K), so its Q4_K_M is ~4.6 GB instead of 4.9.
    "8b": dict(n_embd=4096, n_layers=32, n_head=32, n_kv=8, head_dim=128, n_ff=14336, vocab=128256, llama=1),
}
QUANTS = ("Q4_K_M", "Q4_0", "Q8_0")
LLAMA_FTYPE_Q4_K_M = 15


# ---- model files ----------------------------------------------------------------------------------
def _tensors(shape: dict[str, int]) -> list[tuple[str, tuple[int, ...]]]:
    """(name, numpy shape) of a tied qwen2 model's tensors, in llama.cpp's order."""
    d, f, hd = shape["n_embd"], shape["n_ff"], shape["head_dim"]
    q, kv = shape["n_head"] * hd, shape["n_kv"] * hd
    out: list[tuple[str, tuple[int, ...]]] = [("token_embd.weight", (shape["vocab"], d))]
    for i in range(shape["n_layers"]):
        b = f"blk.{i}"
        out += [(f"{b}.attn_norm.weight", (d,)), (f"{b}.attn_q.weight", (q, d)), (f"{b}.attn_q.bias", (q,)),
                (f"{b}.attn_k.weight", (kv, d)), (f"{b}.attn_k.bias", (kv,)), (f"{b}.attn_v.weight", (kv, d)),
                (f"{b}.attn_v.bias", (kv,)), (f"{b}.attn_output.weight", (d, q)), (f"{b}.ffn_norm.weight", (d,)),
                (f"{b}.ffn_gate.weight", (f, d)), (f"{b}.ffn_up.weight", (f, d)), (f"{b}.ffn_down.weight", (d, f))]
    out.append(("output_norm.weight", (d,)))
    if shape.get("llama"):     # llama: no q/k/v biases
        out = [t for t in out if not t[0].endswith(".bias")]
    return out


def write_gguf(path: Path, shape: dict[str, int], wtype: str, seed: int = 0) -> None:
    """Streams a random-weight qwen2 GGUF to `path`: matrices as F16, Q4_0 or Q8_0, vectors F32."""
    import gguf
    import numpy as np
    from gguf import GGMLQuantizationType as GgmlType
    from gguf import quants
    rng = np.random.default_rng(seed)
    n_vocab = shape["vocab"]
    alphabet = [chr(c) for c in range(33, 127)] + [chr(c) for c in range(161, 173)] + [chr(c) for c in range(174, 256)]
    alphabet += [chr(256 + i) for i in range(256 - len(alphabet))]
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tokens = alphabet + [f"t{i}" for i in range(n_vocab - len(alphabet) - len(specials))] + specials
    a = "llama" if shape.get("llama") else "qwen2"
    w = gguf.GGUFWriter(str(path), a)
    w.add_name(f"bench-{a}-{shape['n_embd']}")
    w.add_uint32(f"{a}.block_count", shape["n_layers"])
    w.add_uint32(f"{a}.context_length", 4096)
    w.add_uint32(f"{a}.embedding_length", shape["n_embd"])
    w.add_uint32(f"{a}.feed_forward_length", shape["n_ff"])
    w.add_uint32(f"{a}.attention.head_count", shape["n_head"])
    w.add_uint32(f"{a}.attention.head_count_kv", shape["n_kv"])
    w.add_float32(f"{a}.rope.freq_base", 500000.0 if shape.get("llama") else 1000000.0)
    if shape.get("llama"):
        w.add_uint32(f"{a}.rope.dimension_count", shape["head_dim"])
    w.add_float32(f"{a}.attention.layer_norm_rms_epsilon", 1e-6)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("llama-bpe" if shape.get("llama") else "qwen2")
    w.add_token_list(tokens)
    w.add_token_types([3 if t in specials else 1 for t in tokens])
    # A few real merges ("t" + "0" -> "t0"): llama.cpp refuses a BPE vocabulary without any.
    w.add_token_merges([f"t {i}" for i in range(10)])
    w.add_bos_token_id(tokens.index("<|im_start|>"))
    w.add_eos_token_id(tokens.index("<|im_end|>"))
    qt = {"F16": GgmlType.F16, "Q4_0": GgmlType.Q4_0, "Q8_0": GgmlType.Q8_0}[wtype]
    plan = []
    for name, shp in _tensors(shape):
        if len(shp) == 1:
            plan.append((name, shp, GgmlType.F32))
        else:
            plan.append((name, shp, qt))
    for name, shp, t in plan:
        traits = gguf.GGML_QUANT_SIZES[t]
        nbytes = int(np.prod(shp)) // traits[0] * traits[1]
        if t in (GgmlType.F32, GgmlType.F16):
            w.add_tensor_info(name, shp, np.dtype(np.float32 if t == GgmlType.F32 else np.float16), nbytes)
        else:   # quantized: the writer takes the byte shape
            w.add_tensor_info(name, (shp[0], shp[1] // traits[0] * traits[1]), np.dtype(np.uint8), nbytes,
                              raw_dtype=t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for _name, shp, t in plan:
        if t == GgmlType.F32:
            data = (1.0 + 0.1 * rng.standard_normal(shp)).astype(np.float32)
        else:
            x = (rng.standard_normal(shp, dtype=np.float32) * (1.0 / np.sqrt(shp[1]))).astype(np.float32)
            data = x.astype(np.float16) if t == GgmlType.F16 else quants.quantize(x, t)
        w.write_tensor_data(data)
        del data
    w.close()


def write_gguf_worker(path: str, shape: str, wtype: str) -> dict[str, Any]:
    """Worker: write_gguf in its own process, so the bench's process stays small. (A child's
    ru_maxrss starts from its parent's RSS at fork, so a big parent would inflate every figure.)"""
    write_gguf(Path(path), SHAPES[shape], wtype)
    return {"bytes": Path(path).stat().st_size}


def quantize_llama_cpp(src: str, dst: str, ftype: int = LLAMA_FTYPE_Q4_K_M) -> dict[str, Any]:
    """Worker (side venv): llama.cpp's quantizer, as `llama-quantize` runs it."""
    import llama_cpp
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.nthread = common.THREADS
    start = time.perf_counter()
    rc = llama_cpp.llama_model_quantize(src.encode(), dst.encode(), params)
    return {"rc": int(rc), "seconds": time.perf_counter() - start}


def _gguf_types(path: Path) -> dict[str, int]:
    from gguf import GGUFReader
    out: dict[str, int] = {}
    for t in GGUFReader(path, "r").tensors:
        if len(t.shape) == 2:
            out[t.tensor_type.name] = out.get(t.tensor_type.name, 0) + 1
    return out


# ---- workers (fresh processes) --------------------------------------------------------------------
def convert_worker(src: str, dest: str, exact: bool, gpu_variant: bool, kernels: str = "auto") -> dict[str, Any]:
    from engine.convert import EXACT, FAST, convert_gguf
    start = time.perf_counter()
    out = convert_gguf(src, dest, accuracy_level=EXACT if exact else FAST, gpu_variant=gpu_variant,
                       kernels=kernels)
    seconds = time.perf_counter() - start
    meta = json.loads((Path(out) / "amber_import.json").read_text())
    return {"seconds": seconds, "sizes": meta.get("sizes")}


def run_worker_model(folder: str, prompt_len: int, decode: int) -> dict[str, Any]:
    """Load time, prefill and decode tokens/s of a converted folder: its CPU session made as Amber
    makes it (engine.runtime.providers: the weight preparation formed in numpy, prefold.py)."""
    import numpy as np

    from engine.runtime.providers import create_session
    cfg = json.loads((Path(folder) / "config.json").read_text())
    import resource
    start = time.perf_counter()
    sess = create_session(str(Path(folder) / "model.onnx"), "cpu", common.THREADS).session
    load = time.perf_counter() - start
    load_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024     # this fresh process's peak so far
    n_layers, kv, hd = cfg["num_hidden_layers"], cfg["num_key_value_heads"], cfg["head_dim"]
    kv_dtype = np.float16 if sess.get_inputs()[-1].type == "tensor(float16)" else np.float32  # ai.amber.Attention
    past = {f"past_key_values.{i}.{k}": np.zeros((1, kv, 0, hd), kv_dtype)
            for i in range(n_layers) for k in ("key", "value")}
    names = ["logits"] + [n.replace("past_key_values", "present") for n in past]
    ids = np.random.default_rng(0).integers(300, cfg["vocab_size"] - 10, prompt_len)

    def step(tok: np.ndarray, past: dict[str, np.ndarray]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        n_past = past["past_key_values.0.key"].shape[2]
        feed = {"input_ids": tok.reshape(1, -1).astype(np.int64),
                "attention_mask": np.ones((1, n_past + tok.size), np.int64),
                "position_ids": np.arange(n_past, n_past + tok.size, dtype=np.int64)[None], **past}
        outs = sess.run(names, feed)
        return outs[0], dict(zip(past, outs[1:], strict=False))
    step(ids[:8], past)                                   # warm-up
    t0 = time.perf_counter()
    logits, cache = step(ids, past)
    prefill = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(decode):
        logits, cache = step(np.array([int(logits[0, -1].argmax())]), cache)
    dec = time.perf_counter() - t0
    return {"load_s": load, "load_rss": load_rss, "prefill_tok_s": prompt_len / prefill, "decode_tok_s": decode / dec}


def _child(func: str, args: dict[str, Any], pythonpath: Path, python: str | None = None,
           timeout: float = 3600) -> tuple[dict[str, Any], int]:
    """Runs bench.suites.convert.func(**args) with `pythonpath` first; its result and peak RSS (bytes)."""
    code = ("import json,sys; from bench.harness.common import _worker_main; "
            f"_worker_main('bench.suites.convert', {func!r}, json.loads(sys.argv[1]))")
    env = dict(os.environ, PYTHONPATH=f"{pythonpath}{os.pathsep}{common.REPO}", PYTHONUNBUFFERED="1")
    with tempfile.TemporaryFile(mode="w+") as out:
        # cwd = the checkout measured: `python -c` puts the working folder first on sys.path.
        proc = subprocess.Popen([python or sys.executable, "-c", code, json.dumps(args)], cwd=pythonpath,
                                stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        except BaseException:
            proc.kill()
            raise
        out.seek(0)
        log = out.read()
    rc = os.waitstatus_to_exitcode(status)
    results = [json.loads(x[len(common.RESULT_MARK):]) for x in log.splitlines() if x.startswith(common.RESULT_MARK)]
    if rc != 0 or not results:
        raise RuntimeError(f"{func} failed (exit {rc}):\n{log[-2000:]}")
    return results[-1], usage.ru_maxrss * 1024


# ---- the bench ------------------------------------------------------------------------------------
def run(quick: bool = False, shapes: list[str] | None = None, baseline: str | None = None,
        quants: tuple[str, ...] = QUANTS, gpu_variant: bool = True, save: str | None = None) -> dict[str, Any]:
    """Figures per (shape, quantization); `baseline`: a checkout whose converter is measured too."""
    shapes = shapes or ["tiny"]
    side = common.side_python()
    root = Path(tempfile.mkdtemp(prefix="amber-bench-convert-"))
    rows: list[dict[str, Any]] = []
    try:
        for shape_name in shapes:
            f16 = root / f"{shape_name}-F16.gguf"
            for q in quants:
                src = root / f"{shape_name}-{q}.gguf"
                if q == "Q4_K_M":
                    if side is None:
                        print("convert: Q4_K_M skipped (no side venv: python -m bench deps)", flush=True)
                        continue
                    if not f16.exists():
                        _child("write_gguf_worker", {"path": str(f16), "shape": shape_name, "wtype": "F16"},
                               common.REPO)
                    res, _ = _child("quantize_llama_cpp", {"src": str(f16), "dst": str(src)}, common.REPO, python=side)
                    if res["rc"] != 0:
                        print(f"convert: llama.cpp quantize failed ({res['rc']})", flush=True)
                        continue
                else:
                    _child("write_gguf_worker", {"path": str(src), "shape": shape_name, "wtype": q}, common.REPO)
                gguf_bytes = src.stat().st_size
                row: dict[str, Any] = {"shape": shape_name, "quant": q, "gguf_bytes": gguf_bytes,
                                       "types": _gguf_types(src)}
                for label, path in (("before", baseline), ("after", str(common.REPO))):
                    if path is None:
                        continue
                    dest = root / f"{shape_name}-{q}-{label}"
                    res, rss = _child("convert_worker", {"src": str(src), "dest": str(dest), "exact": False,
                                                          "gpu_variant": gpu_variant}, Path(path))
                    data = sum(p.stat().st_size for p in dest.iterdir() if p.name.startswith("model.onnx"))
                    row[label] = {"seconds": res["seconds"], "rss": rss, "onnx_bytes": data, "sizes": res["sizes"]}
                    # Load and run (with this checkout's runner) the folder each converter wrote.
                    perf, run_rss = _child("run_worker_model", {"folder": str(dest), "prompt_len": 64 if quick else 128,
                                                                "decode": 8 if quick else 32}, common.REPO)
                    row[label].update(perf, run_rss=run_rss)
                    print(f"convert: {shape_name} {q} {label}: {json.dumps(row[label], default=str)}", flush=True)
                    shutil.rmtree(dest, ignore_errors=True)
                rows.append(row)
                if save:      # partial results survive a failure later on
                    Path(save).write_text(json.dumps({"rows": rows}, indent=1, default=str))
                src.unlink(missing_ok=True)
            f16.unlink(missing_ok=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {"rows": rows, "facts": common.machine_facts()}


HEADERS = ["shape", "GGUF", "", "GGUF size", "ONNX data", "ratio", "convert", "convert peak RSS",
           "load peak RSS", "run peak RSS", "load", "prefill tok/s", "decode tok/s"]


def _kept_before_rows(path: Path = common.BENCHMARKS_MD) -> dict[tuple[str, str], list[str]]:
    """The *before* rows of the section as written (the old converter, measured once with
    --baseline): kept when a run measures only this converter. Older tables lack the load-peak
    column: it is left empty there."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return {}
    start, end = text.find("<!-- bench:convert:start -->"), text.find("<!-- bench:convert:end -->")
    if start < 0 or end < start:
        return {}
    kept = {}
    for line in text[start:end].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 12 and cells[2] == "before":
            if len(cells) == 12:
                cells.insert(8, "")
            kept[(cells[0], cells[1])] = cells[:len(HEADERS)]
    return kept


def section(res: dict[str, Any], kept: dict[tuple[str, str], list[str]] | None = None) -> Section:
    def mib(b):
        return (f"{b / 2**20:.0f} MiB")
    kept = _kept_before_rows() if kept is None else kept
    lines = ["Random-weight qwen2 models at real shapes (`bench/suites/convert.py`), converted in a fresh process "
             "in the default (fast) mode with the GPU variant; peak RSS of that process (wait4); then loaded and run "
             "in a fresh process (its CPU session made as Amber makes it, `engine.runtime.providers`; a 128-token "
             "prefill, 32 decoded tokens): its peak RSS once the session is made (*load peak*) and at the end "
             "(*run peak*). Q4_K_M by llama.cpp's quantizer, Q4_0/Q8_0 by the gguf package's. *before*: the converter "
             "before streaming and the compact forms (measured once, kept), *after*: this one.", ""]
    rows = []
    for r in res["rows"]:
        if not r.get("before") and (r["shape"], r["quant"]) in kept:
            rows.append(kept[(r["shape"], r["quant"])])
        for label in ("before", "after"):
            x = r.get(label)
            if not x:
                continue
            rows.append([r["shape"], r["quant"], label, mib(r["gguf_bytes"]), mib(x["onnx_bytes"]),
                         f"{x['onnx_bytes'] / r['gguf_bytes']:.3f}", f"{x['seconds']:.0f} s", mib(x["rss"]),
                         mib(x["load_rss"]) if "load_rss" in x else "",
                         mib(x["run_rss"]) if "run_rss" in x else "",
                         f"{x['load_s']:.1f} s" if "load_s" in x else "",
                         f"{x['prefill_tok_s']:.0f}" if "load_s" in x else "",
                         f"{x['decode_tok_s']:.1f}" if "load_s" in x else ""])
    lines.append(table(HEADERS, rows))
    lines.append("")
    for r in res["rows"]:
        sizes = (r.get("after") or {}).get("sizes") or {}
        if not sizes:
            continue
        types = r.get("types", {})
        parts = [f"{k} {v['onnx'] / max(v['gguf'], 1):.3f}×" + (f" ({types[k]} tensors)" if types.get(k) else "")
                 for k, v in sorted(sizes.items()) if v["gguf"] and k != "other"]
        lines.append(f"- {r['shape']} {r['quant']} size by type (ONNX / GGUF): " + ", ".join(parts))
    lines += NOTES
    lines += ["", common.facts_line(res["facts"]) + " Speeds were measured on a shared, loaded machine; "
              "sizes and peak RSS do not depend on load."]
    return Section("convert", "GGUF import: conversion memory, size and speed", "\n".join(lines), 45)


NOTES = [
    "- The file holds the GGUF's information only, in both modes: levels of more than 4 bits (Q5_0/Q5_1/Q5_K/"
    "Q6_K) are a 4-bit low plane and a (bits-4)-bit high plane, the GGUF's own bits rearranged; scales stay "
    "the GGUF's float16 numbers and 6-/8-bit factors (Q4_K/Q5_K keep each 6-bit scale and min as a byte: "
    "4.625 bits per weight against 4.5, hence 1.028×). What the kernels take is formed at load: the fast "
    "mode's 8-bit plane (lo | hi << 4, shifted to zero point 128), the exact mode's 4-bit high plane, the "
    "integer zero points, the float32 scales and zero-point corrections.",
    "- At load (`engine/runtime/prefold.py`) those values are formed in numpy one tensor at a time, written "
    "to an unlinked temporary file in Amber's folder and handed to ONNX Runtime as views of its memory map "
    "(`add_external_initializers`); the map's pages are released while ONNX Runtime re-packs the weights. "
    "ONNX Runtime's own constant folding kept every intermediate until its pass ended (3.0 GiB at 1.5B; "
    "it still runs the same graph, e.g. without Amber). The logits are bit-identical to ONNX Runtime folding "
    "the same graph (tests/engine/convert/test_prefold.py) and to the previous converter's fast mode (0.5B Q4_K_M), "
    "so the fast mode's accuracy is unchanged.",
    "- The lm_head (151936 rows) runs as MatMulNBits pieces of at most 32M weights: ONNX Runtime holds a "
    "weight's copies at once while re-packing it (+280 MiB at 1.5B as one piece).",
    "- The run peak exceeds the load peak mainly by the float32 zero-point corrections of the Q4_K matrices "
    "(read at every step from the map's pages: ~140 MiB at 1.5B, counted as file-backed RSS).",
    "- Cost: load time. Forming the values in numpy and handing them over takes longer than ONNX Runtime's "
    "own folding of the previous (bigger) files. Interleaved fresh processes, 0.5B Q4_K_M, this converter "
    "and loader against the previous converter's folder loaded by ONNX Runtime directly, 4 rounds at load "
    "average ~13 (2026-12-01): load 4.6-7.3 s against 1.7-2.2 s (numpy ~2.7 s of it); decode 9.2, 9.1, "
    "7.4, 9.5 against 9.6, 9.0, 7.7, 9.7 tok/s: the same kernels on the same values (the logits are "
    "bit-identical). The speed columns above were taken at load average ~13.8 with other jobs on the 2 "
    "cores and are not comparable with the *before* rows.",
]


def main(argv: list[str] | None = None) -> int:
    import argparse
    p = argparse.ArgumentParser(prog="python -m bench.suites.convert")
    p.add_argument("--shapes", default="tiny", help=f"comma-separated: {', '.join(SHAPES)}")
    p.add_argument("--quants", default=",".join(QUANTS))
    p.add_argument("--baseline", help="a checkout whose (older) converter is measured too")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--no-gpu-variant", action="store_true")
    p.add_argument("--write", action="store_true", help="write the section of docs/BENCHMARKS.md")
    p.add_argument("--json", help="also save the raw results here")
    a = p.parse_args(argv)
    res = run(a.quick, a.shapes.split(","), a.baseline, tuple(a.quants.split(",")), not a.no_gpu_variant, a.json)
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1, default=str))
    s = section(res)
    print(s.render())
    if a.write:
        common.write_section(s)
    return 0


if __name__ == "__main__":
    sys.exit(main())


# ---- accuracy of the fast mode on the default model -----------------------------------------------
def _teacher_forced_logits(folder: Path, ids: list[int]) -> Any:
    """Logits at every position of `ids`, one token at a time through the KV cache."""
    import numpy as np
    import onnxruntime as ort
    cfg = json.loads((folder / "config.json").read_text())
    so = ort.SessionOptions()
    so.intra_op_num_threads = common.THREADS
    so.log_severity_level = 3
    sess = ort.InferenceSession(str(folder / "model.onnx"), so, providers=["CPUExecutionProvider"])
    kv, hd = cfg["num_key_value_heads"], cfg["head_dim"]
    kv_dtype = np.float16 if sess.get_inputs()[-1].type == "tensor(float16)" else np.float32  # ai.amber.Attention
    past = {f"past_key_values.{i}.{k}": np.zeros((1, kv, 0, hd), kv_dtype)
            for i in range(cfg["num_hidden_layers"]) for k in ("key", "value")}
    names = ["logits"] + [n.replace("past_key_values", "present") for n in past]
    rows = []
    for t, tok in enumerate(ids):
        outs = sess.run(names, {"input_ids": np.array([[tok]], np.int64),
                                "attention_mask": np.ones((1, t + 1), np.int64),
                                "position_ids": np.array([[t]], np.int64), **past})
        rows.append(outs[0][0, -1].astype(np.float64))
        past = dict(zip(past, outs[1:], strict=False))
    return np.stack(rows)


def kl_worker(gguf: str, root: str, n_tokens: int = 48) -> dict[str, Any]:
    """Mean KL(exact || fast) over teacher-forced positions of a few texts, for the converter on the
    path (converted both ways from the default model's GGUF)."""
    import numpy as np
    from tokenizers import Tokenizer

    from engine.convert import EXACT, FAST, convert_gguf
    out: dict[str, Any] = {}
    folders = {}
    for name, level in (("exact", EXACT), ("fast", FAST)):
        dest = Path(root) / name
        shutil.rmtree(dest, ignore_errors=True)
        folders[name] = convert_gguf(gguf, dest, accuracy_level=level, gpu_variant=False)
    tok = Tokenizer.from_file(str(folders["exact"] / "tokenizer.json"))
    kls = []
    for seed in range(4):
        ids = tok.encode(common.pseudo_text(60, seed)).ids[:n_tokens]
        a = _teacher_forced_logits(folders["exact"], ids)
        b = _teacher_forced_logits(folders["fast"], ids)
        pa = np.exp(a - a.max(-1, keepdims=True))
        pa /= pa.sum(-1, keepdims=True)
        lb = b - b.max(-1, keepdims=True)
        lb -= np.log(np.exp(lb).sum(-1, keepdims=True))
        la = np.log(pa)
        kls.extend((pa * (la - lb)).sum(-1).tolist())
        out.setdefault("exact_logits_sample", a[:2, :5].tolist())
    out["mean_kl_fast_vs_exact"] = float(np.mean(kls))
    out["positions"] = len(kls)
    return out
