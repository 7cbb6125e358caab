"""`python -m bench compare --shapes 135m,0.5b,1b,1.5b [--quants Q4_K_M,Q4_0,Q8_0]`: Amber side by side
with llama.cpp at real sizes.

Models: the default SmolLM2-135M GGUF (Q4_1, real weights) and random-weight GGUFs of real shapes
(bench_convert.write_gguf as F16, quantized by llama.cpp's own quantizer to each of `quants`), each
converted by Amber in a fresh process (fast mode, the default; CPU folder only). Same token ids,
common.THREADS threads, greedy; each engine configuration in fresh processes, interleaved
(Amber, llama.cpp FA on, llama.cpp FA off, then again), pooled. Amber runs through its engine path
(`Runner.forward` with IOBinding, and `Sampler` as `Generator.stream` uses it); llama.cpp through
`Llama.eval` at its best configuration per figure (flash attention on and off).

Figures: prefill 512 / 2048 tok/s, decode tok/s after a context of 100 / 1000, peak RSS of the
process (wait4; both engines do the same work: prefills up to 2048 tokens, decodes up to
1000 + steps), model load time; the machine's memory bandwidth (numpy copies) and the decode
bandwidth share: weight bytes one decode step reads × tok/s ÷ bandwidth.
GGUFs and converted folders are kept under AMBER_BENCH_MODELS (default: the test home's
bench-models/); converted folders are keyed by a hash of engine/convert, so a changed converter
converts again.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.harness import common
from bench.suites.shapes_doc import render
from bench.harness.common import Section, median, ok
from bench.harness.shapes_spec import AMBER_NOSPIN, N_CTX, SECOND, TARGETS
from bench.harness.weight_bytes import gguf_decode_bytes, onnx_decode_bytes, onnx_kernel_bytes, worker_bandwidth  # noqa: F401 (workers)
from engine.convert.native_form import DEFAULT_KERNELS

FTYPES = {"Q4_0": 2, "Q8_0": 7, "Q4_K_M": 15}      # llama_ftype values
LABELS = {"135m": "SmolLM2-135M (default model)", "0.5b": "Qwen2.5-0.5B shape", "1b": "Llama-3.2-1B shape",
          "1.5b": "Qwen2.5-1.5B shape"}
VOCAB_135M = 49152
PREFILL_SIZES = (512, 2048)
DECODE_CONTEXTS = (100, 1000)
# llama.cpp's OpenMP threads spin while waiting by default; on a busy machine (6 helpers on 2 cores)
# that makes it 10-80x slower (135M decode: ~1 tok/s spinning, ~100 passive), so its best
# configuration there is OMP_WAIT_POLICY=PASSIVE. On an idle machine its spinning default is the
# faster one (135M decode ~200 vs ~55 tok/s), so it also runs when the machine is quiet at the start.
LLAMA_CONFIGS: tuple[tuple[str, dict[str, Any], dict[str, str]], ...] = (
    ("llama.cpp FA on", {"flash_attn": True}, {"OMP_WAIT_POLICY": "PASSIVE"}),
    ("llama.cpp FA off", {"flash_attn": False}, {"OMP_WAIT_POLICY": "PASSIVE"}))
LLAMA_SPIN = ("llama.cpp FA on, spinning", {"flash_attn": True}, {})
# 1-minute load average below which the machine counts as quiet: the bench's own two threads (the
# previous figure's processes) count, other sessions' work does not fit under it.
QUIET_LOAD = 3.0
AMBER_KERNELS = ("ort", "native")          # --amber-kernels: Amber's conversions measured side by side


def plan(shape: str, quick: bool) -> dict[str, Any]:
    """Runs per process, processes per engine, decode steps: affordable at each size on 2 cores."""
    if quick:
        return {"rounds": 1, "runs": 1, "steps": 8, "prefill_runs": {}, "prefill_warmup": 512,
                "sizes": [512], "contexts": [100], "experiments": True}
    # Sized for a 2-core VM shared with other work (a 135M process takes minutes there).
    if shape == "135m":
        return {"rounds": 2, "runs": 2, "steps": 32, "prefill_runs": {"2048": 1}, "prefill_warmup": 512,
                "sizes": list(PREFILL_SIZES), "contexts": list(DECODE_CONTEXTS), "experiments": True}
    if shape == "0.5b":
        return {"rounds": 1, "runs": 2, "steps": 32, "prefill_runs": {"512": 1, "2048": 1}, "prefill_warmup": 512,
                "sizes": list(PREFILL_SIZES), "contexts": list(DECODE_CONTEXTS), "experiments": True}
    return {"rounds": 1, "runs": 1, "steps": 16, "prefill_runs": {}, "prefill_warmup": 512,
            "sizes": list(PREFILL_SIZES), "contexts": list(DECODE_CONTEXTS), "experiments": False}


def models_root() -> Path:
    from bench.suites.engine import test_home
    root = Path(os.environ.get("AMBER_BENCH_MODELS") or test_home() / "bench-models")
    root.mkdir(parents=True, exist_ok=True)
    return root


def converter_key() -> str:
    """A hash of Amber's converter source: a converted folder is reused only by the same converter."""
    h = hashlib.sha256()
    for p in sorted((common.REPO / "engine" / "convert").rglob("*.py")):
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:12]


