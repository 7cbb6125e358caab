"""A request's `n` choices against concurrent chats: aggregate decode tok/s of n = 4 choices of one
prompt (`SessionManager.generate_choices`: the prompt prefilled once, the choices decoded as one
batch) against n = 1, and of 4 chats at once (one thread each, engine.runtime.batcher) against 1,
on the default model; then the same `n` through the API server (an in-process server over the same
engine, streaming `completions` with the official client). Short by design (about a minute).

Aggregate decode tok/s counts the tokens every choice (chat) streamed while ALL of them were
decoding, over that window (bench.suites.batch's measure). Kinds alternate within one process,
so that a change in machine load hits them alike; read the ratios.
"""
from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness import common
from bench.harness.common import Section, table
from bench.suites.batch import PROMPT_WORDS, cpu_features, measure

TARGET = 3.0


def _window(stamps: list[list[tuple[float, int]]]) -> dict[str, float]:
    """Tokens per second over the window in which every stream was decoding."""
    lo = max(s[0][0] for s in stamps)
    hi = min(s[-1][0] for s in stamps)
    count = sum(n for s in stamps for t, n in s if lo < t <= hi)
    return {"tok_s": count / (hi - lo) if hi > lo and count else float("nan"), "window_s": hi - lo}


def measure_choices(mgr: Any, prompt: list[int], n: int, n_new: int) -> dict[str, Any]:
    """One request of `n` greedy choices in a temporary session: the aggregate decode rate."""
    from engine.api import GenerationResult, SamplingParams, SessionKind, TextChunk
    batcher = mgr.generator.runner.batcher
    steps0, rows0 = (batcher.batched_steps, batcher.batched_rows) if batcher else (0, 0)
    prefilled0 = mgr.stats()["prefilled_tokens"]
    sid = mgr.open(kind=SessionKind.TEMPORARY).session_id
    stamps: list[list[tuple[float, int]]] = [[] for _ in range(n)]
    tokens = [0] * n
    sampling = SamplingParams(greedy=True, repetition_penalty=1.0, max_new_tokens=n_new)
    try:
        for index, event in mgr.generate_choices(sid, prompt, [sampling] * n):
            if isinstance(event, TextChunk) and event.token_ids:
                stamps[index].append((time.perf_counter(), len(event.token_ids)))
            elif isinstance(event, GenerationResult):
                tokens[index] = len(event.token_ids)
    finally:
        mgr.close(sid)
    res: dict[str, Any] = {**_window(stamps), "tokens": tokens,
                           "prefilled": mgr.stats()["prefilled_tokens"] - prefilled0}
    if batcher is not None:
        steps, rows = batcher.batched_steps - steps0, batcher.batched_rows - rows0
        res["rows_per_batch"] = rows / steps if steps else 0.0
    return res


def measure_server(url: str, model: str, prompt: str, n: int, n_new: int) -> dict[str, Any]:
    """One streaming `completions` request of `n` greedy choices: the aggregate streamed tok/s."""
    import openai
    client = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=600)
    stamps: list[list[tuple[float, int]]] = [[] for _ in range(n)]
    for chunk in client.completions.create(model=model, prompt=prompt, max_tokens=n_new, temperature=0, n=n,
                                           stream=True):
        for choice in chunk.choices:
            if choice.text:
                stamps[choice.index].append((time.perf_counter(), 1))
    return _window(stamps)


