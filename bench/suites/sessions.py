"""Pinned-session benchmark: resuming a saved chat against re-prefilling it.

1. A build process makes pinned sessions of 512 / 2048 / 4096 tokens of random-ish text
   (generate, pin, wait_for_saves, shutdown), each with its own text so no blocks are shared.
2. For each, fresh processes open the session and generate 1 token (the prompt is the saved
   history plus the token generated when it was built, so exactly 1 token is prefilled):
     cold — every file of the state directory dropped from the page cache first
            (posix_fadvise DONTNEED, checked with fincore);
     warm — the files read once first, so they are in the page cache.
   Time to first token = `open()` + the stream until its first event, measured around the
   calls (the figures' own `ttft_ms` starts after the KV is loaded; `resume_ms` is the load).
3. Re-prefill: the same prompt in a temporary session (a fresh process, nothing reused).
4. The physical limit: the session's KV bytes on disk ÷ the measured sequential read bandwidth
   of the same file system (a 256 MiB file, cold and warm).
5. Save time per turn: for a pinned session of 256 … 4096 tokens, a 32-token turn is added and
   `disk.save_async` + `wait_for_saves` timed (4 turns per length: three write only the tail, the
   fourth completes a 128-token block).
Both processes warm ONNX Runtime up first on a throwaway session (a 16-token prompt), so the
comparison is resume vs prefill, not first-run costs of the runtime.

Targets: resuming 2048 tokens ≥ 50× faster than re-prefill, and within 1.5× of the
read-bandwidth limit (compared on the KV load time, `resume_ms`; the TTFT adds one decode step).
"""
from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.harness import common
from bench.harness.common import Section, median, ok, table

SIZES = (512, 2048, 4096)
SAVE_LENGTHS = (256, 512, 1024, 2048, 4096)
TURN_TOKENS = 32
SAVE_TURNS = 4
TARGET_SPEEDUP = 50.0
TARGET_LIMIT = 1.5


# ---- workers --------------------------------------------------------------------------------------
def _manager(model_dir: str, state_dir: str, threads: int, kv_store: str = "model") -> Any:
    from engine.runtime.model import load_model
    from engine.sessions.manager import SessionManager
    model = load_model(model_dir, "cpu", threads)
    t0 = time.perf_counter()
    mgr = SessionManager(model, state_dir, kv_store=kv_store)
    return mgr, time.perf_counter() - t0


def _warm_up(mgr: Any) -> None:
    """One throwaway generation so ORT's first-run costs are out of the timed part."""
    from engine.api import SamplingParams, SessionKind
    from engine.generation.generate import collect
    sid = str(uuid.uuid4())
    mgr.open(sid, kind=SessionKind.TEMPORARY)
    collect(mgr.generate_tokens(sid, [1] + list(range(2000, 2015)), SamplingParams(greedy=True, max_new_tokens=2)))
    mgr.close(sid)


def _first_token(mgr: Any, sid: str, prompt: list[int], kind: Any = None) -> dict[str, Any]:
    """open() + the stream to its first event (TTFT); stops at the result without resuming the
    stream, so the session's end-of-turn save never runs and the state stays as it was."""
    from engine.api import GenerationResult, SamplingParams
    t0 = time.perf_counter()
    mgr.open(sid, kind=kind)
    t_open = time.perf_counter()
    events = mgr.generate_tokens(sid, prompt, SamplingParams(greedy=True, max_new_tokens=1))
    first = next(events)
    t_first = time.perf_counter()
    result = first
    while not isinstance(result, GenerationResult):
        result = next(events)
    f = result.figures
    return {"ttft_s": t_first - t0, "open_s": t_open - t0, "resume_ms": f.resume_ms, "figures_ttft_ms": f.ttft_ms,
            "prefill_ms": f.prefill_ms, "resume": f.resume, "reused": f.reused_tokens,
            "prefilled": f.prefilled_tokens, "fallback_reason": f.fallback_reason, "token": result.token_ids}


