"""Shared prefix cache benchmark.

1. Time to first token for a new chat whose ~1,000-token system prompt is already cached —
   in the memory tier (same process, after another chat with that prompt), in the disk tier
   (a fresh process over the state left by the first one), and cold (nothing cached).
2. Janitor overhead: decode tokens/s with and without janitor passes running back to back at
   the janitor's fastest cadence (one pass 0.2 s after a write) over a few thousand block files.
3. Disk usage over a simulated month (injected clock): every day a few new chats (some pinned,
   some reopened), with a disk budget and a maximum age; the block folder's size is recorded
   each day and must stay within budget + pinned bytes + one block.
"""
from __future__ import annotations

import random
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from engine.kvstore.prefix_cache import JANITOR_DELAY_S

from bench.harness import common
from bench.harness.common import Section, median, ok, table

SYSTEM_WORDS = 820          # ~1,000 tokens with the default tokenizer
MONTH_DAYS = 30
DAY_S = 86400.0


def _system_prompt() -> str:
    return "You are Amber's assistant. Follow these house rules carefully. " + common.pseudo_text(SYSTEM_WORDS, 7)


def _manager(model_dir: str, state_dir: str, threads: int, **kw: Any) -> Any:
    from engine.runtime.model import load_model
    from engine.sessions.manager import SessionManager
    return SessionManager(load_model(model_dir, "cpu", threads), state_dir, **kw)


def _chat_ttft(mgr: Any, system: str, question: str, kind: str = "regular") -> dict[str, Any]:
    from engine.api import ChatMessage, GenerationResult, SamplingParams
    sid = str(uuid.uuid4())
    t0 = time.perf_counter()
    mgr.open(sid, kind=kind)
    events = mgr.generate(sid, [ChatMessage("system", system), ChatMessage("user", question)],
                          SamplingParams(greedy=True, max_new_tokens=1))
    first = next(events)
    ttft = time.perf_counter() - t0
    result = first
    for result in events:  # noqa: B007 - the last event is the result
        pass
    assert isinstance(result, GenerationResult)
    f = result.figures
    return {"sid": sid, "ttft_ms": ttft * 1000, "prompt": f.prompt_tokens, "from_memory": f.cache_tokens_memory,
            "from_disk": f.cache_tokens_disk, "prefilled": f.prefilled_tokens}


def worker_cold_and_memory(model_dir: str, state_dir: str, threads: int, runs: int) -> dict[str, Any]:
    mgr = _manager(model_dir, state_dir, threads)
    system = _system_prompt()
    _chat_ttft(mgr, "warm-up", "hi", kind="temporary")          # ORT first-run costs
    cold = _chat_ttft(mgr, system, "What is the first rule?")
    memory = [_chat_ttft(mgr, system, f"Question number {i}?") for i in range(runs)]
    mgr.shutdown()      # closes the regular sessions: their blocks spill to the disk tier
    return {"cold": cold, "memory": memory}


def worker_disk(model_dir: str, state_dir: str, threads: int, runs: int) -> dict[str, Any]:
    mgr = _manager(model_dir, state_dir, threads)
    system = _system_prompt()
    _chat_ttft(mgr, "warm-up", "hi", kind="temporary")
    first = _chat_ttft(mgr, system, "Tell me a rule.", kind="temporary")   # temporary: reads, never adds
    out = {"disk": first}
    mgr.shutdown()
    return out


def worker_janitor(model_dir: str, state_dir: str, threads: int, n_blocks: int, tokens: int) -> dict[str, Any]:
    """Decode speed with and without janitor passes over `n_blocks` unpinned block files."""
    import numpy as np

    from engine.api import SamplingParams
    from engine.generation.generate import collect
    mgr = _manager(model_dir, state_dir, threads, cache_disk_bytes=1 << 40)
    shape = mgr.shape
    payload = np.zeros((shape.n_layers, 2, shape.kv_heads, 1, shape.head_dim), dtype=shape.dtype)
    for i in range(n_blocks):       # small fake blocks: the janitor's cost is per file, not per byte
        key = f"{i:040x}"
        mgr.store.write(key, [i], payload)
        mgr.prefix.note_written(key)
    sid = str(uuid.uuid4())
    mgr.open(sid, kind="temporary")
    prompt = [1] + list(range(1000, 1100))

    def decode() -> float:
        r = collect(mgr.generate_tokens(sid, prompt, SamplingParams(greedy=True, max_new_tokens=tokens)))
        return r.figures.decode_tokens_per_s
    decode()
    without = [decode() for _ in range(3)]
    stop = threading.Event()
    passes = [0]

    def janitor() -> None:
        # As often as the real janitor can run: a pass JANITOR_DELAY_S after each write.
        while not stop.is_set():
            mgr.prefix.enforce()
            passes[0] += 1
            stop.wait(JANITOR_DELAY_S)
    t = threading.Thread(target=janitor)
    t0 = time.perf_counter()
    t.start()
    with_janitor = [decode() for _ in range(3)]
    stop.set()
    t.join()
    elapsed = time.perf_counter() - t0
    one_pass = time.perf_counter()
    mgr.prefix.enforce()
    one_pass = time.perf_counter() - one_pass
    mgr.shutdown()
    return {"without": median(without), "with": median(with_janitor), "passes_per_s": passes[0] / elapsed,
            "pass_ms": one_pass * 1000, "blocks": n_blocks}


