"""`python -m bench.suites.peers --shapes 135m,1b,8b [--ik-source DIR] [--long] [--write]`: Amber
against llama.cpp's and ik_llama.cpp's own C++ `llama-bench` (no Python on their side), on the same
GGUFs, 2 threads, in one run.

Models as `python -m bench compare` makes them (bench.suites.shapes): the default SmolLM2-135M GGUF and
random-weight GGUFs of real shapes quantized to Q4_K_M by llama.cpp's `llama-quantize`. Amber runs
its engine path (bench.suites.shapes.worker_amber: `Runner.forward` with IOBinding and the greedy
`Sampler`); the peers run `llama-bench -o json` with flash attention off and on (ik_llama.cpp also
with and without its run-time repacking, `-rtr 1`: its row-interleaved forms made at load), and each
figure takes a peer's best configuration. Rounds interleave the engines (Amber, llama.cpp,
ik_llama.cpp, then again) and take medians.

Figures: prefill 512 tok/s; decode tok/s at depth 0 (Amber: after one token); peak RSS of the
process (wait4; llama-bench keeps one context per configuration, sized to the test); the decode
bandwidth share: weight bytes one decode step reads (Amber: in the forms its kernels read; the
peers: the GGUF's tensors) × tok/s ÷ the machine's copy bandwidth measured in the same run.
`--long` adds an 8,000-token prefill and decode at depths 4,000 and 8,000 (the default model only).
The results go to docs/benchmarks/peers.md (with `--write`) and to a JSON file beside it.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness import common, llama_tools
from bench.harness.common import median, table
from bench.harness.weight_bytes import gguf_decode_bytes, onnx_kernel_bytes

PAGE = common.DOCS / "benchmarks" / "peers.md"
RESULTS = common.DOCS / "benchmarks" / "peers.json"
PREFILL = 512
DECODE = 32               # decode steps a run times
LONG_PREFILL = 8000
LONG_DEPTHS = (4000, 8000)
LONG_DECODE = 16


def _home() -> Path:
    return Path(os.environ.get("AMBER_TEST_HOME") or common.REPO / ".amber-dev")


# ---- the peers' runs ------------------------------------------------------------------------------
def _rows(peer: str, text: str, config: str) -> list[dict[str, Any]]:
    """llama-bench's JSON rows as {test, depth, tokens, tok_s, samples, config}."""
    start = text.find("[")
    data = json.loads(text[start:]) if start >= 0 else []
    out = []
    for r in data:
        n_prompt, n_gen = int(r.get("n_prompt", 0)), int(r.get("n_gen", 0))
        depth = int(r.get("n_depth", 0))
        if peer == "ik_llama.cpp" and n_prompt and n_gen:   # ik's -gp: n_gen timed after n_prompt
            depth, n_prompt = n_prompt, 0
        test = "pp" if n_prompt and not n_gen else "tg"
        fa = r.get("flash_attn")
        fa_word = "FA on" if fa in (True, 1, "1", "on", "enabled") else "FA off"
        out.append({"test": test, "depth": depth, "tokens": n_prompt or n_gen, "tok_s": float(r["avg_ts"]),
                    "samples": [float(x) for x in r.get("samples_ts", [])],
                    "config": fa_word if config == "default" else f"{config}, {fa_word}"})
    return out


def run_llama_bench(tools: llama_tools.Tools, gguf: Path, args: list[str], config: str,
                    timeout: float = 3600) -> dict[str, Any]:
    """One llama-bench process: its rows, peak RSS (wait4) and wall time."""
    cmd = [str(tools.bench), "-m", str(gguf), "-t", str(common.THREADS), "-o", "json", *args]
    with tempfile.TemporaryFile(mode="w+") as out, tempfile.TemporaryFile(mode="w+") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err)
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        except BaseException:
            proc.kill()
            raise
        wall = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        text, log = out.read(), err.read()
    rc = os.waitstatus_to_exitcode(status)
    if rc != 0:
        tail = " | ".join(log.strip().splitlines()[-3:])
        raise RuntimeError(f"{tools.peer} llama-bench {' '.join(args)}: exit status {rc}: {tail}")
    return {"rows": _rows(tools.peer, text, config), "peak_rss_bytes": usage.ru_maxrss * 1024, "wall_s": wall,
            "config": config}