def worker_build(model_dir: str, state_dir: str, threads: int, histories: dict[str, str],
                 kv_store: str = "model") -> dict[str, Any]:
    """Pinned sessions, one per history file; returns their ids, sizes and the next token."""
    from engine.api import SamplingParams
    from engine.generation.generate import collect
    mgr, _ = _manager(model_dir, state_dir, threads, kv_store)
    out: dict[str, Any] = {}
    for name, path in histories.items():
        ids = json.loads(Path(path).read_text())
        sid = str(uuid.uuid4())
        mgr.open(sid)
        t0 = time.perf_counter()
        res = collect(mgr.generate_tokens(sid, ids, SamplingParams(greedy=True, max_new_tokens=1)))
        build_s = time.perf_counter() - t0
        mgr.pin(sid)
        assert mgr.wait_for_saves(120)
        info = mgr.info(sid)
        out[name] = {"session_id": sid, "tokens": info.tokens, "kv_bytes_disk": info.kv_bytes_disk,
                     "next_token": res.token_ids[0], "build_s": build_s, "prefill_ms": res.figures.prefill_ms,
                     "save_error": info.save_error}
    mgr.shutdown()
    out["kv_bytes_per_token"] = mgr.model.kv.bytes_per_token
    return out


def worker_resume(model_dir: str, state_dir: str, threads: int, session_id: str, prompt_file: str,
                  kv_store: str = "model") -> dict[str, Any]:
    mgr, manager_s = _manager(model_dir, state_dir, threads, kv_store)
    _warm_up(mgr)
    r = _first_token(mgr, session_id, json.loads(Path(prompt_file).read_text()))
    r["manager_s"] = manager_s
    return r


def worker_f16_error(model_dir: str, threads: int, lossless: dict[str, str], half: dict[str, str],
                     prompt_file: str, steps: int) -> dict[str, Any]:
    """The float16 store's error: the same history resumed from a lossless and from a float16 store,
    then `steps` teacher-forced steps (the lossless run's greedy tokens) on both caches."""
    import numpy as np
    from engine.api import SamplingParams
    from engine.generation.generate import collect
    prompt = json.loads(Path(prompt_file).read_text())
    caches, mgrs = [], []
    for spec, kv_store in ((lossless, "model"), (half, "float16")):
        mgr, _ = _manager(model_dir, spec["state_dir"], threads, kv_store)
        mgr.open(spec["session_id"])
        r = collect(mgr.generate_tokens(spec["session_id"], prompt, SamplingParams(greedy=True, max_new_tokens=1)))
        assert r.figures.resume == "disk", r.figures
        caches.append(mgr._open[spec["session_id"]].cache)
        mgrs.append(mgr)
    n = len(caches[0])
    loaded = len(caches[0]) - 1          # the last position was computed on top of the loaded ones
    kv_a, kv_b = caches[0].export(0, loaded), caches[1].export(0, loaded)
    runners = [m.generator.runner for m in mgrs]     # a cache's binding belongs to its manager's session
    tok, max_dlogit, kls, agree = prompt[-1], 0.0, [], 0
    caches[0].truncate(n - 1)
    caches[1].truncate(n - 1)
    for _ in range(steps):
        la, lb = (r.forward(c, [tok]).astype(np.float64) for r, c in zip(runners, caches, strict=True))
        pa, pb = (np.exp(x - x.max()) / np.exp(x - x.max()).sum() for x in (la, lb))
        max_dlogit = max(max_dlogit, float(np.abs(la - lb).max()))
        kls.append(float((pa * (np.log(pa + 1e-30) - np.log(pb + 1e-30))).sum()))
        agree += int(la.argmax() == lb.argmax())
        tok = int(la.argmax())
    return {"kv_max_abs_diff": float(np.abs(kv_a - kv_b).max()), "kv_max_abs": float(np.abs(kv_a).max()),
            "max_dlogit": max_dlogit, "mean_kl": float(np.mean(kls)), "top1_agree": agree, "steps": steps}


def worker_reprefill(model_dir: str, state_dir: str, threads: int, prompt_file: str, runs: int) -> dict[str, Any]:
    from engine.api import SessionKind
    mgr, _ = _manager(model_dir, state_dir, threads)
    _warm_up(mgr)
    prompt = json.loads(Path(prompt_file).read_text())
    out = []
    for _ in range(runs):
        sid = str(uuid.uuid4())
        out.append(_first_token(mgr, sid, prompt, kind=SessionKind.TEMPORARY))
        mgr.close(sid)
    return {"runs": out}


