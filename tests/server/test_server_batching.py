"""Concurrent clients of a real `amber-engine serve` process: with batched decoding (the scheduler
drives each generation on its own thread, engine.runtime.batcher runs their steps together) every
client still gets exactly the reply it gets alone."""
from __future__ import annotations

import threading

import openai

from tests.support.server import KEY_A

MODEL = "tiny-chat"
PROMPTS = ["Tell me about rivers.", "What is a lantern?", "Count the bridges, please.", "Why is the sky blue?"]


def chat(client, text: str, n: int):
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": text}],
                                       max_tokens=n, temperature=0)
    return r.choices[0].message.content, r.usage.completion_tokens


def test_four_concurrent_clients_get_their_solo_replies(server):
    client = openai.OpenAI(base_url=server.url, api_key=KEY_A, max_retries=0, timeout=120)
    lengths = [24, 24, 8, 16]     # one finishes early
    alone = [chat(client, p, n) for p, n in zip(PROMPTS, lengths, strict=True)]
    got: list[object] = [None] * len(PROMPTS)
    start = threading.Barrier(len(PROMPTS))

    def worker(i: int) -> None:
        start.wait()
        try:
            got[i] = chat(client, PROMPTS[i], lengths[i])
        except Exception as exc:   # noqa: BLE001 - compared below
            got[i] = exc
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(PROMPTS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    assert got == alone