# ---- workers (fresh processes) --------------------------------------------------------------------
def _status_bytes(key: str) -> int:
    """VmRSS / VmHWM of this process, from /proc/self/status (0 where unknown)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def force_spinning(spinning: bool) -> None:
    """An experiment in a worker process: every CPU session it makes sets ORT's
    `session.intra_op.allow_spinning` to `spinning`, whatever the engine's policy chooses."""
    from engine.runtime import providers
    from engine.runtime.host.spin import ALLOW
    plain = providers.session_options

    def with_spinning(threads: int | None = None) -> Any:
        so = plain(threads)
        so.add_session_config_entry(ALLOW, "1" if spinning else "0")
        return so
    providers.session_options = with_spinning   # type: ignore[assignment]


def worker_amber(model_dir: str, threads: int, tokens_file: str, prefill_sizes: list[int],
                 decode_contexts: list[int], decode_steps: int, runs: int,
                 prefill_runs: dict[str, int] | None = None, prefill_warmup: int | None = None,
                 spinning: bool | None = None) -> dict[str, Any]:
    """Amber's figures through its engine path: `Runner.forward` (IOBinding) and the `Sampler`
    that `Generator.stream` uses (greedy, the model's generation_config merged as there).
    `spinning`: an experiment only — sets ORT's `session.intra_op.allow_spinning` (None: the engine's own)."""
    import numpy as np

    if spinning is not None:
        force_spinning(spinning)

    from engine.api import SamplingParams
    from engine.generation.generate import Generator
    from engine.runtime.model import load_model
    from engine.text.sampling import Sampler, resolve_sampling
    ids = json.loads(Path(tokens_file).read_text())
    t0 = time.perf_counter()
    model = load_model(model_dir, "cpu", threads)
    out: dict[str, Any] = {"load_s": time.perf_counter() - t0, "provider": model.provider,
                           "rss_after_load": _status_bytes("VmRSS"), "prefill": {}, "decode": {}}
    _require_the_folders_form(Path(model_dir), model.graph)   # after the load's clock: it reads both graphs
    # The spin entries this process's session was made with (engine/runtime/host/spin.py: auto depends
    # on the load when the model loads), so a figure says which setting produced it.
    so = model.session.get_session_options()
    out["spin"] = {}
    for key in ("session.intra_op.allow_spinning", "session.intra_op.spin_duration_us"):
        try:
            out["spin"][key] = so.get_session_config_entry(key)
        except RuntimeError:   # not set: ORT's default
            pass
    runner = Generator(model).runner
    sampler = Sampler(resolve_sampling(SamplingParams(greedy=True), model.generation_config))

    def prefill(n: int) -> float:
        cache = runner.new_cache()
        start = time.perf_counter()
        runner.forward(cache, ids[:n])
        return time.perf_counter() - start

    if prefill_warmup:
        prefill(prefill_warmup)
    for n in prefill_sizes:
        if not prefill_warmup:
            prefill(n)   # warm-up at this size (first-run allocations of ORT's arena)
        out["prefill"][str(n)] = [prefill(n) for _ in range((prefill_runs or {}).get(str(n), runs))]
    out["rss_after_prefill"] = _status_bytes("VmHWM")

    for ctx in decode_contexts:
        cache = runner.new_cache()
        cache.reserve(ctx + decode_steps + 8)   # as `Generator.stream` does: no regrowth mid-reply
        history = np.empty(ctx + decode_steps + 16, dtype=np.int64)
        history[:ctx] = ids[:ctx]
        first_logits = runner.forward(cache, ids[:ctx])
        seq: list[int] = []

        def decode(steps: int, cache: Any = cache, ctx: int = ctx, first: Any = first_logits,
                   history: Any = history, seq: list[int] = seq) -> float:
            cache.truncate(ctx)
            n = ctx
            start = time.perf_counter()
            tok = sampler.sample(first, history[:n])
            seq[:] = [tok]
            for _ in range(steps):
                history[n] = tok
                n += 1
                logits = runner.forward(cache, [tok])
                tok = sampler.sample(logits, history[:n])
                seq.append(tok)
            return time.perf_counter() - start

        decode(8)   # warm-up
        out["decode"][str(ctx)] = [decode(decode_steps) for _ in range(runs)]
        out.setdefault("greedy", {})[str(ctx)] = seq[:16]
    out["rss_hwm"] = _status_bytes("VmHWM")
    return out