def worker_saves(model_dir: str, state_dir: str, threads: int, tokens_file: str, lengths: list[int],
                 turn_tokens: int, turns: int) -> dict[str, Any]:
    """Save time of a `turn_tokens` turn at growing history lengths (one pinned session)."""
    from engine.api import SessionKind
    mgr, _ = _manager(model_dir, state_dir, threads)
    ids = json.loads(Path(tokens_file).read_text())
    sid = str(uuid.uuid4())
    mgr.open(sid, kind=SessionKind.PINNED)
    s = mgr._get(sid)
    s.cache = mgr.generator.new_cache()
    runner = mgr.generator.runner
    out: dict[str, Any] = {}
    for length in lengths:
        runner.forward(s.cache, ids[len(s.cache):length])
        mgr.disk.save_async(s)
        assert mgr.wait_for_saves(120)
        snap, total = [], []
        for _ in range(turns):
            n = len(s.cache)
            runner.forward(s.cache, ids[n:n + turn_tokens])
            t0 = time.perf_counter()
            mgr.disk.save_async(s)
            t1 = time.perf_counter()
            assert mgr.wait_for_saves(120)
            t2 = time.perf_counter()
            snap.append(t1 - t0)
            total.append(t2 - t0)
            if s.save_error:
                raise RuntimeError(s.save_error)
        out[str(length)] = {"snapshot_s": snap, "total_s": total}
    mgr.shutdown()
    return out


# ---- the bench ------------------------------------------------------------------------------------
def _state_files(state: Path) -> list[Path]:
    return [p for p in common.files_under(state) if p.suffix in (".kvb", ".kvt", ".json")]