def peer_runs(tools: llama_tools.Tools, long: bool) -> list[tuple[str, list[str]]]:
    """(configuration, llama-bench arguments) for one round of a peer."""
    base = ["-r", "1", "-fa", "0,1"]
    if not long:
        tests = [["-p", str(PREFILL), "-n", str(DECODE)]]
    elif tools.peer == "ik_llama.cpp":   # -gp D,N: N tokens decoded (and timed) after a prompt of D
        tests = [["-p", str(LONG_PREFILL), "-n", "0", *[a for d in LONG_DEPTHS for a in ("-gp", f"{d},{LONG_DECODE}")]]]
    else:                                # -d D: the test runs after D tokens already in the context
        depths = ",".join(map(str, LONG_DEPTHS))
        tests = [["-p", str(LONG_PREFILL), "-n", "0"], ["-p", "0", "-n", str(LONG_DECODE), "-d", depths]]
    runs = [("default", base + t) for t in tests]
    if tools.peer == "ik_llama.cpp":
        runs += [("-rtr 1", base + t + ["-rtr", "1"]) for t in tests]
    return runs


# ---- Amber's runs ---------------------------------------------------------------------------------
def amber_args(folder: Path, tokens_file: Path, long: bool) -> dict[str, Any]:
    if long:
        return {"model_dir": str(folder), "threads": common.THREADS, "tokens_file": str(tokens_file),
                "prefill_sizes": [LONG_PREFILL], "decode_contexts": list(LONG_DEPTHS), "decode_steps": LONG_DECODE,
                "runs": 1, "prefill_warmup": 512}
    return {"model_dir": str(folder), "threads": common.THREADS, "tokens_file": str(tokens_file),
            "prefill_sizes": [PREFILL], "decode_contexts": [1], "decode_steps": DECODE, "runs": 1}


def _amber_rows(data: dict[str, Any], steps: int) -> list[dict[str, Any]]:
    rows = [{"test": "pp", "depth": 0, "tokens": int(n), "tok_s": int(n) / median(v), "config": "Amber"}
            for n, v in data["prefill"].items()]
    rows += [{"test": "tg", "depth": 0 if int(c) <= 1 else int(c), "tokens": steps, "tok_s": steps / median(v),
              "config": "Amber"} for c, v in data["decode"].items()]
    return rows


