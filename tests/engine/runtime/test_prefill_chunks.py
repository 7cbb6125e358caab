"""Prefill chunks sized by a model's shape and the embedding pages dropped while a chunk runs
(the peak RSS of a generating process).

No RSS thresholds here (those are bench figures, docs/benchmarks/memory.md "Peak RSS while
generating"): the tests check the chunk lengths chosen for real model shapes, that the logits do
not depend on the chunking, and that the mapped weight pages leave while the dropper runs, by the
kernel's own page counts."""
from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from engine.runtime.host import residency
from engine.runtime import runner as runner_mod
from engine.runtime.model import load_model
from engine.runtime.runner import Runner
from tests.support.genai_folder import write_genai_folder

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="/proc/self/smaps and madvise are Linux's")


def _prompt(n: int, vocab: int = 200) -> list[int]:
    return [int(x) for x in np.random.default_rng(5).integers(3, vocab, size=n)]


def _shaped(model, **config):
    """The tiny model's session under a config of another shape (only the runner reads it)."""
    return dataclasses.replace(model, config={**model.config, **config})


# ---- chunks sized by the activations of the model's shape ---------------------------------------
def test_models_up_to_the_1_5b_shape_keep_full_chunks_and_wider_mlps_get_shorter_ones(tiny_model) -> None:
    smol = Runner(_shaped(tiny_model, hidden_size=576, intermediate_size=1536))        # SmolLM2-135M
    qwen05 = Runner(_shaped(tiny_model, hidden_size=896, intermediate_size=4864))     # Qwen2.5-0.5B
    qwen = Runner(_shaped(tiny_model, hidden_size=1536, intermediate_size=8960))       # Qwen2.5-1.5B
    llama = Runner(_shaped(tiny_model, hidden_size=2048, intermediate_size=8192))      # Llama-3.2-1B
    llama8b = Runner(_shaped(tiny_model, hidden_size=4096, intermediate_size=14336))   # Llama-3.1-8B
    # 1B / 1.5B prompts run in 512-token chunks, not 64 (the native GgufMatMul's taller
    # row tiles apply; same logits bits, test_native_attention_model.py)
    for runner in (smol, qwen05, qwen, llama):
        assert runner.chunk_len(runner.new_cache(), 512) == runner_mod.PREFILL_CHUNK == 512
    wide = llama8b.chunk_len(llama8b.new_cache(), 512)
    assert runner_mod.MIN_CHUNK < wide < runner_mod.PREFILL_CHUNK and wide % runner_mod.MIN_CHUNK == 0
    assert wide * llama8b._token_bytes <= runner_mod.ACTIVATION_SCRATCH_BYTES
    # what each chunk token holds grows with the MLP's width
    assert llama8b._token_bytes > qwen._token_bytes > llama._token_bytes > smol._token_bytes


def test_the_activation_bound_is_for_cpu_sessions_only(tiny_model) -> None:
    on_gpu = Runner(dataclasses.replace(_shaped(tiny_model, hidden_size=1536, intermediate_size=8960),
                                        provider="CUDAExecutionProvider"))
    assert on_gpu._token_bytes == 0
    assert on_gpu.chunk_len(on_gpu.new_cache(), 512) == runner_mod.PREFILL_CHUNK


def test_a_twice_as_wide_mlp_takes_half_the_chunk(tiny_model, monkeypatch) -> None:
    narrow = Runner(_shaped(tiny_model, hidden_size=64, intermediate_size=1024))
    wide = Runner(_shaped(tiny_model, hidden_size=64, intermediate_size=2048))
    monkeypatch.setattr(runner_mod, "MIN_CHUNK", 16)
    monkeypatch.setattr(runner_mod, "ATTENTION_SCRATCH_BYTES", 1 << 40)    # activations decide alone
    monkeypatch.setattr(runner_mod, "ACTIVATION_SCRATCH_BYTES", 256 * narrow._token_bytes)
    assert narrow.chunk_len(narrow.new_cache(), 1000) == 256
    assert wide.chunk_len(wide.new_cache(), 1000) == 128


def test_a_config_without_sizes_still_gets_a_bounded_chunk(tiny_model) -> None:
    odd = Runner(_shaped(tiny_model, hidden_size="big", intermediate_size=None))    # untrusted values
    assert odd._token_bytes > 0
    assert 1 <= odd.chunk_len(odd.new_cache(), 4000) <= runner_mod.PREFILL_CHUNK
    gpt2 = Runner(_shaped(tiny_model, hidden_size=768, intermediate_size=None))       # 4x MLP assumed
    assert gpt2._token_bytes == Runner(_shaped(tiny_model, hidden_size=768, intermediate_size=3072))._token_bytes