def run(quick: bool = False) -> dict[str, Any]:
    from bench.suites import engine as bench_engine
    # Resume runs are single fresh processes, and on this VM one now and then pays for faulting in
    # memory the host has reclaimed (150-280 ms): medians of 5, so two such runs cannot move them.
    runs = 2 if quick else 5
    sizes = (512, 1024) if quick else SIZES
    save_lengths = (256, 1024) if quick else SAVE_LENGTHS
    load_before = common.load_average()
    mdir = str(bench_engine.model_dir())
    threads = common.THREADS
    home = bench_engine.test_home()
    home.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"quick": quick, "threads": threads, "sizes": {}}
    with tempfile.TemporaryDirectory(prefix="bench-sessions-", dir=home) as tmp_s:
        tmp = Path(tmp_s)
        state = tmp / "state"
        bw = common.read_bandwidth(tmp, size=(64 if quick else 256) << 20, runs=runs)
        results["bandwidth"] = bw
        print(f"sessions: sequential read bandwidth {bw['cold_bytes_per_s'] / 1e6:.0f} MB/s cold, "
              f"{bw['warm_bytes_per_s'] / 1e6:.0f} MB/s warm (page cache)", flush=True)

        histories, prompts = {}, {}
        for i, n in enumerate(sizes):
            ids = bench_engine.token_ids(n, seed=100 + i)
            histories[str(n)] = tmp / f"history-{n}.json"
            histories[str(n)].write_text(json.dumps(ids))
        built = common.run_worker("bench.suites.sessions", "worker_build", {
            "model_dir": mdir, "state_dir": str(state), "threads": threads,
            "histories": {k: str(v) for k, v in histories.items()}}, timeout=1200).data
        results["kv_bytes_per_token"] = built.pop("kv_bytes_per_token")
        for n in map(str, sizes):
            b = built[n]
            ids = json.loads(histories[n].read_text())
            prompts[n] = tmp / f"prompt-{n}.json"
            prompts[n].write_text(json.dumps(ids + [b["next_token"]]))
            print(f"sessions: pinned {b['tokens']} tokens, {b['kv_bytes_disk']:,} bytes on disk "
                  f"({b['kv_bytes_disk'] / b['tokens']:,.0f} B/token)", flush=True)

        files = _state_files(state)
        for n in map(str, sizes):
            b = built[n]
            entry: dict[str, Any] = {"tokens": b["tokens"], "kv_bytes_disk": b["kv_bytes_disk"]}
            args = {"model_dir": mdir, "state_dir": str(state), "threads": threads,
                    "session_id": b["session_id"], "prompt_file": str(prompts[n])}
            for mode in ("cold", "warm"):
                rs, resident = [], []
                common.run_worker("bench.suites.sessions", "worker_resume", args)   # warm-up process
                for _ in range(runs):
                    if mode == "cold":
                        common.drop_from_page_cache(files)
                    else:
                        for f in files:
                            common.read_file_seconds(f)
                    resident.append(common.resident_bytes(files))
                    rs.append(common.run_worker("bench.suites.sessions", "worker_resume", args).data)
                bad = [r for r in rs if r["resume"] != "disk" or r["prefilled"] != 1]
                if bad:
                    raise RuntimeError(f"resume of {n} tokens did not come from disk: {bad[0]}")
                entry[mode] = {"ttft_ms": median(r["ttft_s"] for r in rs) * 1000,
                               "resume_ms": median(r["resume_ms"] for r in rs),
                               "open_ms": median(r["open_s"] for r in rs) * 1000,
                               "figures_ttft_ms": median(r["figures_ttft_ms"] for r in rs),
                               "ttft_runs_ms": [r["ttft_s"] * 1000 for r in rs],
                               "resident_before_bytes": resident}
            rp = common.run_worker("bench.suites.sessions", "worker_reprefill", {
                "model_dir": mdir, "state_dir": str(tmp / f"state-temp-{n}"), "threads": threads,
                "prompt_file": str(prompts[n]), "runs": runs}, timeout=1200).data["runs"]
            entry["reprefill_ttft_ms"] = median(r["ttft_s"] for r in rp) * 1000
            entry["reprefill_runs_ms"] = [r["ttft_s"] * 1000 for r in rp]
            entry["speedup_cold"] = entry["reprefill_ttft_ms"] / entry["cold"]["ttft_ms"]
            entry["speedup_warm"] = entry["reprefill_ttft_ms"] / entry["warm"]["ttft_ms"]
            entry["limit_cold_ms"] = b["kv_bytes_disk"] / bw["cold_bytes_per_s"] * 1000
            entry["limit_warm_ms"] = b["kv_bytes_disk"] / bw["warm_bytes_per_s"] * 1000
            entry["load_vs_limit_cold"] = entry["cold"]["resume_ms"] / entry["limit_cold_ms"]
            entry["load_vs_limit_warm"] = entry["warm"]["resume_ms"] / entry["limit_warm_ms"]
            results["sizes"][n] = entry
            print(f"sessions: {n:>4} tokens: resume TTFT {entry['cold']['ttft_ms']:.0f} ms cold "
                  f"(KV load {entry['cold']['resume_ms']:.0f} ms, limit {entry['limit_cold_ms']:.0f} ms), "
                  f"{entry['warm']['ttft_ms']:.0f} ms warm (load {entry['warm']['resume_ms']:.0f} ms, limit "
                  f"{entry['limit_warm_ms']:.0f} ms); re-prefill {entry['reprefill_ttft_ms']:.0f} ms "
                  f"-> {entry['speedup_cold']:.1f}x cold, {entry['speedup_warm']:.1f}x warm", flush=True)

        # The optional float16 store, on the 2048-token history: size, resume time and error.
        fn = "2048" if "2048" in histories else max(histories, key=int)
        f16_state = tmp / "state-f16"
        fb = common.run_worker("bench.suites.sessions", "worker_build", {
            "model_dir": mdir, "state_dir": str(f16_state), "threads": threads,
            "histories": {fn: str(histories[fn])}, "kv_store": "float16"}, timeout=1200).data[fn]
        f16_files = _state_files(f16_state)
        fargs = {"model_dir": mdir, "state_dir": str(f16_state), "threads": threads,
                 "session_id": fb["session_id"], "prompt_file": str(prompts[fn]), "kv_store": "float16"}
        common.run_worker("bench.suites.sessions", "worker_resume", fargs)
        frs = []
        for _ in range(runs):
            common.drop_from_page_cache(f16_files)
            frs.append(common.run_worker("bench.suites.sessions", "worker_resume", fargs).data)
        err = common.run_worker("bench.suites.sessions", "worker_f16_error", {
            "model_dir": mdir, "threads": threads, "prompt_file": str(prompts[fn]), "steps": 32,
            "lossless": {"state_dir": str(state), "session_id": built[fn]["session_id"]},
            "half": {"state_dir": str(f16_state), "session_id": fb["session_id"]}}, timeout=1200).data
        results["float16_store"] = {
            "tokens": fb["tokens"], "kv_bytes_disk": fb["kv_bytes_disk"],
            "lossless_kv_bytes_disk": built[fn]["kv_bytes_disk"],
            "cold_ttft_ms": median(r["ttft_s"] for r in frs) * 1000,
            "cold_resume_ms": median(r["resume_ms"] for r in frs),
            "lossless_cold_ttft_ms": results["sizes"][fn]["cold"]["ttft_ms"], **err}
        f = results["float16_store"]
        print(f"sessions: float16 store, {fn} tokens: {f['kv_bytes_disk'] / 2**20:.1f} MiB on disk "
              f"(lossless {f['lossless_kv_bytes_disk'] / 2**20:.1f}), cold TTFT {f['cold_ttft_ms']:.0f} ms "
              f"(load {f['cold_resume_ms']:.0f} ms; lossless {f['lossless_cold_ttft_ms']:.0f} ms); KV max |Δ| "
              f"{f['kv_max_abs_diff']:.2e} (max |KV| {f['kv_max_abs']:.1f}); over {f['steps']} steps: max |Δ logit| "
              f"{f['max_dlogit']:.2e}, mean KL {f['mean_kl']:.2e}, top-1 agreement {f['top1_agree']}/{f['steps']}",
              flush=True)

        shutil.rmtree(state, ignore_errors=True)
        tokens_file = tmp / "save-history.json"
        tokens_file.write_text(json.dumps(bench_engine.token_ids(max(save_lengths) + SAVE_TURNS * TURN_TOKENS, seed=7)))
        saves = common.run_worker("bench.suites.sessions", "worker_saves", {
            "model_dir": mdir, "state_dir": str(tmp / "state-saves"), "threads": threads,
            "tokens_file": str(tokens_file), "lengths": list(save_lengths), "turn_tokens": TURN_TOKENS,
            "turns": SAVE_TURNS}, timeout=1200).data
        results["saves"] = {}
        for length, v in saves.items():
            results["saves"][length] = {"total_ms": median(v["total_s"]) * 1000,
                                        "max_ms": max(v["total_s"]) * 1000,
                                        "snapshot_ms": median(v["snapshot_s"]) * 1000,
                                        "runs_ms": [x * 1000 for x in v["total_s"]]}
            s = results["saves"][length]
            print(f"sessions: save of a {TURN_TOKENS}-token turn at {length:>4} tokens: {s['total_ms']:.1f} ms "
                  f"(max {s['max_ms']:.1f}; snapshot on the generating thread {s['snapshot_ms']:.2f} ms)", flush=True)

    target_n = "2048" if "2048" in results["sizes"] else None
    if target_n:
        e = results["sizes"][target_n]
        results["targets"] = {
            "speedup_2048": {"value": e["speedup_cold"], "target": TARGET_SPEEDUP,
                             "met": e["speedup_cold"] >= TARGET_SPEEDUP},
            "limit_2048": {"value": e["load_vs_limit_cold"], "target": TARGET_LIMIT,
                           "met": e["load_vs_limit_cold"] <= TARGET_LIMIT},
        }
        for k, v in results["targets"].items():
            print(f"sessions: target {k}: {v['value']:.2f} (target {'≥' if k.startswith('speed') else '≤'} "
                  f"{v['target']}) {ok(v['met'])}", flush=True)
    results["load_before"] = load_before
    results["facts"] = common.machine_facts()
    return results