class FormError(RuntimeError):
    """The engine loaded another form of the folder than the one being measured."""


def _require_the_folders_form(model_dir: Path, loaded: Path | None) -> None:
    """A native folder whose kernels cannot run here (say, the library not built for the current
    sources) loads its ONNX Runtime form instead: a user still gets replies, but figures taken that
    way are not Amber's native path, so a bench stops and says why."""
    from engine.runtime.model import find_graph
    from engine.runtime.native_ops import graph_is_native, unavailable_reason
    if loaded is None or not graph_is_native(find_graph(model_dir)) or graph_is_native(loaded):
        return
    raise FormError(f"{model_dir}: the engine ran its ONNX Runtime form ({loaded}), not Amber's kernels: "
                    f"{unavailable_reason() or 'the session refused the native graph'} (`make native` builds them)")


def worker_bytes(gguf: str, folder: str) -> dict[str, Any]:
    amber = onnx_decode_bytes(folder)
    amber.update(onnx_kernel_bytes(folder))     # what the kernels read: the forms made at load
    return {"amber": amber, "llama": gguf_decode_bytes(gguf),
            "onnx_file_bytes": sum(p.stat().st_size for p in Path(folder).iterdir() if p.name.startswith("model.onnx")),
            "gguf_file_bytes": Path(gguf).stat().st_size}


def worker_extract_135m(into: str) -> dict[str, Any]:
    from bench.suites.engine import extract_gguf
    return {"path": str(extract_gguf(Path(into)))}