def test_logits_do_not_depend_on_the_activation_chunking(tiny_model, monkeypatch) -> None:
    runner = Runner(tiny_model)
    ids = _prompt(150)
    reference = runner.forward(runner.new_cache(), ids)
    monkeypatch.setattr(runner_mod, "MIN_CHUNK", 16)
    monkeypatch.setattr(runner_mod, "ACTIVATION_SCRATCH_BYTES", 40 * runner._token_bytes)   # -> 32
    cache = runner.new_cache()
    assert runner.chunk_len(cache, len(ids)) == 32
    seen: list[int] = []
    chunked = runner.forward(cache, ids, between_chunks=lambda done: seen.append(done) or False)
    assert seen == list(range(32, 150, 32))
    assert chunked is not None and reference is not None
    np.testing.assert_allclose(chunked, reference, rtol=1e-4, atol=1e-4)
    # and the decode that follows reads the same cache
    tok = int(np.argmax(chunked))
    again = runner.new_cache()
    runner.forward(again, ids)
    np.testing.assert_allclose(runner.forward(cache, [tok]), runner.forward(again, [tok]), rtol=1e-4, atol=1e-4)


@pytest.fixture(scope="module")
def genai_model(tiny_dir, tmp_path_factory):
    return load_model(write_genai_folder(tiny_dir, tmp_path_factory.mktemp("genai") / "tiny-genai"),
                      provider="cpu", threads=1)


def test_logits_of_every_position_count_against_the_budget(genai_model, tiny_model, monkeypatch) -> None:
    # genai_config.json names no MLP width: given the tiny model's, only the logits differ
    last_only, every = Runner(tiny_model), Runner(_shaped(genai_model, intermediate_size=128))
    assert tiny_model.config["intermediate_size"] == 128
    assert every._token_bytes == last_only._token_bytes + 4 * tiny_model.config["vocab_size"]
    monkeypatch.setattr(runner_mod, "MIN_CHUNK", 8)
    monkeypatch.setattr(runner_mod, "ATTENTION_SCRATCH_BYTES", 1 << 40)
    monkeypatch.setattr(runner_mod, "ACTIVATION_SCRATCH_BYTES", 64 * last_only._token_bytes)
    assert last_only.chunk_len(last_only.new_cache(), 200) == 64
    short = every.chunk_len(every.new_cache(), 200)
    assert 8 <= short < 64
    ids = _prompt(100)
    np.testing.assert_allclose(every.forward(every.new_cache(), ids), last_only.forward(last_only.new_cache(), ids),
                               rtol=1e-3, atol=1e-3)


# ---- embedding pages dropped while a chunk runs ---------------------------------------------------
def _resident_kib(folder: Path) -> int:
    return sum(m.rss_kib for m in residency.model_mappings(folder, residency.SMAPS.read_text()))


@linux_only
def test_the_dropper_gives_the_mapped_pages_back_while_it_runs(tiny_dir, monkeypatch) -> None:
    # The tiny model's mappings are all small enough to be kept (residency.KEEP_MAX_BYTES,
    # test_decode_after_prompt.py): here every one is dropped, as real models' embedding tables are.
    monkeypatch.setattr(residency, "KEEP_MAX_BYTES", 0)
    model = load_model(tiny_dir, provider="cpu", threads=1)
    runner = Runner(model)
    cache = runner.new_cache()
    first = runner.forward(cache, [7])          # a decode-sized step: its rows stay mapped
    assert _resident_kib(tiny_dir) > 0
    with residency.PageDropper(tiny_dir) as dropper:
        deadline = time.monotonic() + 30        # a wait for the thread, not a speed assertion
        while _resident_kib(tiny_dir) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _resident_kib(tiny_dir) == 0
        assert dropper.drops >= 1
    assert dropper._thread is not None and not dropper._thread.is_alive()
    # the pages come back from the file with the same bytes
    again = runner.forward(runner.new_cache(), [7])
    assert first is not None and again is not None
    np.testing.assert_array_equal(again, first)


def test_the_dropper_starts_nothing_for_a_folder_it_does_not_know(tmp_path) -> None:
    with residency.PageDropper(tmp_path) as dropper:
        pass
    assert dropper._thread is None and dropper.drops == 0


def test_each_prefill_chunk_runs_under_a_dropper_and_decode_steps_do_not(tiny_model, monkeypatch) -> None:
    entered: list[int] = []

    class Recording(residency.PageDropper):
        def __enter__(self) -> residency.PageDropper:
            entered.append(1)
            return super().__enter__()

    monkeypatch.setattr(runner_mod, "PageDropper", Recording)
    monkeypatch.setattr(runner_mod, "PREFILL_CHUNK", 16)
    runner = Runner(tiny_model)
    cache = runner.new_cache()
    logits = runner.forward(cache, _prompt(40))
    assert len(entered) == 3                    # 16 + 16 + 8
    runner.forward(cache, [int(np.argmax(logits))])
    assert len(entered) == 3