class _Clock:
    def __init__(self) -> None:
        self.t = time.time()

    def __call__(self) -> float:
        return self.t


def worker_month(model_dir: str, state_dir: str, threads: int, days: int, chats_per_day: int,
                 disk_budget: int, max_age_days: float) -> dict[str, Any]:
    """A month of use on an injected clock; the disk tier's bytes recorded each day."""
    from engine.api import ChatMessage, SamplingParams, SessionKind
    from engine.generation.generate import collect
    clock = _Clock()
    rng = random.Random(3)
    mgr = _manager(model_dir, state_dir, threads, cache_disk_bytes=disk_budget,
                   cache_max_age_s=max_age_days * DAY_S, clock=clock)
    system = "You are a helpful assistant. " + common.pseudo_text(150, 11)
    block_bytes = 0
    daily = []
    pinned: list[str] = []
    for day in range(days):
        for c in range(chats_per_day):
            sid = str(uuid.uuid4())
            kind = SessionKind.PINNED if rng.random() < 0.15 else SessionKind.REGULAR
            mgr.open(sid, kind=kind)
            msgs = [ChatMessage("system", system),
                    ChatMessage("user", common.pseudo_text(rng.randint(60, 260), day * 100 + c))]
            collect(mgr.generate(sid, msgs, SamplingParams(greedy=True, max_new_tokens=8)))
            if kind == SessionKind.PINNED:
                pinned.append(sid)
            mgr.close(sid)
        if pinned and rng.random() < 0.3:          # now and then a pinned chat is deleted
            mgr.delete(pinned.pop(0))
        mgr.wait_for_saves(120)
        mgr.cache_gc()
        stats = mgr.stats()["cache"]["disk"]
        sizes = [p.stat().st_size for p in Path(state_dir, "blocks").rglob("*.kvb")]
        block_bytes = max(block_bytes, max(sizes, default=0))
        daily.append({"day": day + 1, "bytes": sum(sizes), "blocks": len(sizes), "pinned_bytes": stats["pinned_bytes"],
                      "evictions": stats["evictions"], "expirations": stats["expirations"]})
        clock.t += DAY_S
    mgr.shutdown()
    return {"daily": daily, "block_bytes": block_bytes, "budget": disk_budget}


