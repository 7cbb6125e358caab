"""`python -m bench.experiments.decode_after_long_prompt [--models DIR,...] [--rounds N] [--steps N] [--paste N]`:
decode right after a long prompt.

`--paste N` (e.g. 8000) instead: a user pasting N tokens into a chat, in one fresh process per
model: the model loaded, a user message of real-looking text (common.pseudo_text) that the model's
chat template makes about N tokens, streamed through `Generator.stream` as a chat session does (time
to the first token, prefill wall and process CPU seconds), then `--steps` greedy decode steps at
context N and, the cache truncated, at N / 2 (wall and CPU ms a step). Prints one line per figure
with the load average.

Why bench compare's worker (bench.suites.shapes.worker_amber) saw Amber's decode at context 100, measured
right after the 2048-token prefills, slower than at context 1000 (0.5B shapes, ONNX Runtime
spinning). Each process does what that worker does — a prefill "history" (`long`: 512, 512, 2048
tokens; `none`: nothing), then a context of 100 and one of 1000, each a fresh cache reserved for
the reply, its prompt prefilled, `steps` decode steps through `Runner.forward` and the greedy
`Sampler` — and records for every decode step: wall time, CPU time of the whole process and of
each of its threads, minor/major page faults, voluntary/involuntary context switches. History ×
spinning (ORT default, off) run as interleaved fresh processes with the bench's malloc tunable
(common.run_worker), `rounds` times. Prints one table per model; writes nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import time
from pathlib import Path
from typing import Any

from bench.harness import common
from bench.harness.common import median

HISTORIES = {"long": (512, 512, 2048), "none": ()}
CONTEXTS = (100, 1000)


def _thread_cpu_ms() -> dict[str, float]:
    """CPU ms (user + system) of each thread of this process, by thread id."""
    out: dict[str, float] = {}
    tick = 1000.0 / os.sysconf("SC_CLK_TCK")
    for tid in os.listdir("/proc/self/task"):
        try:
            stat = Path(f"/proc/self/task/{tid}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        out[tid] = (int(fields[11]) + int(fields[12])) * tick
    return out


def _machine_ms() -> tuple[float, float]:
    """(busy, steal) CPU ms of the whole machine so far, all CPUs, from /proc/stat: busy is every
    state but idle and iowait (so it counts other processes too); steal is time the hypervisor ran
    something else while a vCPU wanted to run."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    tick = 1000.0 / os.sysconf("SC_CLK_TCK")
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    steal = fields[7] if len(fields) > 7 else 0
    return (sum(fields[:8]) - idle) * tick, steal * tick


