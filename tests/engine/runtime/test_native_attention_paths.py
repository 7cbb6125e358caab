"""The engine's paths over a native-form model with ai.amber.Attention (float16 KV, past and
present one buffer): prefix-cache hits from memory and disk, temporary sessions, 4 sessions
decoding in one batch, `amber-engine generate`, and the API server, each giving the tokens a
from-scratch greedy run gives. (Pinned save -> restart -> resume: test_native_convert.py's
round trip, on the same kind of graph.)"""
from __future__ import annotations

import json

import numpy as np
import pytest

from engine.api import SamplingParams, SessionKind
from engine.convert import FAST, convert_gguf
from engine.generation.generate import Generator, collect
from engine.runtime import batcher as batcher_mod
from engine.runtime.model import load_model
from engine.sessions.manager import SessionManager
from tests.support.server import KEY_A, ServerProcess
from tests.support.tiny_gguf import TinyConfig, write_tiny_gguf

B = 16
CFG = TinyConfig(seed=82, wtype="Q8_0", context_length=1024)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    import engine.native as native
    from engine.native import build
    if build.find_compiler() is None and native.library_path() is None:
        pytest.skip("no C compiler (cc/gcc/clang) to build the native kernels")
    build.build()
    root = tmp_path_factory.mktemp("attn_paths")
    src = write_tiny_gguf(root / "m.gguf", CFG)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AMBER_KERNELS", "native")
        mp.delenv("AMBER_NATIVE_ATTENTION", raising=False)
        out = convert_gguf(src.path, root / "tiny-amber", kernels="native", accuracy_level=FAST)
        meta = json.loads((out / "amber_import.json").read_text())
        assert meta["attention"] == "amber" and meta["kernels"] == "native"
        yield out


@pytest.fixture(scope="module")
def model(folder):
    m = load_model(folder, provider="cpu", threads=1)
    assert m.amber_attention and m.kv.dtype is np.float16
    return m


def ids(n: int, seed: int) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(3, 400, n)]


def greedy(n: int = 6) -> SamplingParams:
    return SamplingParams(greedy=True, repetition_penalty=1.0, max_new_tokens=n)


def scratch(model, prompt: list[int], n: int = 6) -> list[int]:
    gen = Generator(model)
    gen.runner.batch_decode = False
    return collect(gen.stream(gen.new_cache(), prompt, greedy(n))).token_ids


def test_prefix_cache_hits_from_memory_and_disk_give_scratch_tokens(model, tmp_path):
    prefix = ids(4 * B, 2)
    other = prefix + ids(B + 5, 4)
    want = scratch(model, other)
    mgr = SessionManager(model, tmp_path, block_tokens=B)
    collect(mgr.generate_tokens(mgr.open(None).session_id, prefix + ids(11, 3), greedy()))
    r = collect(mgr.generate_tokens(mgr.open(None).session_id, other, greedy()))
    assert r.figures.cache_tokens_memory == 4 * B and r.token_ids == want
    mgr.shutdown()
    mgr2 = SessionManager(model, tmp_path, block_tokens=B)
    r = collect(mgr2.generate_tokens(mgr2.open(None).session_id, other, greedy()))
    mgr2.shutdown()
    assert r.figures.cache_tokens_disk >= 4 * B and r.token_ids == want


def test_temporary_session_continues_like_one_prompt(model, tmp_path):
    p1 = ids(30, 5)
    mgr = SessionManager(model, tmp_path, block_tokens=B)
    sid = mgr.open(None, kind=SessionKind.TEMPORARY).session_id
    t1 = collect(mgr.generate_tokens(sid, p1, greedy())).token_ids
    p2 = p1 + t1 + ids(9, 6)
    t2 = collect(mgr.generate_tokens(sid, p2, greedy())).token_ids
    mgr.shutdown()
    assert t1 == scratch(model, p1) and t2 == scratch(model, p2)


def test_four_sessions_batched_give_their_solo_tokens(model, monkeypatch):
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent))
    from tests.support.batching import Together, run_threads
    monkeypatch.setattr(batcher_mod, "GATHER_WAIT_S", 60.0)
    specs = [(12, 10), (70, 10), (5, 6), (33, 8)]      # different lengths: per-sequence seqlens_k
    prompts = [ids(n, 20 + i) for i, (n, _) in enumerate(specs)]
    want = [scratch(model, p, n) for p, (_, n) in zip(prompts, specs, strict=True)]
    gen = Generator(model)
    caches = [gen.new_cache() for _ in specs]
    together = Together(gen.runner, caches)
    got: list[list[int] | None] = [None] * len(specs)

    def worker(i: int):
        def run() -> None:
            try:
                got[i] = collect(gen.stream(caches[i], prompts[i], greedy(specs[i][1]))).token_ids
            finally:
                together.release(caches[i])
        return run
    run_threads([worker(i) for i in range(len(specs))])
    assert got == want
    assert gen.runner.batcher is not None and gen.runner.batcher.batched_steps > 0


def test_cli_generate_runs_the_model(folder, run_cli, tmp_path):
    proc = run_cli("generate", "--model", folder, "--prompt", "hello world", "--greedy", "--json",
                   "--max-tokens", "8", "--state-dir", tmp_path / "state", env={"AMBER_KERNELS": "native"})
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    assert data["generated_tokens"] == len(data["tokens"]) > 0


def test_api_server_chat_completion(folder, tmp_path):
    import openai
    s = ServerProcess(folder, tmp_path / "state", "--api-key", KEY_A)
    try:
        client = openai.OpenAI(base_url=s.url, api_key=KEY_A, max_retries=0, timeout=120)
        r = client.chat.completions.create(model=client.models.list().data[0].id, max_tokens=8, temperature=0,
                                           messages=[{"role": "user", "content": "hi there"}])
        assert r.choices[0].finish_reason in ("stop", "length") and r.usage.completion_tokens > 0
    finally:
        assert s.stop() == 0