def run(quick: bool = False) -> dict[str, Any]:
    from bench.suites.engine import model_dir as default_model_dir
    model_dir = str(default_model_dir())
    threads = common.THREADS
    runs = 2 if quick else 5
    res: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="amber-bench-prefix-") as tmp:
        state = str(Path(tmp, "state"))
        a = common.run_worker("bench.suites.prefix", "worker_cold_and_memory",
                              {"model_dir": model_dir, "state_dir": state, "threads": threads, "runs": runs}).data
        disks = []
        for _ in range(runs):
            common.drop_from_page_cache(common.files_under(Path(state)))
            disks.append(common.run_worker("bench.suites.prefix", "worker_disk",
                                           {"model_dir": model_dir, "state_dir": state, "threads": threads,
                                            "runs": 1}).data["disk"])
        res["prompt_tokens"] = a["cold"]["prompt"]
        res["cold_ttft_ms"] = a["cold"]["ttft_ms"]
        res["memory_ttft_ms"] = median(m["ttft_ms"] for m in a["memory"])
        res["memory_reused"] = a["memory"][0]["from_memory"]
        res["disk_ttft_ms"] = median(d["ttft_ms"] for d in disks)
        res["disk_reused"] = disks[0]["from_disk"]
        print(f"  TTFT, {res['prompt_tokens']}-token prompt: cold {res['cold_ttft_ms']:.0f} ms, "
              f"memory tier {res['memory_ttft_ms']:.0f} ms ({res['memory_reused']} reused), "
              f"disk tier {res['disk_ttft_ms']:.0f} ms ({res['disk_reused']} reused)", flush=True)

        jan = common.run_worker("bench.suites.prefix", "worker_janitor",
                                {"model_dir": model_dir, "state_dir": str(Path(tmp, "jan")), "threads": threads,
                                 "n_blocks": 500 if quick else 3000, "tokens": 32 if quick else 64}).data
        res["janitor"] = jan
        print(f"  decode without janitor {jan['without']:.1f} tok/s, with continuous passes {jan['with']:.1f} tok/s "
              f"({jan['passes_per_s']:.1f} passes/s over {jan['blocks']} blocks; one pass {jan['pass_ms']:.1f} ms)",
              flush=True)

        budget = 96 << 20
        month = common.run_worker("bench.suites.prefix", "worker_month",
                                  {"model_dir": model_dir, "state_dir": str(Path(tmp, "month")), "threads": threads,
                                   "days": 6 if quick else MONTH_DAYS, "chats_per_day": 2 if quick else 4,
                                   "disk_budget": budget, "max_age_days": 7}, timeout=3600).data
        res["month"] = month
        worst = max(d["bytes"] - d["pinned_bytes"] for d in month["daily"])
        res["month_worst_unpinned_bytes"] = worst
        res["month_within_budget"] = worst <= budget + month["block_bytes"]
        print(f"  simulated {len(month['daily'])} days: largest unpinned disk tier {worst / 2**20:.1f} MiB "
              f"(budget {budget / 2**20:.0f} MiB), final {month['daily'][-1]['bytes'] / 2**20:.1f} MiB "
              f"with {month['daily'][-1]['pinned_bytes'] / 2**20:.1f} MiB pinned", flush=True)
    return res


def plot(res: dict[str, Any], png: Path) -> Path | None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    daily = res["month"]["daily"]
    days = [d["day"] for d in daily]
    fig, ax = plt.subplots(figsize=(7, 3.2))
    ax.plot(days, [d["bytes"] / 2**20 for d in daily], label="block folder")
    ax.plot(days, [d["pinned_bytes"] / 2**20 for d in daily], label="pinned")
    ax.axhline((res["month"]["budget"]) / 2**20, color="grey", ls="--", label="unpinned budget")
    ax.set_xlabel("simulated day")
    ax.set_ylabel("MiB")
    ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return png


def section(res: dict[str, Any]) -> Section:
    jan = res["janitor"]
    month = res["month"]
    last = month["daily"][-1]
    speed_mem = res["cold_ttft_ms"] / res["memory_ttft_ms"]
    speed_disk = res["cold_ttft_ms"] / res["disk_ttft_ms"]
    rows = [
        [f"TTFT, new chat, {res['prompt_tokens']}-token prompt, nothing cached",
         f"{res['cold_ttft_ms']:.0f} ms", "", ""],
        [f"TTFT, system prompt in the memory tier ({res['memory_reused']} tokens reused)",
         f"{res['memory_ttft_ms']:.0f} ms", f"{speed_mem:.1f}× faster", ok(speed_mem > 1)],
        [f"TTFT, system prompt in the disk tier, fresh process, cold page cache ({res['disk_reused']} reused)",
         f"{res['disk_ttft_ms']:.0f} ms", f"{speed_disk:.1f}× faster", ok(speed_disk > 1)],
        [f"Decode without / with janitor passes running ({jan['blocks']} blocks, {jan['passes_per_s']:.0f} passes/s)",
         f"{jan['without']:.1f} / {jan['with']:.1f} tok/s",
         f"{100 * (1 - jan['with'] / jan['without']):.1f} % slower", ""],
        ["One janitor pass", f"{jan['pass_ms']:.1f} ms", "", ""],
        [f"Simulated {len(month['daily'])} days: largest unpinned disk tier",
         f"{res['month_worst_unpinned_bytes'] / 2**20:.1f} MiB", f"budget {month['budget'] / 2**20:.0f} MiB (+1 block)",
         ok(res["month_within_budget"])],
        ["…at the end: block folder / pinned", f"{last['bytes'] / 2**20:.1f} / {last['pinned_bytes'] / 2**20:.1f} MiB",
         f"{last['evictions']} evictions, {last['expirations']} expirations", ""],
    ]
    body = "\n".join([__doc__.split("\n\n", 1)[1].strip(), "", table(["Figure", "Value", "", ""], rows), "",
                      "![disk usage over a simulated month](bench_prefix.png)", "",
                      common.facts_line(common.machine_facts())])
    return Section("prefix", "Shared prefix cache", body, 35)