def worker(model_dir: str, threads: int, history: str, spinning: bool | None, steps: int,
           contexts: tuple[int, ...] | list[int] = CONTEXTS, sizes: list[int] | None = None) -> dict[str, Any]:
    """One process: the prefill history (`sizes` overrides HISTORIES[history]), then per-step figures
    of the decodes at each context."""
    import numpy as np

    if spinning is not None:    # an experiment, as bench.suites.shapes' "Amber, ORT spinning off"
        from bench.suites.shapes import force_spinning
        force_spinning(spinning)

    from engine.api import SamplingParams
    from engine.generation.generate import Generator
    from engine.runtime.model import load_model
    from engine.text.sampling import Sampler, resolve_sampling
    model = load_model(model_dir, "cpu", threads)
    runner = Generator(model).runner
    sampler = Sampler(resolve_sampling(SamplingParams(greedy=True), model.generation_config))
    vocab = int(model.config.get("vocab_size") or 32000)
    lo = min(300, vocab // 2)     # random ids as bench.suites.shapes draws them, inside a small vocabulary too
    ids = [int(x) for x in np.random.default_rng(0).integers(lo, max(lo + 1, vocab - 10), 2100)]
    out: dict[str, Any] = {"history": [], "phases": {}}
    for n in (HISTORIES[history] if sizes is None else sizes):
        cache = runner.new_cache()
        start = time.perf_counter()
        runner.forward(cache, ids[:n])
        out["history"].append(n / (time.perf_counter() - start))
    for ctx in contexts:
        cache = runner.new_cache()
        cache.reserve(ctx + steps + 8)      # as Generator.stream does
        history_ids = np.empty(ctx + steps + 16, dtype=np.int64)
        history_ids[:ctx] = ids[:ctx]
        logits = runner.forward(cache, ids[:ctx])
        n = ctx
        tok = sampler.sample(logits, history_ids[:n])
        rows = []
        load = os.getloadavg()[0]
        m0, own0 = _machine_ms(), resource.getrusage(resource.RUSAGE_SELF)
        for _ in range(steps):
            r0, c0, t0 = resource.getrusage(resource.RUSAGE_SELF), _thread_cpu_ms(), time.perf_counter()
            history_ids[n] = tok
            n += 1
            logits = runner.forward(cache, [tok])
            tok = sampler.sample(logits, history_ids[:n])
            t1, c1, r1 = time.perf_counter(), _thread_cpu_ms(), resource.getrusage(resource.RUSAGE_SELF)
            busy = sorted((c1[t] - c0.get(t, 0.0) for t in c1), reverse=True)     # ms, busiest first
            rows.append({"ms": (t1 - t0) * 1e3,
                         "cpu_ms": (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) * 1e3,
                         "thread_cpu_ms": busy[:3], "minflt": r1.ru_minflt - r0.ru_minflt,
                         "majflt": r1.ru_majflt - r0.ru_majflt, "nvcsw": r1.ru_nvcsw - r0.ru_nvcsw,
                         "nivcsw": r1.ru_nivcsw - r0.ru_nivcsw})
        m1, own1 = _machine_ms(), resource.getrusage(resource.RUSAGE_SELF)
        own_ms = (own1.ru_utime + own1.ru_stime - own0.ru_utime - own0.ru_stime) * 1e3
        # What else ran on the machine during this phase: is "quiet" quiet while it decodes?
        out["phases"][str(ctx)] = {"steps": rows, "load": load, "others_cpu_ms": max(0.0, m1[0] - m0[0] - own_ms),
                                   "steal_ms": m1[1] - m0[1]}
    return out


def summary(runs: list[dict[str, Any]], ctx: str) -> dict[str, float]:
    """One configuration's processes at one context: medians (steps 9+ for the warm figures)."""
    phases = [r["phases"][ctx] for r in runs]
    steps = [p["steps"] for p in phases]
    first = [s[0] for s in steps]
    rest = [row for s in steps for row in s[8:]]
    return {"first_ms": median(r["ms"] for r in first), "first_minflt": median(r["minflt"] for r in first),
            "warm_ms": median(r["ms"] for r in rest), "warm_cpu_ms": median(r["cpu_ms"] for r in rest),
            "tok_s": median(len(s) / (sum(r["ms"] for r in s) / 1e3) for s in steps),
            "minflt_per_step": median(r["minflt"] for r in rest),
            "nivcsw_per_step": median(r["nivcsw"] for r in rest),
            "load": median(r["phases"][ctx]["load"] for r in runs),
            "others_ms_per_step": median(p["others_cpu_ms"] / len(p["steps"]) for p in phases),
            "steal_ms_per_step": median(p["steal_ms"] / len(p["steps"]) for p in phases)}


def phase_figures(data: dict[str, Any]) -> dict[str, tuple[float, float]]:
    """One process's (tok/s, other processes' CPU ms a step) at each context."""
    out = {}
    for ctx, ph in data["phases"].items():
        steps = ph["steps"]
        out[ctx] = (len(steps) / (sum(r["ms"] for r in steps) / 1e3), ph["others_cpu_ms"] / len(steps))
    return out


def run(models: list[str], rounds: int, steps: int) -> tuple[dict[str, Any], list[list[str]]]:
    """Summaries per model and configuration, and one row per process in the order they ran."""
    configs = [(h, s) for s in (None, False) for h in HISTORIES]
    results: dict[str, Any] = {}
    processes: list[list[str]] = []
    for model in models:
        per: dict[str, list[dict[str, Any]]] = {f"{h}/{'default' if s is None else 'off'}": [] for h, s in configs}
        for _ in range(rounds):
            for h, s in configs:   # interleaved fresh processes
                r = common.run_worker("bench.experiments.decode_after_long_prompt", "worker",
                                      {"model_dir": model, "threads": common.THREADS, "history": h,
                                       "spinning": s, "steps": steps}, timeout=1800)
                per[f"{h}/{'default' if s is None else 'off'}"].append(r.data)
                processes.append([Path(model).name, f"{h}/{'default' if s is None else 'off'}"]
                                 + [f"{v[0]:.1f} ({v[1]:.1f})" for v in phase_figures(r.data).values()])
        results[model] = {k: {ctx: summary(v, ctx) for ctx in map(str, CONTEXTS)} for k, v in per.items()}
    return results, processes


def paste(model_dir: str, threads: int, tokens: int, steps: int) -> dict[str, Any]:
    """One process: a user message of about `tokens` tokens of real-looking text, through the model's
    chat template, streamed as a chat session streams it; then decode at its length and half of it."""
    import numpy as np

    from engine.api import SamplingParams
    from engine.generation.generate import Generator, collect
    from engine.runtime.model import load_model
    t0 = time.perf_counter()
    gen = Generator(load_model(model_dir, "cpu", threads))
    load_s = time.perf_counter() - t0

    def chat(words: int) -> list[int]:
        return gen.encode_chat([{"role": "user", "content": common.pseudo_text(words, 0)}])
    ids = chat(tokens)
    ids = chat(max(1, int(tokens * tokens / max(len(ids), 1))))      # words scaled to about `tokens`
    out: dict[str, Any] = {"load_s": load_s, "tokens": len(ids), "decode": {}}
    cache = gen.new_cache()
    c0, w0 = time.process_time(), time.perf_counter()
    res = collect(gen.stream(cache, ids, SamplingParams(greedy=True, max_new_tokens=1)))
    out.update(ttft_s=res.figures.ttft_ms / 1000, prefill_s=res.figures.prefill_ms / 1000,
               wall_s=time.perf_counter() - w0, cpu_s=time.process_time() - c0, load=os.getloadavg()[0])
    for ctx in (len(ids), len(ids) // 2):
        cache.truncate(ctx)
        tok = int(np.argmax(gen.runner.forward(cache, [ids[-1]])))    # warm-up step
        c0, w0 = time.process_time(), time.perf_counter()
        for _ in range(steps):
            tok = int(np.argmax(gen.runner.forward(cache, [tok])))
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        out["decode"][str(ctx)] = {"tok_s": steps / wall, "ms": 1000 * wall / steps, "cpu_ms": 1000 * cpu / steps,
                                   "load": os.getloadavg()[0]}
    return out


def table(results: dict[str, Any]) -> str:
    lines = []
    for model, per in results.items():
        lines += [f"**{Path(model).name}**", "",
                  "| history / ORT spinning | context | tok/s | first step ms | first step minor faults "
                  "| steps 9+: ms | CPU ms | minor faults | involuntary switches | others' CPU ms a step "
                  "| steal ms a step | load |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for key, by_ctx in per.items():
            for ctx, s in by_ctx.items():
                lines.append(f"| {key} | {ctx} | {s['tok_s']:.1f} | {s['first_ms']:.1f} | {s['first_minflt']:.0f} "
                             f"| {s['warm_ms']:.1f} | {s['warm_cpu_ms']:.1f} | {s['minflt_per_step']:.0f} "
                             f"| {s['nivcsw_per_step']:.0f} | {s['others_ms_per_step']:.1f} "
                             f"| {s['steal_ms_per_step']:.1f} | {s['load']:.1f} |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="", help="converted model folders, comma-separated (default: the "
                    "default model; the 0.5B shapes: bench compare --shapes 0.5b converts them)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--paste", type=int, default=0, help="tokens of a pasted prompt: time to the first token "
                    "and decode at that context and half of it (see above)")
    ap.add_argument("--json", help="also write the raw figures here")
    args = ap.parse_args()
    from bench.suites.engine import model_dir
    if args.paste:
        load_before = common.load_average()
        for m in [m for m in args.models.split(",") if m] or [str(model_dir())]:
            r = common.run_worker("bench.experiments.decode_after_long_prompt", "paste",
                                  {"model_dir": m, "threads": common.THREADS, "tokens": args.paste,
                                   "steps": args.steps}, timeout=1800).data
            print(f"{Path(m).name}: {r['tokens']}-token paste: first token {r['ttft_s']:.2f} s (prefill "
                  f"{r['prefill_s']:.2f} s wall, {r['cpu_s']:.2f} CPU s, {r['tokens'] / r['prefill_s']:.0f} tok/s; "
                  f"load {r['load']:.2f})")
            for ctx, d in r["decode"].items():
                print(f"  decode at context {ctx}: {d['tok_s']:.1f} tok/s ({d['ms']:.1f} ms a step, "
                      f"{d['cpu_ms']:.1f} CPU ms; load {d['load']:.2f})")
            if args.json:
                Path(args.json).write_text(json.dumps(r, indent=1))
        print(common.facts_line(common.machine_facts(), load_before))
        return
    res, processes = run([m for m in args.models.split(",") if m] or [str(model_dir())], args.rounds, args.steps)
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": res, "processes": processes}, indent=1))
    print(common.facts_line(common.machine_facts(), common.load_average()))
    print(table(res))
    # Medians mix a process that had the machine to itself with one that shared it: each process,
    # as tok/s (other processes' CPU ms a step) per context.
    print("| model | history / ORT spinning | " + " | ".join(f"context {c}" for c in CONTEXTS) + " |")
    print("|---|---|" + "---|" * len(CONTEXTS))
    for row in processes:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
