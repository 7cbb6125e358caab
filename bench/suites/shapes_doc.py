"""The markdown of the real-size comparison section (bench.suites.shapes' results → docs/BENCHMARKS.md)."""
from __future__ import annotations

from typing import Any

from bench.harness import common
from bench.harness.common import ok, table
from bench.harness.shapes_spec import AMBER_NOSPIN, N_CTX, SECOND, TARGETS

MIB = 2**20


def _ratio_cell(m: dict[str, Any], key: str, target: tuple[str, float] | None, which: str = "ratios") -> str:
    v = m.get(which, {}).get(key)
    if v is None:
        return "—"
    if target is None:
        return f"{v:.2f}×"
    op, t = target
    return f"{v:.2f}× {ok(v >= t if op == '>=' else v <= t)}"


def summary_table(models: list[dict[str, Any]], targets: dict[str, float], which: str = "ratios",
                  amber: str = "Amber") -> str:
    rows = []
    for m in models:
        if which != "ratios" and which not in m:
            continue
        name = f"{m['label']}, {m['quant']}" + (f" ({m['date'][11:16]})" if m.get("date") else "")
        if "failed" in m or "ratios" not in m:
            why = m.get("failed") or "; ".join(f"{k}: {v.strip().splitlines()[-1][:200]}"
                                               for k, v in m.get("errors", {}).items())
            rows.append([name, f"could not run: {why[:300]}"] + [""] * 7)
            continue
        share = m.get("bw_share", {})
        rows.append([
            name,
            _ratio_cell(m, "prefill_512", None, which),
            _ratio_cell(m, "prefill_2048", (">=", targets["prefill_2048"]), which),
            _ratio_cell(m, "decode_100", (">=", targets["decode"]), which),
            _ratio_cell(m, "decode_1000", (">=", targets["decode"]), which),
            _ratio_cell(m, "rss", ("<=", targets["rss"]), which),
            _ratio_cell(m, "load", None, which),
            f"{share[amber]:.0%} {ok(share[amber] >= targets['bw_share'])}" if amber in share else "—",
            f"{share['llama.cpp']:.0%}" if "llama.cpp" in share else "—",
        ])
    return table(["model", "prefill 512", "prefill 2048", "decode ctx 100", "decode ctx 1000", "peak RSS",
                  "load time", "BW share Amber", "BW share llama.cpp"], rows)


def _plain_ratios(models: list[dict[str, Any]], which: str) -> str:
    """One row of ratios per model, no targets (a comparison of two Amber forms)."""
    keys = ["prefill_512", "prefill_2048", "decode_100", "decode_1000", "rss", "load"]
    rows = [[f"{m['label']}, {m['quant']}"] + [_ratio_cell(m, k, None, which) for k in keys]
            for m in models if which in m]
    return table(["model", "prefill 512", "prefill 2048", "decode ctx 100", "decode ctx 1000", "peak RSS",
                  "load time"], rows)


def detail_table(m: dict[str, Any]) -> str:
    engines = m["engines"]
    names = list(engines)
    best = m.get("best", {})
    rows = []
    for n in engines[names[0]]["prefill"]:
        b = best.get("prefill", {}).get(n, {})
        rows.append([f"prefill {n} tok/s"] + [f"{engines[e]['prefill'][n]['tokens_per_s']:.1f}" for e in names]
                    + [b.get("config", "—").replace("llama.cpp ", ""),
                       f"{m['ratios']['prefill_' + n]:.2f}×" if "ratios" in m else "—"])
    for c in engines[names[0]]["decode"]:
        b = best.get("decode", {}).get(c, {})
        rows.append([f"decode tok/s at context {c}"] + [f"{engines[e]['decode'][c]['tokens_per_s']:.2f}" for e in names]
                    + [b.get("config", "—").replace("llama.cpp ", ""),
                       f"{m['ratios']['decode_' + c]:.2f}×" if "ratios" in m else "—"])
    b = best.get("peak_rss_bytes", {})
    rows.append(["peak RSS (MiB)"] + [f"{engines[e]['peak_rss_bytes'] / MIB:.0f}" for e in names]
                + [b.get("config", "—").replace("llama.cpp ", ""),
                   f"{m['ratios']['rss']:.2f}×" if "ratios" in m else "—"])
    rows.append(["RSS after load (MiB)"]
                + [f"{engines[e]['rss_after_load'] / MIB:.0f}" if engines[e].get("rss_after_load") else "—"
                   for e in names] + ["", ""])
    b = best.get("load_s", {})
    rows.append(["model load (s)"] + [f"{engines[e]['load_s']:.2f}" for e in names]
                + [b.get("config", "—").replace("llama.cpp ", ""),
                   f"{m['ratios']['load']:.2f}×" if "ratios" in m else "—"])
    return table(["figure"] + names + ["best llama.cpp", "Amber ÷ best"], rows)


