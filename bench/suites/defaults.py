"""Choosing the GUI's sampling defaults for the default model by measurement.

A small fixed set of everyday prompts (one-turn questions with a known fact, and two-turn chats
whose follow-up needs the first answer), the GUI's default system prompt, and candidate
settings: the GUI's former defaults, the model's own generation_config.json, greedy (argmax, no
penalty), greedy with a 1.1 repetition penalty, and cooler sampling. Sampled candidates run with
fixed seeds, so every figure is deterministic on a given machine and build.

Per candidate:
  fact        share of answers in English (≥ 15 % English function words) that contain the expected
              fact (case-insensitive, any of its forms);
  stops       share of answers that end by themselves (EOS or a stop string) before the limit;
  repetition  mean share of repeated word 3-grams in an answer (0 = none repeats);
  tokens      mean generated tokens.
Score = fact + 0.5 × stops − repetition. Round 2 runs the two best sampled candidates again with
six more seeds; the better of them over all their answers is the choice (ties: fewer tokens). Greedy
candidates are measured for reference only: a deterministic default would make
Regenerate repeat the same answer (greedy stays the GUI's deterministic mode).
"""
from __future__ import annotations

import re
import time
from typing import Any

from bench.harness import common
from bench.harness.common import Section, table

SYSTEM = "You are a helpful assistant."      # the GUI's default system prompt (app/gui/settings.py)
MAX_NEW = 160
SEEDS = (1, 2, 3)
FINALIST_SEEDS = (4, 5, 6, 7, 8, 9)     # round 2: the two best sampled candidates again
FINALISTS = 2

# (question, accepted forms of the fact)
ONE_TURN = [
    ("What is the capital of France?", ["paris"]),
    ("How many days are there in a week?", ["seven", "7"]),
    ("What color is the sky on a clear day?", ["blue"]),
    ("Who wrote Romeo and Juliet?", ["shakespeare"]),
    ("What is the largest planet in our solar system?", ["jupiter"]),
    ("What gas do plants absorb from the air?", ["carbon dioxide", "co2", "co₂"]),
    ("At what temperature does water boil, in degrees Celsius?", ["100"]),
    ("How do you say 'thank you' in French?", ["merci"]),
    ("Which ocean is the largest?", ["pacific"]),
    ("What is the opposite of 'hot'?", ["cold"]),
]
# (first question, follow-up, accepted forms of the follow-up's fact)
TWO_TURN = [
    ("What is the capital of France?", "What is the famous tower there called?", ["eiffel"]),
    ("Who painted the Mona Lisa?", "In which country was he born?", ["ital"]),
]

CANDIDATES: dict[str, dict[str, Any]] = {
    "former GUI defaults (T 0.7, top-p 0.9, top-k 40, rep 1.1)":
        dict(temperature=0.7, top_p=0.9, top_k=40, repetition_penalty=1.1),
    "model's generation_config.json (T 0.7, top-k 40, top-p 0.95, min-p 0.05, rep 1.1)": {},
    "T 0.5, top-k 40, top-p 0.95, min-p 0.05, rep 1.1":
        dict(temperature=0.5, top_k=40, top_p=0.95, min_p=0.05, repetition_penalty=1.1),
    "T 0.3, top-k 40, top-p 0.9, min-p 0.05, rep 1.1":
        dict(temperature=0.3, top_k=40, top_p=0.9, min_p=0.05, repetition_penalty=1.1),
    "T 0.3, top-k 40, top-p 0.9, min-p 0.05, rep 1.0":
        dict(temperature=0.3, top_k=40, top_p=0.9, min_p=0.05, repetition_penalty=1.0),
    # For reference (deterministic: Regenerate would repeat the same answer, so not a GUI default).
    "greedy (argmax, no penalty)": dict(greedy=True),
    "greedy + rep 1.1": dict(greedy=True, repetition_penalty=1.1),
}


def repetition(text: str) -> float:
    """Share of word 3-grams that already occurred earlier in the text."""
    words = re.findall(r"\w+", text.lower())
    grams = [tuple(words[i:i + 3]) for i in range(len(words) - 2)]
    if not grams:
        return 0.0
    seen: set[tuple[str, ...]] = set()
    repeats = 0
    for g in grams:
        repeats += g in seen
        seen.add(g)
    return repeats / len(grams)