def section(res: dict[str, Any]) -> Section:
    bw = res["bandwidth"]
    rows = []
    for n, e in res["sizes"].items():
        rows.append([f"{n}", f"{e['kv_bytes_disk'] / 2**20:.1f} MiB",
                     f"{e['cold']['ttft_ms']:.0f} ms", f"{e['cold']['resume_ms']:.0f} ms",
                     f"{e['limit_cold_ms']:.0f} ms",
                     f"{e['warm']['ttft_ms']:.0f} ms", f"{e['warm']['resume_ms']:.0f} ms",
                     f"{e['limit_warm_ms']:.0f} ms",
                     f"{e['reprefill_ttft_ms']:.0f} ms", f"{e['speedup_cold']:.1f}× / {e['speedup_warm']:.1f}×"])
    body = [
        "A pinned chat of N tokens (random-ish text) is built and saved by one process; fresh processes "
        "then open it and generate 1 token (TTFT = `open()` + stream to the first token; `resume_ms` is the "
        "KV load inside it). *Cold*: the state files dropped from the page cache first; *warm*: read once "
        "first. Re-prefill: the same prompt in a temporary session in a fresh process. The limit is the KV "
        f"bytes on disk ÷ the read bandwidth measured on the same file system ({bw['cold_bytes_per_s'] / 1e6:.0f} MB/s "
        f"cold, {bw['warm_bytes_per_s'] / 1e6:.0f} MB/s from the page cache; {bw['file_bytes'] >> 20} MiB file). "
        "Both kinds of worker warm ONNX Runtime up on a throwaway 16-token session first. Medians of "
        f"{len(next(iter(res['sizes'].values()))['cold']['ttft_runs_ms'])} runs after a warm-up run.",
        "",
        table(["History (tokens)", "KV on disk", "Resume TTFT cold", "KV load cold", "Limit cold",
               "Resume TTFT warm", "KV load warm", "Limit warm", "Re-prefill TTFT", "Speed-up cold / warm"], rows),
        "",
        f"KV per token: {res['kv_bytes_per_token']:,} B in memory (float32); on disk "
        + ", ".join(f"{e['kv_bytes_disk'] / e['tokens']:,.0f} B/token at {n}" for n, e in res["sizes"].items())
        + " (file headers hold the token ids).",
        "",
    ]
    t = res.get("targets")
    if t:
        e = res["sizes"]["2048"]
        body += [table(["Figure", "Measured", "Target", ""], [
            ["Resume 2048 tokens vs re-prefill (cold TTFT)", f"{t['speedup_2048']['value']:.1f}× faster",
             f"≥ {TARGET_SPEEDUP:.0f}×", ok(t["speedup_2048"]["met"])],
            ["KV load of 2048 tokens vs the read-bandwidth limit (cold)",
             f"{t['limit_2048']['value']:.2f}× the limit ({e['cold']['resume_ms']:.0f} vs {e['limit_cold_ms']:.0f} ms)",
             f"≤ {TARGET_LIMIT}×", ok(t["limit_2048"]["met"])],
            ["Same, whole resume TTFT vs the limit (cold)",
             f"{e['cold']['ttft_ms'] / e['limit_cold_ms']:.2f}×", "", ""],
        ]), ""]
    f = res.get("float16_store")
    if f:
        body += [f"The optional float16 KV store (`kv_store=\"float16\"`, `--kv-store float16`, a GUI setting) on "
                 f"the same {f['tokens']}-token history: {f['kv_bytes_disk'] / 2**20:.1f} MiB on disk against "
                 f"{f['lossless_kv_bytes_disk'] / 2**20:.1f} MiB lossless; cold resume TTFT {f['cold_ttft_ms']:.0f} ms "
                 f"(KV load {f['cold_resume_ms']:.0f} ms) against {f['lossless_cold_ttft_ms']:.0f} ms. Its error, "
                 f"resumed from both stores in one process: loaded KV max |Δ| {f['kv_max_abs_diff']:.2e} (largest |KV| "
                 f"{f['kv_max_abs']:.1f}: float16 rounding); over {f['steps']} teacher-forced steps "
                 f"max |Δ logit| {f['max_dlogit']:.2e}, "
                 f"mean KL {f['mean_kl']:.2e}, same top-1 token {f['top1_agree']}/{f['steps']}.", ""]
    srows = [[length, f"{s['total_ms']:.1f} ms", f"{s['max_ms']:.1f} ms", f"{s['snapshot_ms']:.2f} ms"]
             for length, s in res["saves"].items()]
    body += [f"Save time of a {TURN_TOKENS}-token turn (`disk.save_async` + `wait_for_saves`, fsync included) against "
             f"the history length; median of {SAVE_TURNS} turns (three rewrite the private tail, one also writes "
             "a new 128-token block: the max column). It should stay flat.", "",
             table(["History (tokens)", "Save (median)", "Save (max)", "Snapshot on the generating thread"], srows),
             "", common.facts_line(res["facts"], res.get("load_before"),
                                   "QUICK RUN (smaller sizes): validation only." if res.get("quick") else "")]
    return Section("sessions", "Pinned sessions: resume vs re-prefill", "\n".join(body),
                   common.ORDER["sessions"])


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv), indent=1, default=str))