# ---- preparing the models -------------------------------------------------------------------------
def prepare_gguf(shape: str, quant: str, quantize_tool: Path | None = None) -> Path:
    """The GGUF of (shape, quant), made once: F16 random weights, then llama.cpp's quantizer (its
    C++ `llama-quantize` at `quantize_tool`, else through the side venv's Python binding)."""
    from bench.suites.convert import _child
    root = models_root()
    if shape == "135m":
        dst = root / "SmolLM2-135M-Instruct-Q4_1.gguf"
        if not dst.is_file():
            tmp = root / "extract.tmp"
            tmp.mkdir(exist_ok=True)
            res, _ = _child_bench("worker_extract_135m", {"into": str(tmp)})
            os.replace(res["path"], dst)
            shutil.rmtree(tmp, ignore_errors=True)
        return dst
    dst = root / f"{shape}-{quant}.gguf"
    if dst.is_file():
        return dst
    side = common.side_python()
    if side is None and not quantize_tool:
        raise RuntimeError("llama-cpp-python is not installed (run `python -m bench deps`)")
    f16 = root / f"{shape}-F16.gguf"
    if not f16.is_file():
        print(f"shapes: writing {f16.name} (random weights)", flush=True)
        part = f16.with_suffix(".part")
        _child("write_gguf_worker", {"path": str(part), "shape": shape, "wtype": "F16"}, common.REPO)
        os.replace(part, f16)
    print(f"shapes: quantizing {dst.name} with llama.cpp", flush=True)
    # llama-quantize reads a second argument that names a type (as "…Q4_K_M…" would) as the type
    part = root / f"quantizing-{shape}.tmp"
    if quantize_tool:
        rc = subprocess.call([quantize_tool, str(f16), str(part), quant, str(common.THREADS)],
                             stdout=subprocess.DEVNULL)
        res = {"rc": rc}
    else:
        res, _ = _child("quantize_llama_cpp", {"src": str(f16), "dst": str(part), "ftype": FTYPES[quant]},
                        common.REPO, python=side)
    if res["rc"] != 0:
        raise RuntimeError(f"llama.cpp quantize {shape} {quant} failed ({res['rc']})")
    os.replace(part, dst)
    return dst


def prepare_amber(gguf: Path, kernels: str = "ort") -> tuple[Path, dict[str, Any] | None]:
    """Amber's conversion of `gguf` (fast mode, CPU folder) with `kernels` ("ort" or "native"),
    made once per converter version and kernels form (both are part of the folder's name)."""
    from bench.suites.convert import _child
    key = converter_key()
    root = models_root() / "amber"
    root.mkdir(exist_ok=True)
    dest = root / f"{gguf.stem}-{kernels}-{key}"
    if (dest / "model.onnx").is_file():
        return dest, None
    others = tuple(f"{gguf.stem}-{k}-" for k in AMBER_KERNELS if k != kernels)
    for old in root.glob(f"{gguf.stem}-*"):   # another converter's output (the other form is kept)
        if not old.name.startswith(others):
            shutil.rmtree(old, ignore_errors=True)
    print(f"shapes: converting {gguf.name} with Amber ({kernels} kernels)", flush=True)
    res, rss = _child("convert_worker", {"src": str(gguf), "dest": str(dest), "exact": False, "gpu_variant": False,
                                         "kernels": kernels}, common.REPO)
    made = json.loads((dest / "amber_import.json").read_text()).get("kernels")
    if made != kernels:   # the converter falls back to the ORT form where the kernels do not load
        shutil.rmtree(dest, ignore_errors=True)
        raise RuntimeError(f"{gguf.name}: asked for the {kernels} form, the converter made the {made} form "
                           "(is the kernel library built for these sources?)")
    return dest, {"seconds": res["seconds"], "peak_rss_bytes": rss}


def _child_bench(func: str, args: dict[str, Any]) -> tuple[dict[str, Any], int]:
    r = common.run_worker("bench.suites.shapes", func, args, timeout=3600)
    return r.data, r.peak_rss_bytes


# ---- the bench ------------------------------------------------------------------------------------
def _pool(runs: list[tuple[dict[str, Any], int]], steps: int) -> dict[str, Any]:
    """One configuration's processes pooled: medians over every timed run, the largest peak RSS."""
    out: dict[str, Any] = {"processes": len(runs), "prefill": {}, "decode": {},
                           "peak_rss_bytes": max(rss for _, rss in runs),
                           "load_s": median(d["load_s"] for d, _ in runs)}
    for n in runs[0][0]["prefill"]:
        rates = [int(n) / s for d, _ in runs for s in d["prefill"][n]]
        out["prefill"][n] = {"tokens_per_s": median(rates), "runs": rates}
    for c in runs[0][0]["decode"]:
        rates = [steps / s for d, _ in runs for s in d["decode"][c]]
        out["decode"][c] = {"tokens_per_s": median(rates), "runs": rates}
    first = runs[0][0]
    for k in ("version", "system_info", "flash_attn", "n_batch", "n_ubatch", "n_ctx", "greedy", "rss_after_load",
              "spin"):
        if k in first:
            out[k] = first[k]
    return out


