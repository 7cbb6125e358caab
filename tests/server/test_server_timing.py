"""The timing side channel of a shared prefix cache (Gu et al., arXiv 2502.07776).

A long prefix is cached under key A. Time to first token of requests under key B for the same
prefix must be indistinguishable from cache misses (two-sample KS, p > 0.05), while key A's own
repeats are clearly hits (p < 0.05 against the misses): the paired check proves the cache is on,
so B's result is not a cache that was simply off. TTFT is measured by the client (a completion of
one token, as an attacker would), over one kept-alive connection per key.
"""
from __future__ import annotations

import http.client
import json
import random
import time

import pytest

from tests.support.ks import ks_2samp
from tests.support.server import KEY_A, KEY_B, ServerProcess
from tests.support.tiny_gguf import TinyConfig, write_tiny_gguf

# Bigger than the other tests' model, so that prefilling the prefix costs far more than the noise.
TIMING_MODEL = TinyConfig(n_layers=4, n_embd=256, n_head=8, n_head_kv=4, head_dim=32, n_ff=768,
                          context_length=2048, seed=11)
PREFIX_TOKENS = 1280        # 10 KV blocks
SUFFIX_TOKENS = 8
SAMPLES = 12                # per group
ROUNDS = 2                  # a second round only if the first rejects B by chance (5% under H0)


@pytest.fixture(scope="module")
def timing_server(tmp_path_factory):
    from engine.convert import convert_gguf
    d = tmp_path_factory.mktemp("timing")
    src = write_tiny_gguf(d / "timing.gguf", TIMING_MODEL)
    model_dir = convert_gguf(src.path, d / "tiny-chat")
    s = ServerProcess(model_dir, d / "state", "--api-key", KEY_A, "--api-key", KEY_B)
    yield s
    s.stop()


class Client:
    def __init__(self, port: int, key: str) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        self.key = key

    def ttft_ms(self, ids: list[int], salt: str | None = None) -> tuple[float, int]:
        """Client-side time to the first (and only) token, and the tokens the server reused."""
        body = {"model": "tiny-chat", "prompt": ids, "max_tokens": 1, "temperature": 0}
        if salt is not None:
            body["cache_salt"] = salt
        for retry in (False, True):
            start = time.perf_counter()
            try:
                self.conn.request("POST", "/v1/completions", json.dumps(body),
                                  {"Authorization": f"Bearer {self.key}", "Content-Type": "application/json"})
                reply = json.loads(self.conn.getresponse().read())
                break
            except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
                # The server closes a connection idle past its keep-alive (uvicorn: 5 s), as a busy
                # machine can leave one key's connection while the other key's requests run: the
                # request is sent again on a new connection, and timed from there.
                self.conn.close()
                if retry:
                    raise
        return (time.perf_counter() - start) * 1000, reply["usage"]["prompt_tokens_details"]["cached_tokens"]


def test_another_keys_requests_time_like_misses_while_own_repeats_hit(timing_server):
    rng = random.Random(2502_07776)
    rand = lambda n: [rng.randrange(3, 400) for _ in range(n)]   # noqa: E731
    a, b = Client(timing_server.port, KEY_A), Client(timing_server.port, KEY_B)
    prefix = rand(PREFIX_TOKENS)
    a.ttft_ms(prefix + rand(SUFFIX_TOKENS))          # the victim's prompt, now cached under key A
    a.ttft_ms(rand(PREFIX_TOKENS + SUFFIX_TOKENS))   # warm-up of the miss path
    outcome = None
    for round_ in range(ROUNDS):
        times: dict[str, list[float]] = {"hit": [], "miss": [], "b": []}
        reused: dict[str, list[int]] = {"hit": [], "miss": [], "b": []}
        # Interleaved in random order, so drifts of the machine's load hit every group alike.
        plan = [g for g in times for _ in range(SAMPLES)]
        rng.shuffle(plan)
        for i, group in enumerate(plan):
            if group == "hit":
                t, r = a.ttft_ms(prefix + rand(SUFFIX_TOKENS))
            elif group == "miss":
                t, r = a.ttft_ms(rand(PREFIX_TOKENS + SUFFIX_TOKENS))
            else:
                # The attacker probes A's prefix under its own key, each probe with a fresh salt
                # (a caller's salt only subdivides its own key's namespace), so each is a first try
                # and B's own cache never helps it.
                t, r = b.ttft_ms(prefix + rand(SUFFIX_TOKENS), salt=f"probe-{round_}-{i}")
            times[group].append(t)
            reused[group].append(r)
        assert all(r >= PREFIX_TOKENS for r in reused["hit"]), reused["hit"]     # the cache is on
        assert reused["miss"] == [0] * SAMPLES and reused["b"] == [0] * SAMPLES
        _, p_hit = ks_2samp(times["hit"], times["miss"])
        _, p_b = ks_2samp(times["b"], times["miss"])
        outcome = (p_hit, p_b, {g: sorted(round(t, 1) for t in v) for g, v in times.items()})
        assert p_hit < 0.05, outcome           # A's repeats are clearly hits
        if p_b > 0.05:
            break
    print(f"KS p hit-vs-miss {outcome[0]:.2g}, B-vs-miss {outcome[1]:.2g}; ms {outcome[2]}")
    assert outcome is not None and outcome[1] > 0.05, outcome     # B cannot tell A's prefix is cached