# ---- one model ------------------------------------------------------------------------------------
def measure(shape: str, peers: list[llama_tools.Tools], rounds: int, long: bool, tmp: Path) -> dict[str, Any]:
    from bench.suites import shapes
    gguf = shapes.prepare_gguf(shape, "Q4_K_M", quantize_tool=peers[0].quantize)
    folder, conv = shapes.prepare_amber(gguf, "native")
    cfg = json.loads((folder / "config.json").read_text())
    vocab = int(cfg.get("vocab_size", shapes.VOCAB_135M))
    rng = random.Random(0)
    tokens = tmp / f"tokens-{vocab}.json"
    tokens.write_text(json.dumps([rng.randrange(300, vocab - 10) for _ in range(LONG_PREFILL + 16)]))
    sizes = common.run_worker("bench.suites.peers", "worker_bytes", {"gguf": str(gguf), "folder": str(folder)},
                              timeout=1800).data
    engines: dict[str, list[dict[str, Any]]] = {}
    loads = [common.load_average()]
    label = f"{shape}{' (long)' if long else ''}"
    steps = LONG_DECODE if long else DECODE
    for _ in range(rounds):
        r = common.run_worker("bench.suites.shapes", "worker_amber", amber_args(folder, tokens, long), timeout=3600)
        engines.setdefault("Amber", []).append({"rows": _amber_rows(r.data, steps), "peak_rss_bytes": r.peak_rss_bytes,
                                               "load_s": r.data["load_s"]})
        print(f"peers: {label} Amber: {_say(engines['Amber'][-1]['rows'])}, peak RSS "
              f"{r.peak_rss_bytes / 2**20:.0f} MiB (load average {common.load_average():.2f})", flush=True)
        loads.append(common.load_average())
        for tools in peers:
            for config, args in peer_runs(tools, long):
                try:
                    run = run_llama_bench(tools, gguf, args, config)
                except RuntimeError as exc:
                    print(f"peers: {label} {exc}", flush=True)
                    engines.setdefault(tools.peer, []).append({"rows": [], "error": str(exc)[:500], "config": config})
                    continue
                engines.setdefault(tools.peer, []).append(run)
                print(f"peers: {label} {tools.peer} {config}: {_say(run['rows'])}, peak RSS "
                      f"{run['peak_rss_bytes'] / 2**20:.0f} MiB (load average {common.load_average():.2f})", flush=True)
                loads.append(common.load_average())
    probe: dict[str, float] = {}
    for tools in peers if not long else ():
        for config in ("default", "-rtr 1") if tools.peer == "ik_llama.cpp" else ("default",):
            probe[f"{tools.peer} {config}"] = median(load_probe(tools, gguf, config)["wall_s"] for _ in range(rounds))
    return {"shape": shape, "long": long, "gguf": gguf.name, "sizes": sizes, "convert": conv, "load_probe": probe,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load_avg": [min(loads), max(loads)],
            "figures": {peer: best_figures(runs) for peer, runs in engines.items()},
            "errors": [r["error"] for runs in engines.values() for r in runs if "error" in r]}


def _say(rows: list[dict[str, Any]]) -> str:
    return ", ".join(f"{r['test']}{r['tokens']}@{r['depth']} {r['tok_s']:.1f} tok/s ({r['config']})" for r in rows)