def render(res: dict[str, Any]) -> str:
    models = res.get("models", [])
    facts = res.get("facts") or common.machine_facts()
    bw = res.get("bandwidth", {})
    bw_end = res.get("bandwidth_end", {})
    build = res.get("llama_build", {})
    sysinfo = next((e.get("system_info") for m in models for n, e in m.get("engines", {}).items()
                    if e.get("system_info")), None)
    version = next((e.get("version") for m in models for n, e in m.get("engines", {}).items()
                    if n != "Amber" and e.get("version")), None)
    intro = (
        "Written by `python -m bench compare --shapes 135m,0.5b,1b,1.5b` (`bench/suites/shapes.py`). The default "
        "SmolLM2-135M GGUF (Q4_1, real weights) and random-weight GGUFs of real shapes, written as F16 by "
        "`bench_convert.write_gguf` and quantized by llama.cpp's own quantizer (`llama_model_quantize`: Q4_K_M "
        "mixes Q4_K / Q5_0 / Q6_K / Q8_0 as downloaded models do); Amber converts each GGUF (fast mode, the "
        f"default). Same token ids (random ids), {res.get('threads', common.THREADS)} threads, greedy. Each "
        "configuration runs in fresh processes, interleaved (Amber, llama.cpp flash attention on, off, then again), "
        "runs pooled (medians); peak RSS is the largest of a configuration's processes (wait4). Both engines do the "
        "same work in a process: prefills of 512 and 2048 tokens, then decodes after contexts of 100 and 1000 "
        "tokens. Amber runs its engine path (`Runner.forward` with IOBinding, greedy `Sampler` as "
        f"`Generator.stream` uses it); llama.cpp `Llama.eval` with n_ctx {N_CTX}, n_batch 2048, n_ubatch 512, "
        "OMP_WAIT_POLICY=PASSIVE, and each figure takes the better of flash attention on / off (the detail tables "
        "say which won). PASSIVE because this VM is shared: with its OpenMP threads spinning (llama.cpp's "
        "default) llama.cpp ran 10–80× slower whenever other processes wanted the cores (see the notes below).")
    targets_line = (
        f"**Targets** (Amber ÷ llama.cpp's best): decode ≥ {TARGETS['decode']}× at contexts 100 and 1000, "
        f"prefill 2048 ≥ {TARGETS['prefill_2048']}×, peak RSS ≤ {TARGETS['rss']}×, decode bandwidth share ≥ "
        f"{TARGETS['bw_share']:.0%} (bytes of weights one decode step reads × tok/s at context 100 ÷ the measured "
        "memory bandwidth; Amber's bytes in the forms its kernels read, made at load). Speeds: Amber's tok/s ÷ "
        "llama.cpp's (higher is better for Amber); peak RSS and load "
        "time: Amber's bytes or seconds ÷ llama.cpp's (lower is better).")
    forms = sorted({str((m.get("kernels") or ["ort"])[0]) for m in models if "ratios" in m})
    scored = ("**Scored column:** \"Amber\" is the conversion "
              + " / ".join(f"`--amber-kernels {f}`" for f in forms)
              + (" (Amber's native kernels, what a new conversion gets on a CPU with the kernel library)"
                 if forms == ["native"] else ""))
    out = [intro, "", targets_line, "", scored + ".", "", summary_table(models, TARGETS), ""]
    met = [v for m in models for v in m.get("targets", {}).values()]
    if met:
        out += [f"Targets met: {sum(met)} of {len(met)}.", ""]
    if any("ratios_nospin" in m for m in models):
        out += ["**Experiment, not the engine's path:** Amber with ONNX Runtime's intra-op threads not spinning "
                "(`session.intra_op.allow_spinning = 0`, the counterpart of llama.cpp's OMP_WAIT_POLICY=PASSIVE), "
                "same ratios against the same llama.cpp figures:", "",
                summary_table(models, TARGETS, "ratios_nospin", AMBER_NOSPIN), ""]
    for form, (name, key, vs_key) in SECOND.items():
        if not any(key in m for m in models):
            continue
        other = "ORT form" if form == "native" else "native form"
        what = ("the GGUF's blocks read by Amber's `ai.amber.GgufMatMul` op instead of ONNX Runtime's MatMulNBits"
                if form == "native" else "ONNX Runtime's MatMulNBits over repacked weights, the form Amber falls "
                "back to without its kernel library or on a GPU")
        order = "ort,native" if form == "native" else "native,ort"
        out += [f"**{name}** (`--amber-kernels {order}`: {what}), the same ratios against the same llama.cpp "
                "figures:", "", summary_table(models, TARGETS, key, name), "",
                f"{name.removeprefix('Amber ')} ÷ {other}, same run (speeds: higher is better for the {form} form; "
                "RSS, load: lower):", "", _plain_ratios(models, vs_key), ""]
    out += ["- 4 sessions generating together, aggregate decode ÷ one session (target ≥ 2.5×): measured by "
            "`python -m bench batch` (bench/suites/batch.py), not this bench — see \"Concurrent chats\".",
            ""]
    if bw:
        out.append("- Memory bandwidth (numpy copy of 2 × 1 GiB, read + write bytes counted, best of 5): "
                   + ", ".join(f"{k.split('_')[1]}: {v / 1e9:.1f} GB/s" for k, v in bw.items() if k.startswith("copy_"))
                   + ("; at the end " + ", ".join(f"{k.split('_')[1]}: {v / 1e9:.1f} GB/s" for k, v in bw_end.items()
                                                    if k.startswith("copy_")) if bw_end else "")
                   + f". The shares use the best copy of the run, "
                     f"{res.get('bandwidth_used', bw.get('bytes_per_s', 0)) / 1e9:.1f} GB/s (the copies ran under the "
                     "same load as the engines; an idle machine would give more, so the shares are upper bounds).")
    if version or sysinfo:
        how = (f"built with `{build['stamp']}`" if build.get("stamp") else
               "build flags not recorded (a venv made before `python -m bench deps` wrote them)")
        venv = build.get("venv", "?").split("/")[-1]
        out.append(f"- llama.cpp: llama-cpp-python {version or '?'}, {how} (venv `{venv}`; "
                   f"`python -m bench deps` picks `{build.get('cmake_args', '?')}` for this CPU)"
                   + (f"; system_info: `{sysinfo.strip()}`" if sysinfo else ""))
    if build.get("cpu_flags"):
        out.append(f"- CPU features: {' '.join(build['cpu_flags'])}")
    out.append("")
    for m in models:
        if "engines" not in m or not m["engines"]:
            continue
        sizes = m.get("sizes", {})
        head = f"**{m['label']}, {m['quant']}**"
        if sizes:
            head += (f" — GGUF {sizes['gguf_file_bytes'] / MIB:.0f} MiB, "
                     f"Amber's ONNX {sizes['onnx_file_bytes'] / MIB:.0f} MiB; "
                     f"weight bytes per decoded token: Amber {sizes['amber']['decode_bytes'] / MIB:.0f} MiB, "
                     f"llama.cpp {sizes['llama']['decode_bytes'] / MIB:.0f} MiB")
            if "kernel_bytes" in sizes["amber"]:
                head += (f" (Amber's in the forms its kernels read, made at load: "
                         f"{sizes['amber']['kernel_bytes'] / MIB:.0f} MiB)")
            for form, what in (("native", "Amber native (GGUF blocks, as its kernels read them)"),
                               ("ort", "Amber ORT form (as MatMulNBits reads it)")):
                if "kernel_bytes" in sizes.get(form, {}):
                    head += f"; {what}: {sizes[form]['kernel_bytes'] / MIB:.0f} MiB"
        if m.get("convert"):
            head += (f"; converted in {m['convert']['seconds']:.0f} s "
                     f"(peak RSS {m['convert']['peak_rss_bytes'] / MIB:.0f} MiB)")
        p = m.get("plan", {})
        head += (f". {p.get('rounds')} processes per configuration × {p.get('runs')} runs ({p.get('steps')} decode "
                 f"steps; prefill 2048: {p.get('prefill_runs', {}).get('2048', p.get('runs'))} per process"
                 + (f", one warm-up prefill of {p['prefill_warmup']} tokens" if p.get("prefill_warmup") else
                    ", a warm-up at each size") + ")")
        if m.get("load_avg") is not None:
            head += f"; load average {m['load_avg']:.2f} while measured"
        if m.get("date"):
            head += f", {m['date']}" + (f", converter `{m['converter']}`" if m.get("converter") else "")
        out += [head + ".", "", detail_table(m), ""]
        for name, err in m.get("errors", {}).items():
            out += [f"_{name} could not run: {err.strip().splitlines()[-1][:300]}_", ""]
        greedy = {n: e.get("greedy", {}) for n, e in m["engines"].items()}
        if "Amber" in greedy:
            agree = []
            for n, g in greedy.items():
                if n == "Amber":
                    continue
                for c, seq in g.items():
                    a = greedy["Amber"].get(c, [])
                    k = next((i for i, (x, y) in enumerate(zip(a, seq, strict=False)) if x != y), min(len(a), len(seq)))
                    agree.append(f"{n} ctx {c}: {k}/{min(len(a), len(seq))}")
            if agree:
                out += ["Greedy tokens shared with Amber: " + ", ".join(agree) + " (random weights make near-ties "
                        "common, so a short shared prefix is not by itself an error).", ""]
    out.append(common.facts_line(facts, res.get("load_before"),
                                 "QUICK RUN (fewer sizes and runs): validation only." if res.get("quick") else ""))
    return "\n".join(out)