def _best(configs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """llama.cpp's best configuration per figure: fastest for speeds, smallest for memory and load."""
    best: dict[str, Any] = {"prefill": {}, "decode": {}}
    any_cfg = next(iter(configs.values()))
    for kind in ("prefill", "decode"):
        for k in any_cfg[kind]:
            name = max(configs, key=lambda c: configs[c][kind][k]["tokens_per_s"])
            best[kind][k] = {"tokens_per_s": configs[name][kind][k]["tokens_per_s"], "config": name}
    for key in ("peak_rss_bytes", "load_s"):
        name = min(configs, key=lambda c: configs[c][key])
        best[key] = {"value": configs[name][key], "config": name}
    return best


def measure_model(shape: str, quant: str, quick: bool, bandwidth: float, tmp: Path,
                  kernels: list[str] | None = None) -> dict[str, Any]:
    """Both engines on one model, interleaved fresh processes; ratios and targets. `kernels`: the
    Amber conversions to run, the first named "Amber" (scored), a second one under its SECOND name."""
    p = plan(shape, quick)
    gguf = prepare_gguf(shape, quant)
    kernels = kernels or [DEFAULT_KERNELS]
    folder, conv = prepare_amber(gguf, kernels[0])
    # "--amber-kernels native,ort": the other form as a second Amber column (the first is scored).
    second = kernels[1] if len(kernels) > 1 and kernels[1] != kernels[0] else None
    extra_amber = [(SECOND[second][0], prepare_amber(gguf, second)[0])] if second else []
    sizes, _ = _child_bench("worker_bytes", {"gguf": str(gguf), "folder": str(folder)})
    if extra_amber:
        # The bytes its kernels read: the stored count would take a table the graph decodes at load
        # (the lookup's copy of a tied embedding) as read whole every token.
        from bench.harness.weight_bytes import onnx_decode_bytes
        sizes[str(second)] = {**onnx_decode_bytes(str(extra_amber[0][1])),
                              **onnx_kernel_bytes(str(extra_amber[0][1]))}
    cfg = json.loads((folder / "config.json").read_text())
    import random
    rng = random.Random(0)
    vocab = int(cfg.get("vocab_size", VOCAB_135M))
    tokens_file = tmp / f"tokens-{vocab}.json"
    n_ids = max(p["sizes"] + p["contexts"])
    tokens_file.write_text(json.dumps([rng.randrange(300, vocab - 10) for _ in range(n_ids)]))
    args = {"threads": common.THREADS, "tokens_file": str(tokens_file), "prefill_sizes": p["sizes"],
            "decode_contexts": p["contexts"], "decode_steps": p["steps"], "runs": p["runs"],
            "prefill_runs": p["prefill_runs"], "prefill_warmup": p["prefill_warmup"]}
    side = common.python_with("llama_cpp")
    engines: list[tuple[str, str, str, dict[str, Any], str | None, dict[str, str]]] = [
        ("Amber", "bench.suites.shapes", "worker_amber", {"model_dir": str(folder), **args}, None, {})]
    for name, extra_folder in extra_amber:
        engines.append((name, "bench.suites.shapes", "worker_amber", {"model_dir": str(extra_folder), **args},
                        None, {}))
    if p["experiments"]:
        engines.append((AMBER_NOSPIN, "bench.suites.shapes", "worker_amber",
                        {"model_dir": str(folder), **args, "spinning": False}, None, {}))
    # The spinning default in a quick run (validation) and whenever the machine is quiet: under load
    # it takes minutes per figure and loses anyway; when quiet it can be llama.cpp's best.
    configs = LLAMA_CONFIGS + ((LLAMA_SPIN,) if quick or os.getloadavg()[0] < QUIET_LOAD else ())
    for name, extra, env in configs if side else ():
        engines.append((name, "bench.suites.compare", "worker_llama",
                        {"gguf": str(gguf), **args, "n_ctx": N_CTX, "n_batch": 2048, "n_ubatch": 512, **extra},
                        side, env))
    raw: dict[str, list[tuple[dict[str, Any], int]]] = {}
    errors: dict[str, str] = {}
    label = f"{shape} {quant if shape != '135m' else 'Q4_1'}"
    loads = [common.load_average()]
    for _ in range(p["rounds"]):
        for name, module, func, wargs, py, env in engines:
            if name in errors:
                continue
            try:
                r = common.run_worker(module, func, wargs, python=py, timeout=3000, env=env)
            except common.WorkerError as exc:
                errors[name] = str(exc)[-1500:]
                print(f"shapes: {label} {name} failed: {str(exc).strip().splitlines()[-1][:300]}", flush=True)
                continue
            raw.setdefault(name, []).append((r.data, r.peak_rss_bytes))
            loads.append(common.load_average())
            print(f"shapes: {label} {name}: prefill tok/s "
                  + ", ".join(f"{n}: {int(n) / median(v):.1f}" for n, v in r.data["prefill"].items())
                  + "; decode tok/s "
                  + ", ".join(f"ctx {c}: {p['steps'] / median(v):.2f}" for c, v in r.data["decode"].items())
                  + f"; peak RSS {r.peak_rss_bytes / 2**20:.0f} MiB; load {r.data['load_s']:.2f} s"
                  + f" (load average {common.load_average():.2f})", flush=True)
    res: dict[str, Any] = {"shape": shape, "quant": quant if shape != "135m" else "Q4_1",
                           "label": LABELS.get(shape, shape),
                           "plan": p, "sizes": sizes, "convert": conv, "errors": errors,
                           "load_avg": sum(loads) / len(loads), "converter": folder.name.rsplit("-", 1)[-1],
                           "kernels": kernels,
                           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                           "engines": {n: _pool(v, p["steps"]) for n, v in raw.items()}}
    # Every llama.cpp configuration that ran competes for "best", the spinning default included (it
    # runs only on a quiet machine or in quick runs; on an idle machine it is often the fastest).
    llama = {n: e for n, e in res["engines"].items() if n.startswith("llama.cpp")}
    amber = res["engines"].get("Amber")
    if not llama or amber is None:
        return res
    best = res["best"] = _best(llama)
    ratios = _ratios(amber, best)
    res["ratios"] = ratios
    if AMBER_NOSPIN in res["engines"]:
        res["ratios_nospin"] = _ratios(res["engines"][AMBER_NOSPIN], best)
    for name, key, vs_key in SECOND.values():
        if name in res["engines"]:
            res[key] = _ratios(res["engines"][name], best)
            # The second form against the scored one, the same figures: its speed-up (or memory change).
            res[vs_key] = _ratios(res["engines"][name], _as_best(amber))
    _score(res, bandwidth)
    print(f"shapes: {label}: Amber ÷ llama.cpp (best per figure) "
          + ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items())
          + f"; bandwidth share Amber {res['bw_share']['Amber']:.0%}, llama.cpp {res['bw_share']['llama.cpp']:.0%}",
          flush=True)
    return res