def best_figures(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per figure (test, tokens, depth): the median over rounds of each configuration, then the best
    configuration; the largest peak RSS of the processes."""
    by: dict[tuple[str, int, int], dict[str, list[float]]] = {}
    for run in runs:
        for r in run["rows"]:
            by.setdefault((r["test"], r["tokens"], r["depth"]), {}).setdefault(r["config"], []).append(r["tok_s"])
    figures: dict[str, Any] = {}
    for (test, tokens, depth), configs in sorted(by.items()):
        best = max(configs, key=lambda c: median(configs[c]))
        figures[f"{test}{tokens}@{depth}"] = {"tok_s": median(configs[best]), "config": best,
                                             "all": {c: median(v) for c, v in configs.items()}}
    rss = [r["peak_rss_bytes"] for r in runs if "peak_rss_bytes" in r]
    out: dict[str, Any] = {"figures": figures, "peak_rss_bytes": max(rss) if rss else None}
    loads = [r["load_s"] for r in runs if "load_s" in r]
    if loads:
        out["load_s"] = median(loads)
    return out


def worker_bytes(gguf: str, folder: str) -> dict[str, Any]:
    return {"amber": onnx_kernel_bytes(folder), "gguf": gguf_decode_bytes(gguf),
            "gguf_file_bytes": Path(gguf).stat().st_size}


def load_probe(tools: llama_tools.Tools, gguf: Path, config: str) -> dict[str, Any]:
    """A peer's whole process for a 1-token prompt with no warm-up: an upper bound on its load time
    (it adds the process start, a 1-token context and one tiny prefill, a few ms in C++)."""
    warm = ["-w", "0"] if tools.peer == "ik_llama.cpp" else ["--no-warmup"]
    args = ["-p", "1", "-n", "0", "-r", "1", *warm] + (["-rtr", "1"] if config == "-rtr 1" else [])
    return run_llama_bench(tools, gguf, args, config, timeout=600)


# ---- the run and its page -------------------------------------------------------------------------
def run(shapes_: list[str], ik_source: Path | None, rounds: int, long: bool) -> dict[str, Any]:
    home = _home()
    peers = [llama_tools.build("llama.cpp", llama_tools.mainline_source(home), home)]
    skipped = {}
    if ik_source is not None:
        try:
            peers.append(llama_tools.build("ik_llama.cpp", ik_source, home))
        except llama_tools.ToolsError as exc:
            skipped["ik_llama.cpp"] = str(exc)
            print(f"peers: {exc}", flush=True)
    facts = common.machine_facts()
    bw = [common.run_worker("bench.harness.weight_bytes", "worker_bandwidth", {"threads": common.THREADS}).data]
    models = []
    with tempfile.TemporaryDirectory() as tmp:
        for shape in shapes_:
            models.append(measure(shape, peers, rounds, long=False, tmp=Path(tmp)))
            if long and shape == "135m":
                models.append(measure(shape, peers, 1, long=True, tmp=Path(tmp)))
    bw.append(common.run_worker("bench.harness.weight_bytes", "worker_bandwidth", {"threads": common.THREADS}).data)
    return {"facts": facts, "bandwidth": max(b["bytes_per_s"] for b in bw), "bandwidth_runs": bw,
            "peers": [{"peer": t.peer, "source": t.source, "options": t.options} for t in peers],
            "skipped": skipped, "models": models}


def _share(bytes_per_token: int, tok_s: float, bandwidth: float) -> float:
    return bytes_per_token * tok_s / bandwidth


def render(res: dict[str, Any]) -> str:
    facts = res["facts"]
    peers = [p["peer"] for p in res["peers"]]
    lines = ["# Amber against llama.cpp and ik_llama.cpp (their C++ llama-bench)", "",
             "Written by `python -m bench.suites.peers` (bench/suites/peers.py; what it runs is in its docstring). "
             "Ratios are Amber ÷ the peer's best configuration for that figure (speeds: higher is better for "
             "Amber; RSS and load: lower is). Each peer's configuration that won is named in the detail tables.", "",
             "Builds: " + "; ".join(f"{p['peer']} from {p['source']} (`{p['options']}`)" for p in res["peers"])
             + ".", ""]
    for peer, why in res["skipped"].items():
        lines += [f"{peer} not measured: {why}", ""]
    bw = res["bandwidth"]
    lines += [f"Memory bandwidth (numpy copy, read + write bytes, best of the run): {bw / 1e9:.1f} GB/s.", ""]
    reads = [b.get(f"read_{common.THREADS}t_bytes_per_s", 0.0) for b in res.get("bandwidth_runs", [])]
    if max(reads, default=0.0) > 0:
        lines += [f"Read only (numpy float64 sums, {common.THREADS} threads, best of the run): "
                  f"{max(reads) / 1e9:.1f} GB/s; "
                  "a decode step only reads its weights, so its bytes × tok/s can approach this, never the copy's "
                  "read + write figure.", ""]
    head = ["model", "figure", "Amber", *peers, *[f"Amber ÷ {p}" for p in peers]]
    rows = []
    for m in res["models"]:
        figs = m["figures"]
        amber = figs.get("Amber", {}).get("figures", {})
        name = f"{m['shape']}{' long' if m['long'] else ''} ({m['gguf']})"
        for key in sorted(amber, key=lambda k: (k[:2], int(k.split("@")[1]), k)):
            a = amber[key]["tok_s"]
            vals = [figs.get(p, {}).get("figures", {}).get(key) for p in peers]
            rows.append([name, _figure_name(key), f"{a:.1f} tok/s",
                         *[f"{v['tok_s']:.1f} ({v['config']})" if v else "–" for v in vals],
                         *[f"{a / v['tok_s']:.2f}×" if v else "–" for v in vals]])
        if not m["long"]:
            amber_rss = figs["Amber"]["peak_rss_bytes"]
            rss = [figs.get(p, {}).get("peak_rss_bytes") for p in peers]
            rows.append([name, "peak RSS", f"{amber_rss / 2**20:.0f} MiB",
                         *[f"{r / 2**20:.0f} MiB" if r else "–" for r in rss],
                         *[f"{amber_rss / r:.2f}×" if r else "–" for r in rss]])
            probe = m.get("load_probe", {})
            load = [min((v for k, v in probe.items() if k.startswith(p)), default=None) for p in peers]
            rows.append([name, "load (Amber: `load_model`; peers: whole process, 1-token prompt)",
                         f"{figs['Amber']['load_s']:.2f} s", *[f"{v:.2f} s" if v else "–" for v in load],
                         *[f"{figs['Amber']['load_s'] / v:.2f}×" if v else "–" for v in load]])
            amber_bytes = m["sizes"]["amber"]["kernel_bytes"]
            gguf_bytes = m["sizes"]["gguf"]["decode_bytes"]
            tg = amber.get(f"tg{DECODE}@0")
            shares = [figs.get(p, {}).get("figures", {}).get(f"tg{DECODE}@0") for p in peers]
            if tg:
                rows.append([name, "decode bandwidth share (bytes/token × tok/s ÷ copy bandwidth)",
                             f"{_share(amber_bytes, tg['tok_s'], bw):.0%} ({amber_bytes / 2**20:.0f} MiB/token)",
                             *[f"{_share(gguf_bytes, s['tok_s'], bw):.0%} ({gguf_bytes / 2**20:.0f} MiB/token)"
                               if s else "–" for s in shares], *["" for _ in peers]])
    lines += [table(head, rows), ""]
    for m in res["models"]:
        lines.append(f"- {m['shape']}{' long' if m['long'] else ''}: measured {m['date']}, load average "
                     f"{m['load_avg'][0]:.2f}–{m['load_avg'][1]:.2f}"
                     + (f"; errors: {'; '.join(m['errors'])}" if m["errors"] else ""))
    lines += ["", common.facts_line(facts)]
    return "\n".join(lines) + "\n"


def merge(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """`new` with the models of `old` it did not measure again (in `old`'s order, then the new ones);
    the bandwidth is the better of the two runs'."""
    fresh = {(m["shape"], m["long"]): m for m in new["models"]}
    models = [fresh.pop((m["shape"], m["long"]), m) for m in old["models"]] + list(fresh.values())
    return {**new, "models": models, "bandwidth": max(old["bandwidth"], new["bandwidth"]),
            "bandwidth_runs": old.get("bandwidth_runs", []) + new["bandwidth_runs"]}


def _figure_name(key: str) -> str:
    test, depth = key.split("@")
    kind = "prefill" if test.startswith("pp") else "decode"
    return f"{kind} {test[2:]} tokens" + (f" at depth {depth}" if depth != "0" else "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default="135m,1b", help="comma-separated: 135m, 0.5b, 1b, 1.5b, 8b")
    ap.add_argument("--ik-source", type=Path, default=os.environ.get("AMBER_IK_LLAMA_SRC") or None,
                    help="an ik_llama.cpp checkout (AMBER_IK_LLAMA_SRC); without it only mainline runs")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--long", action="store_true",
                    help="also an 8,000-token prefill and decode at depth 4k / 8k (135m)")
    ap.add_argument("--write", action="store_true", help=f"write {PAGE.relative_to(common.REPO)} and its JSON")
    ap.add_argument("--render", action="store_true", help=f"only render {RESULTS.name} again (with --write: the page)")
    ap.add_argument("--merge", action="store_true",
                    help=f"keep {RESULTS.name}'s other models: this run's replace those it measured again")
    a = ap.parse_args(argv)
    if a.render:
        res = json.loads(RESULTS.read_text())
    else:
        try:
            res = run([s for s in a.shapes.split(",") if s], a.ik_source, a.rounds, a.long)
        except llama_tools.ToolsError as exc:
            print(f"peers: {exc}", file=sys.stderr)
            return 2
        if a.merge and RESULTS.is_file():
            res = merge(json.loads(RESULTS.read_text()), res)
    text = render(res)
    print(text)
    if a.write:
        common.write_page(PAGE, text)
        if not a.render:
            common.write_page(RESULTS, json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
