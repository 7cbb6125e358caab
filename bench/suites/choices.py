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
import threading
import time
from pathlib import Path
from typing import Any

from bench.harness import common
from bench.harness.common import Section, table
from bench.suites.batch import PROMPT_WORDS, cpu_features, measure

TARGET = 3.0


class _CpuClock:
    """The process's CPU seconds, sampled every ~5 ms on a thread of its own while in use."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float]] = []     # (perf_counter, process CPU seconds)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._done.is_set():
            self.samples.append((time.perf_counter(), time.process_time()))
            self._done.wait(0.005)

    def __enter__(self) -> "_CpuClock":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()


def _window(stamps: list[list[tuple[float, int]]], clock: _CpuClock | None = None) -> dict[str, float]:
    """Tokens per second over the window in which every stream was decoding (and the process's CPU
    ms per token there)."""
    lo = max(s[0][0] for s in stamps)
    hi = min(s[-1][0] for s in stamps)
    count = sum(n for s in stamps for t, n in s if lo < t <= hi)
    out = {"tok_s": count / (hi - lo) if hi > lo and count else float("nan"), "window_s": hi - lo}
    if clock is not None:
        inside = [c for t, c in clock.samples if lo <= t <= hi]
        out["cpu_ms_per_token"] = (1000 * (inside[-1] - inside[0]) / count if len(inside) > 1 and count
                                   else float("nan"))
    return out


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
        with _CpuClock() as clock:
            for index, event in mgr.generate_choices(sid, prompt, [sampling] * n):
                if isinstance(event, TextChunk) and event.token_ids:
                    stamps[index].append((time.perf_counter(), len(event.token_ids)))
                elif isinstance(event, GenerationResult):
                    tokens[index] = len(event.token_ids)
    finally:
        mgr.close(sid)
    res: dict[str, Any] = {**_window(stamps, clock), "tokens": tokens,
                           "prefilled": mgr.stats()["prefilled_tokens"] - prefilled0}
    if batcher is not None:
        steps, rows = batcher.batched_steps - steps0, batcher.batched_rows - rows0
        res["rows_per_batch"] = rows / steps if steps else 0.0
    return res


def measure_server(url: str, model: str, prompt: str, n: int, n_new: int) -> dict[str, Any]:
    """One streaming `completions` request of `n` greedy choices: the aggregate streamed tok/s
    (the CPU figure counts the client's work too: it runs in the same process)."""
    import openai
    client = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=600)
    stamps: list[list[tuple[float, int]]] = [[] for _ in range(n)]
    with _CpuClock() as clock:
        for chunk in client.completions.create(model=model, prompt=prompt, max_tokens=n_new, temperature=0, n=n,
                                               stream=True):
            for choice in chunk.choices:
                if choice.text:
                    stamps[choice.index].append((time.perf_counter(), 1))
    return _window(stamps, clock)


def bench_model(folder: Path, label: str, reps: int, n_new: int, server: bool) -> dict[str, Any]:
    """The 1-vs-4 pairs on one model folder (and through an in-process API server if `server`)."""
    from engine.runtime.model import load_model
    from engine.server import serve_in_thread
    from engine.sessions.manager import SessionManager
    model = load_model(folder, "cpu", common.THREADS)
    state = Path(tempfile.mkdtemp(prefix="amber-bench-choices-"))
    mgr = SessionManager(model, state)
    handle = serve_in_thread(mgr, "127.0.0.1", 0) if server else None
    runs: dict[str, list[dict[str, Any]]] = {}
    pairs: dict[str, list[dict[str, float]]] = {}
    try:
        text = common.pseudo_text(PROMPT_WORDS, seed=100)
        prompt = mgr.generator.encode_prompt(text)
        chats = [mgr.generator.encode_prompt(common.pseudo_text(PROMPT_WORDS, seed=100 + i)) for i in range(4)]
        measure_choices(mgr, prompt, 4, 8)           # warm-up: ORT's first runs, batch shapes
        kinds = {"choices_1": lambda: measure_choices(mgr, prompt, 1, n_new),
                 "choices_4": lambda: measure_choices(mgr, prompt, 4, n_new),
                 "chats_1": lambda: measure(mgr, chats[:1], n_new, True),
                 "chats_4": lambda: measure(mgr, chats, n_new, True)}
        if handle is not None:
            url = handle.url
            measure_server(url, folder.name, text, 2, 8)
            kinds.update({"server_n1": lambda: measure_server(url, folder.name, text, 1, n_new),
                          "server_n4": lambda: measure_server(url, folder.name, text, 4, n_new)})
        # Each 1 and its 4 run back to back (in alternating order): a pair's ratio sees one load.
        for rep in range(reps):
            for pair in ("choices", "chats", "server")[:3 if handle is not None else 2]:
                names = [k for k in kinds if k.startswith(pair)]
                pair_runs = {}
                for name in (names if rep % 2 == 0 else names[::-1]):
                    r = kinds[name]()
                    pair_runs[name] = r
                    runs.setdefault(name, []).append(r)
                    extra = "".join(f", {k} {r[k]:.2f}" if isinstance(r[k], float) else f", {k} {r[k]}"
                                    for k in ("cpu_ms_per_token", "rows_per_batch", "prefilled") if k in r)
                    print(f"choices: {label}: {name}: {r['tok_s']:.1f} tok/s aggregate (window {r['window_s']:.2f} s"
                          f"{extra}, load {common.load_average():.2f})", flush=True)
                one, four = (pair_runs[n] for n in names)
                pairs.setdefault(pair, []).append({"tok_s": four["tok_s"] / one["tok_s"],
                                                   "cpu": one["cpu_ms_per_token"] / four["cpu_ms_per_token"]})
    finally:
        if handle is not None:
            handle.stop()
        mgr.shutdown()
        shutil.rmtree(state, ignore_errors=True)
    return {"label": label, "median_tok_s": {k: statistics.median(r["tok_s"] for r in rs) for k, rs in runs.items()},
            "cpu_ms_per_token": {k: statistics.median(r["cpu_ms_per_token"] for r in rs) for k, rs in runs.items()},
            "ratios": {k: statistics.median(p["tok_s"] for p in ps) for k, ps in pairs.items()},
            "cpu_ratios": {k: statistics.median(p["cpu"] for p in ps) for k, ps in pairs.items()},
            "pairs": pairs, "runs": runs,
            "prefilled": sorted({r["prefilled"] for r in runs["choices_4"]}), "prompt_tokens": len(prompt)}