def _score(m: dict[str, Any], bandwidth: float) -> None:
    """Bandwidth shares (weight bytes per decode step × tok/s at the shortest context ÷ `bandwidth`)
    and the targets met, from a model's stored figures."""
    amber, best, ratios, sizes = m["engines"]["Amber"], m["best"], m["ratios"], m["sizes"]
    c0 = str(min(int(c) for c in amber["decode"]))
    # Amber's share counts the bytes its kernels read (the forms made at load), where known.
    amber_bytes = sizes["amber"].get("kernel_bytes", sizes["amber"]["decode_bytes"])
    share = {"Amber": amber_bytes * amber["decode"][c0]["tokens_per_s"] / bandwidth,
             "llama.cpp": sizes["llama"]["decode_bytes"] * best["decode"][c0]["tokens_per_s"] / bandwidth}
    if AMBER_NOSPIN in m["engines"]:
        nospin = m["engines"][AMBER_NOSPIN]["decode"][c0]["tokens_per_s"]
        share[AMBER_NOSPIN] = amber_bytes * nospin / bandwidth
    for form, (name, _, _) in SECOND.items():
        if name in m["engines"] and form in sizes:
            # The second form's bytes are its own folder's, counted as Amber's are (kernel bytes;
            # older results: the stored count).
            share[name] = (sizes[form].get("kernel_bytes", sizes[form]["decode_bytes"])
                           * m["engines"][name]["decode"][c0]["tokens_per_s"] / bandwidth)
    m["bw_share"], m["bw_context"], m["bw_used"] = share, c0, bandwidth
    targets = {f"decode_{c}": ratios[f"decode_{c}"] >= TARGETS["decode"] for c in amber["decode"]}
    if "prefill_2048" in ratios:
        targets["prefill_2048"] = ratios["prefill_2048"] >= TARGETS["prefill_2048"]
    targets["rss"] = ratios["rss"] <= TARGETS["rss"]
    targets["bw_share"] = share["Amber"] >= TARGETS["bw_share"]
    m["targets"] = targets