# Common English function words: an answer in English has plenty of them (a French ramble has none).
ENGLISH = frozenset("the a an is are was were of in on to and it its that this for with as by you i be can at "
                    "or from has have which there called also not".split())


def is_english(text: str) -> bool:
    """At least 15 % English function words, or too short to tell (a one-word answer such as "Paris.");
    the default model sometimes answers in French."""
    words = re.findall(r"[^\W\d_]+", text.lower())
    return len(words) < 4 or sum(w in ENGLISH for w in words) >= 0.15 * len(words)


def has_fact(text: str, forms: list[str]) -> bool:
    low = text.lower()
    return any(f in low for f in forms)


def run(quick: bool = False) -> dict[str, Any]:
    import os
    from pathlib import Path

    from engine.api import ChatMessage, SamplingParams
    from engine.generation.generate import Generator, collect
    from engine.runtime.model import load_model

    home = Path(os.environ.get("AMBER_TEST_HOME") or common.REPO / ".amber-dev")
    model = load_model(home / "models" / "SmolLM2-135M-Instruct", provider="cpu", threads=common.THREADS)
    gen = Generator(model)
    max_new = 64 if quick else MAX_NEW
    one = ONE_TURN[:3] if quick else ONE_TURN
    two = TWO_TURN[:1] if quick else TWO_TURN

    def reply(messages: list[ChatMessage], params: SamplingParams):
        return collect(gen.stream(gen.new_cache(), gen.encode_chat(messages), params))

    results: dict[str, Any] = {"max_new_tokens": max_new, "seeds": list(SEEDS), "candidates": {},
                               "model": model.name}
    def measure(name: str, values: dict[str, Any], seeds: tuple[int | None, ...]) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        for seed in seeds:
            def params(seed: int | None = seed) -> SamplingParams:
                return SamplingParams(**values, seed=seed, max_new_tokens=max_new)
            for question, forms in one:
                r = reply([ChatMessage("system", SYSTEM), ChatMessage("user", question)], params())
                rows.append({"prompt": question, "seed": seed, "text": r.text,
                             "fact": has_fact(r.text, forms) and is_english(r.text),
                             "stopped": r.figures.finish_reason in ("eos", "stop"),
                             "repetition": repetition(r.text), "tokens": r.figures.generated_tokens})
            for first, follow, forms in two:
                msgs = [ChatMessage("system", SYSTEM), ChatMessage("user", first)]
                r1 = reply(msgs, params())
                msgs += [ChatMessage("assistant", r1.text), ChatMessage("user", follow)]
                r = reply(msgs, params())
                rows.append({"prompt": f"{first} / {follow}", "seed": seed, "text": r.text,
                             "fact": has_fact(r.text, forms) and is_english(r.text),
                             "stopped": r.figures.finish_reason in ("eos", "stop"),
                             "repetition": repetition(r.text), "tokens": r.figures.generated_tokens})
        return rows

    def summarise(rows: list[dict[str, Any]], seconds: float) -> dict[str, Any]:
        n = len(rows)
        summary = {"answers": n,
                   "fact": sum(r["fact"] for r in rows) / n,
                   "stops": sum(r["stopped"] for r in rows) / n,
                   "repetition": sum(r["repetition"] for r in rows) / n,
                   "tokens": sum(r["tokens"] for r in rows) / n,
                   "seconds": seconds}
        summary["score"] = summary["fact"] + 0.5 * summary["stops"] - summary["repetition"]
        return summary

    def report(name: str, summary: dict[str, Any]) -> None:
        print(f"defaults: {name}: {summary['answers']} answers, fact {summary['fact']:.2f}, "
              f"stops {summary['stops']:.2f}, "
              f"repetition {summary['repetition']:.3f}, {summary['tokens']:.0f} tokens, "
              f"score {summary['score']:.2f} ({summary['seconds']:.0f} s)", flush=True)

    def rank(items: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
        return sorted(items, key=lambda kv: (round(kv[1]["score"], 6), -kv[1]["tokens"]), reverse=True)

    for name, values in CANDIDATES.items():
        t0 = time.perf_counter()
        rows = measure(name, values, (None,) if values.get("greedy") else SEEDS)
        summary = summarise(rows, time.perf_counter() - t0)
        results["candidates"][name] = {"settings": values, "summary": summary, "rows": rows}
        report(name, summary)
    # The GUI's defaults must sample: with a deterministic default, Regenerate repeats the answer.
    sampled = [(k, v["summary"]) for k, v in results["candidates"].items() if not v["settings"].get("greedy")]
    finalists = [k for k, _ in rank(sampled)[:FINALISTS]]
    results["finalists"] = {}
    extra = FINALIST_SEEDS[:1] if quick else FINALIST_SEEDS
    for name in finalists:
        c = results["candidates"][name]
        t0 = time.perf_counter()
        rows = c["rows"] + measure(name, c["settings"], extra)
        summary = summarise(rows, time.perf_counter() - t0)
        results["finalists"][name] = summary
        report(f"{name} (round 2, seeds {SEEDS[0]}-{extra[-1]})", summary)
    results["finalist_seeds"] = list(SEEDS + extra)
    best = rank(list(results["finalists"].items()))[0]
    results["choice"] = best[0]
    print(f"defaults: choice: {best[0]}", flush=True)
    return results


def section(res: dict[str, Any]) -> Section:
    rows = []
    for name, c in res["candidates"].items():
        s = c["summary"]
        rows.append([("**" + name + "**") if name == res["choice"] else name, f"{s['answers']}",
                     f"{s['fact']:.0%}", f"{s['stops']:.0%}", f"{s['repetition']:.3f}", f"{s['tokens']:.0f}",
                     f"{s['score']:.2f}"])
    final_rows = [[("**" + k + "**") if k == res["choice"] else k, f"{s['answers']}", f"{s['fact']:.0%}",
                   f"{s['stops']:.0%}", f"{s['repetition']:.3f}", f"{s['tokens']:.0f}", f"{s['score']:.2f}"]
                  for k, s in res["finalists"].items()]
    choice = res["candidates"][res["choice"]]
    examples = []
    for name in (res["choice"], next(iter(res["candidates"]))):
        row = res["candidates"][name]["rows"][0]
        text = row["text"].replace("\n", " ").strip()
        examples.append(f"- {name}, “{row['prompt']}” (seed {row['seed']}): “{text[:160]}”")
    body = [
        f"{res['model']}, the GUI's default system prompt (“{SYSTEM}”), {len(ONE_TURN)} one-turn questions with a "
        f"known fact and {len(TWO_TURN)} two-turn chats whose follow-up needs the first answer "
        f"(`bench/suites/defaults.py`), at most {res['max_new_tokens']} new tokens. Sampled candidates run with "
        f"seeds {', '.join(map(str, res['seeds']))}; greedy ones once. *Fact*: the answer is in English "
        "(≥ 15 % English function words) and contains "
        "the expected fact; *stops*: it ends by itself before the limit; *repetition*: the mean share of repeated word "
        "3-grams; score = fact + 0.5 × stops − repetition. The choice is the best-scoring *sampled* candidate: "
        "with a deterministic default, Regenerate would repeat the same answer (greedy stays the deterministic mode).",
        "",
        "Round 1:",
        "",
        table(["Candidate", "Answers", "Fact", "Stops", "Repetition", "Tokens (mean)", "Score"], rows),
        "",
        f"Round 2: the {len(final_rows)} best sampled candidates again with seeds "
        f"{res['finalist_seeds'][0]}–{res['finalist_seeds'][-1]} (all answers counted):",
        "",
        table(["Candidate", "Answers", "Fact", "Stops", "Repetition", "Tokens (mean)", "Score"], final_rows),
        "",
        f"Choice (the GUI's defaults in `app/gui/settings.py`): **{res['choice']}**, settings "
        f"`{choice['settings'] or 'generation_config.json'}`.",
        "",
        "First answers, for a look:",
        *examples,
        "",
        common.facts_line(common.machine_facts()),
    ]
    return Section("defaults", "Sampling defaults for the default model", "\n".join(body), 32)