def run(quick: bool = False, shapes: list[str] | None = None) -> dict[str, Any]:
    """The default model (and through the API server); `shapes` ("0.5b"): a random-weight shape in
    Q4_0 too (bench.suites.batch's, made in a temporary folder and deleted after), engine only."""
    import os

    from bench.suites.batch import _make_shape
    from bench.suites.engine import model_dir
    load_before = common.load_average()
    reps, n_new = (1, 16) if quick else (5, 48)
    models = [bench_model(model_dir(), "SmolLM2-135M (default)", reps, n_new, server=True)]
    for shape in [s for s in (shapes or []) if s not in ("tiny", "135m")]:
        root = Path(tempfile.mkdtemp(prefix="amber-bench-choices-shape-",
                                     dir=os.environ.get("AMBER_BENCH_SCRATCH")))
        try:
            folder, label = _make_shape(shape, root)
            models.append(bench_model(folder, label, reps, max(12, n_new // 3), server=False))
        finally:
            shutil.rmtree(root, ignore_errors=True)
    return {"models": models, "reps": reps, "n_new": n_new, "features": cpu_features(), "threads": common.THREADS,
            "facts": common.machine_facts(), "load_before": load_before, "quick": quick,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def section(res: dict[str, Any]) -> Section:
    labels = {"choices": ("n = 4 choices of one prompt (engine)", "choices_1", "choices_4"),
              "chats": ("4 chats at once (engine, a thread each)", "chats_1", "chats_4"),
              "server": ("n = 4 through the API server (streaming completions)", "server_n1", "server_n4")}
    rows = []
    for m in res["models"]:
        med, ratios, cpu, cpu_ratios = m["median_tok_s"], m["ratios"], m["cpu_ms_per_token"], m["cpu_ratios"]
        rows += [[m["label"], label, f"{med[one]:.1f}", f"{med[four]:.1f}", f"{ratios[key]:.2f}×",
                  f"{cpu[one]:.1f} / {cpu[four]:.1f}", f"{cpu_ratios[key]:.2f}×"]
                 for key, (label, one, four) in labels.items() if key in ratios]
    first = res["models"][0]
    facts = res["facts"]
    body = "\n".join([
        "`python -m bench choices [--shapes 0.5b]` (bench/suites/choices.py): greedy, a ~50-token prompt, "
        f"{res['n_new']} new tokens per reply (a third of that for a larger shape), {res['reps']} rounds; in each "
        "round every 1 and its 4 run back to back (alternating which first), and the ratios are the medians of "
        "those pairs' ratios. *Aggregate decode tok/s*: every reply's streamed tokens while all of them were "
        "decoding, over that window (medians). *CPU ms/token*: the process's CPU time per streamed token in that "
        "window (the server row's includes the in-process client); 1 ÷ 4 of it is the work a batch saves per "
        "token, which an oversubscribed machine's scheduler does not blur as much as tok/s. A request's `n` "
        f"choices prefill the prompt once (prefilled tokens per n = 4 request: {first['prefilled']}; the prompt "
        f"is {first['prompt_tokens']} tokens) and decode as one batch of rows.",
        "",
        table(["Model", "Workload", "1: tok/s", "4: tok/s", f"4 ÷ 1, tok/s (target ≥ {TARGET:g}×)",
               "CPU ms/token, 1 / 4", "CPU: 1 ÷ 4"], rows),
        "",
        common.facts_line(facts, res.get("load_before"),
                          f"CPU features: {res.get('features') or 'unknown'}."
                          + (" Other work shared the cores while this ran (load average above 1): absolute "
                             "tok/s swing with the load, the ratios less." if facts["load_avg"][0] > 1.0 else "")),
    ])
    return Section("choices", "Choices and concurrent chats", body, common.ORDER.get("batch", 62) + 0.5)