def finalize(results: dict[str, Any]) -> dict[str, Any]:
    """Scores every model against the best bandwidth measured in the run (the copies are timed under
    the same load as everything else, so the fastest one is the nearest to the machine's limit)."""
    samples = [results.get("bandwidth"), results.get("bandwidth_end"), *results.get("bandwidth_samples", [])]
    samples += [m["bandwidth_before"] for m in results["models"] if m.get("bandwidth_before")]
    # Rows kept from an earlier run bring the best bandwidth of that run.
    samples += [{"bytes_per_s": m["bw_used"]} for m in results["models"] if m.get("bw_used")]
    bw = max(b["bytes_per_s"] for b in samples if b)
    results["bandwidth_used"] = bw
    results["targets"] = {}
    for m in results["models"]:
        if "ratios" not in m:
            continue
        _score(m, bw)
        for k, met in m["targets"].items():
            value = m["bw_share"]["Amber"] if k == "bw_share" else m["ratios"][k]
            results["targets"][f"{m['shape']}_{m['quant']}_{k}"] = {"value": value, "target": _target_text(k),
                                                                   "met": met}
    return results


def _as_best(engine: dict[str, Any]) -> dict[str, Any]:
    """One engine's pooled figures in `_best`'s shape (to take ratios against it)."""
    return {"prefill": engine["prefill"], "decode": engine["decode"],
            "peak_rss_bytes": {"value": engine["peak_rss_bytes"]}, "load_s": {"value": engine["load_s"]}}


def _ratios(amber: dict[str, Any], best: dict[str, Any]) -> dict[str, float]:
    ratios: dict[str, float] = {}
    for kind in ("prefill", "decode"):
        for k, v in best[kind].items():
            ratios[f"{kind}_{k}"] = amber[kind][k]["tokens_per_s"] / v["tokens_per_s"]
    ratios["rss"] = amber["peak_rss_bytes"] / best["peak_rss_bytes"]["value"]
    ratios["load"] = amber["load_s"] / best["load_s"]["value"]
    return ratios