def run(quick: bool = False) -> dict[str, Any]:
    from bench.suites.engine import model_dir
    from engine.runtime.model import load_model
    from engine.server import serve_in_thread
    from engine.sessions.manager import SessionManager
    load_before = common.load_average()
    reps, n_new = (1, 16) if quick else (3, 48)
    folder = model_dir()
    model = load_model(folder, "cpu", common.THREADS)
    state = Path(tempfile.mkdtemp(prefix="amber-bench-choices-"))
    mgr = SessionManager(model, state)
    handle = serve_in_thread(mgr, "127.0.0.1", 0)
    runs: dict[str, list[dict[str, Any]]] = {}
    try:
        text = common.pseudo_text(PROMPT_WORDS, seed=100)
        prompt = mgr.generator.encode_prompt(text)
        chats = [mgr.generator.encode_prompt(common.pseudo_text(PROMPT_WORDS, seed=100 + i)) for i in range(4)]
        measure_choices(mgr, prompt, 4, 8)           # warm-up: ORT's first runs, batch shapes
        measure_server(handle.url, folder.name, text, 2, 8)
        kinds = {"choices_1": lambda: measure_choices(mgr, prompt, 1, n_new),
                 "choices_4": lambda: measure_choices(mgr, prompt, 4, n_new),
                 "chats_1": lambda: measure(mgr, chats[:1], n_new, True),
                 "chats_4": lambda: measure(mgr, chats, n_new, True),
                 "server_n1": lambda: measure_server(handle.url, folder.name, text, 1, n_new),
                 "server_n4": lambda: measure_server(handle.url, folder.name, text, 4, n_new)}
        for rep in range(reps):
            for name in (list(kinds) if rep % 2 == 0 else list(reversed(kinds))):
                r = kinds[name]()
                runs.setdefault(name, []).append(r)
                extra = "".join(f", {k} {r[k]:.2f}" if isinstance(r[k], float) else f", {k} {r[k]}"
                                for k in ("rows_per_batch", "prefilled") if k in r)
                print(f"choices: {name}: {r['tok_s']:.1f} tok/s aggregate (window {r['window_s']:.2f} s{extra}, "
                      f"load {common.load_average():.2f})", flush=True)
    finally:
        handle.stop()
        mgr.shutdown()
        shutil.rmtree(state, ignore_errors=True)
    med = {k: statistics.median(r["tok_s"] for r in rs) for k, rs in runs.items()}
    ratios = {"choices": med["choices_4"] / med["choices_1"], "chats": med["chats_4"] / med["chats_1"],
              "server": med["server_n4"] / med["server_n1"]}
    return {"median_tok_s": med, "ratios": ratios, "runs": runs, "reps": reps, "n_new": n_new,
            "prefilled": {k: [r["prefilled"] for r in rs] for k, rs in runs.items() if k.startswith("choices")},
            "prompt_tokens": len(prompt), "features": cpu_features(), "threads": common.THREADS,
            "facts": common.machine_facts(), "load_before": load_before, "quick": quick,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def section(res: dict[str, Any]) -> Section:
    med, ratios = res["median_tok_s"], res["ratios"]
    rows = [["n = 4 choices of one prompt (engine)", f"{med['choices_1']:.1f}", f"{med['choices_4']:.1f}",
             f"{ratios['choices']:.2f}×"],
            ["4 chats at once (engine, a thread each)", f"{med['chats_1']:.1f}", f"{med['chats_4']:.1f}",
             f"{ratios['chats']:.2f}×"],
            ["n = 4 through the API server (streaming completions)", f"{med['server_n1']:.1f}",
             f"{med['server_n4']:.1f}", f"{ratios['server']:.2f}×"]]
    facts = res["facts"]
    body = "\n".join([
        "`python -m bench choices` (bench/suites/choices.py): the default model, greedy, a ~50-token prompt, "
        f"{res['n_new']} new tokens per reply, medians of {res['reps']} rounds with the kinds alternating in one "
        "process. *Aggregate decode tok/s*: every reply's streamed tokens while all of them were decoding, over "
        "that window. A request's `n` choices prefill the prompt once "
        f"(prefilled tokens per n = 4 request: {sorted(set(res['prefilled'].get('choices_4', [])))}, the prompt "
        f"is {res['prompt_tokens']} tokens) and decode as one batch of rows.",
        "",
        table(["Workload", "1: tok/s", "4: tok/s", f"4 ÷ 1 (target ≥ {TARGET:g}×)"], rows),
        "",
        common.facts_line(facts, res.get("load_before"),
                          f"CPU features: {res.get('features') or 'unknown'}."
                          + (" Other work shared the cores while this ran (load average above 1): absolute "
                             "tok/s swing with the load, the ratios less." if facts["load_avg"][0] > 1.0 else "")),
    ])
    return Section("choices", "Choices and concurrent chats", body, common.ORDER.get("batch", 62) + 0.5)