def run(quick: bool = False, shapes: list[str] | None = None, quants: list[str] | None = None,
        save: str | None = None, kernels: list[str] | None = None) -> dict[str, Any]:
    import tempfile
    kernels = [k.strip() for k in (kernels or [DEFAULT_KERNELS]) if k.strip()]
    bad = [k for k in kernels if k not in AMBER_KERNELS]
    if bad or not kernels:
        raise ValueError(f"unknown --amber-kernels {', '.join(bad)} (choose from {', '.join(AMBER_KERNELS)})")
    shapes = shapes or ["135m"]
    quants = quants or list(FTYPES)
    save_path = Path(save) if save else models_root() / "perf18-results.json"
    load_before = common.load_average()
    results: dict[str, Any] = {"quick": quick, "threads": common.THREADS, "models": [], "load_before": load_before}
    bw = _child_bench("worker_bandwidth", {"threads": common.THREADS})[0]
    results["bandwidth"] = bw
    print("shapes: memory bandwidth (numpy copy, best of 5): "
          + ", ".join(f"{k}: {v / 1e9:.1f} GB/s" for k, v in bw.items() if k.startswith("copy_")), flush=True)
    results["llama_build"] = _llama_build()
    # Models measured earlier and not now keep their rows (each says when and under what load).
    earlier = []
    if save_path.is_file() and not quick:
        try:
            now = {(sh, q) for sh in shapes for q in (["Q4_1"] if sh == "135m" else quants)}
            earlier = [m for m in json.loads(save_path.read_text()).get("models", [])
                       if (m.get("shape"), m.get("quant")) not in now and "failed" not in m]
        except (OSError, ValueError):
            earlier = []
    with tempfile.TemporaryDirectory(prefix="amber-bench-shapes-") as tmp:
        for shape in shapes:
            for quant in (["Q4_1"] if shape == "135m" else quants):
                if results["models"]:   # the bandwidth again between models (the load moves)
                    results.setdefault("bandwidth_samples", []).append(
                        _child_bench("worker_bandwidth", {"threads": common.THREADS})[0])
                try:
                    results["models"].append(measure_model(shape, quant, quick, bw["bytes_per_s"], Path(tmp),
                                                           kernels))
                    results["models"][-1]["bandwidth_before"] = (results.get("bandwidth_samples") or [bw])[-1]
                except Exception as exc:   # noqa: BLE001 - one model failing is reported; the others still run
                    print(f"shapes: {shape} {quant} failed: {exc}", flush=True)
                    results["models"].append({"shape": shape, "quant": quant, "label": LABELS.get(shape, shape),
                                              "failed": str(exc)[-1500:]})
                results["facts"] = common.machine_facts()
                save_path.write_text(json.dumps({**results, "models": _ordered(earlier + results["models"])},
                                                indent=1, default=str))
            (models_root() / f"{shape}-F16.gguf").unlink(missing_ok=True)   # 1–3 GB, made again when needed
    results["models"] = _ordered(earlier + results["models"])
    bw2 = _child_bench("worker_bandwidth", {"threads": common.THREADS})[0]
    results["bandwidth_end"] = bw2
    results["facts"] = common.machine_facts()
    finalize(results)
    save_path.write_text(json.dumps(results, indent=1, default=str))
    print(f"shapes: results saved to {save_path}", flush=True)
    return results


def _ordered(models: list[dict[str, Any]]) -> list[dict[str, Any]]:
    order = {k: i for i, k in enumerate(LABELS)}
    qorder = {k: i for i, k in enumerate(("Q4_1", *FTYPES))}
    return sorted(models, key=lambda m: (order.get(m["shape"], 99), qorder.get(m["quant"], 99)))


def _target_text(key: str) -> str:
    if key.startswith("decode"):
        return f"≥ {TARGETS['decode']}"
    if key == "prefill_2048":
        return f"≥ {TARGETS['prefill_2048']}"
    if key == "rss":
        return f"≤ {TARGETS['rss']}"
    return f"≥ {TARGETS['bw_share']:.0%}"


def _llama_build() -> dict[str, Any]:
    from bench.harness import llama_build
    stamp = common.SIDE_VENV / "llama-cpp-build.txt"
    flags = llama_build.cpu_flags()
    return {"venv": str(common.SIDE_VENV), "cmake_args": llama_build.cmake_args(flags),
            "stamp": stamp.read_text().strip() if stamp.is_file() else None,
            "cpu_flags": sorted(f for f in flags if f.startswith(("avx", "amx", "fma", "f16c", "bmi")))}


# ---- docs/BENCHMARKS.md ---------------------------------------------------------------------------
def section(res: dict[str, Any]) -> Section:
    return Section("perf18", "Performance at real sizes", render(res), common.ORDER.get("compare", 20) + 1)


if __name__ == "__main__":
    # `python -m bench.suites.shapes RESULTS.json`: writes the section from saved results (a run cut short).
    data = finalize(json.loads(Path(sys.argv[1]).read_text()))
    common.write_section(section(data))
    print(ok(True), "section written", flush=True)
