"""ai.amber.Attention against ONNX Runtime's float32 com.microsoft.GroupQueryAttention on random
inputs (one-node graphs): prefill chunks, decode, batches with different lengths, sliding window,
softcap, packed QKV, past and present as one buffer, every ISA path.

Tolerance: the past is float16-exact in both runs, so the only difference in the inputs is the
new keys/values rounded to float16 (relative error <= 2^-11) plus float32 summation order; with
unit-normal q/k/v and 1/sqrt(D) scaling, scores move by ~1e-3 and outputs (weighted means of
unit values) by about as much: ATOL 5e-3 leaves a margin of ~3x over the worst measured (1.7e-3).
Present KV: ORT's float32 present rounded to float16 must match ours to one float16 step.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import onnxruntime as ort
import pytest

from tests.support.attn_graphs import Case, as_half, feeds, model, numpy_reference, session

ATOL = 5e-3
ISAS = ("scalar", "avx2", "avx512vnni")

CASES = {
    "decode": Case(totals=[1]),
    "decode_long": Case(cap=300, totals=[257], hq=9, hkv=3, d=64),
    "prefill_from_empty": Case(s=130, cap=160, totals=[130], hq=9, hkv=3, d=64),
    "prefill_chunk_after_past": Case(s=37, cap=128, totals=[100]),
    "batch4_decode_different_lengths": Case(b=4, totals=[3, 70, 1, 41], cap=80),
    "batch2_prefill_different_pasts": Case(b=2, s=5, totals=[9, 33], cap=40),
    "window_prefill": Case(s=40, cap=80, totals=[70], window=16),
    "window_decode": Case(cap=80, totals=[70], window=16),
    "softcap": Case(s=9, totals=[30], cap=40, softcap=3.0),
    "packed_qkv": Case(s=6, totals=[20], cap=32, packed=True),
    "no_rotary": Case(s=3, totals=[11], cap=16, rotary=False),
    "mqa_wide_group": Case(s=20, totals=[50], cap=64, hq=8, hkv=1, d=16),
    "odd_head_dim": Case(s=4, totals=[12], cap=16, d=24),
    "head_dim_128": Case(s=3, totals=[70], cap=80, hq=2, hkv=1, d=128),
    "custom_scale": Case(s=2, totals=[5], cap=8, scale=0.05),
    # past the 512-position key windows: a decode step's windows run as tasks of their own
    "decode_three_windows": Case(cap=1300, totals=[1290], hq=9, hkv=3, d=64),
    "batch2_decode_windows": Case(b=2, totals=[600, 1090], cap=1100, hq=6, hkv=2, d=64),
    "prefill_chunk_across_windows": Case(s=40, cap=1100, totals=[1050], hq=9, hkv=3, d=64),
    "window_decode_long": Case(cap=1300, totals=[1290], window=700, hq=4, hkv=2, d=64),
}


@pytest.fixture
def isa(native_on, request):
    """Forces one instruction-set path for the test, then restores the one in use before."""
    name, before = request.param, native_on.amber_isa()
    if native_on.amber_set_isa(name.encode()) != 0:
        pytest.skip(f"this CPU has no {name}")
    yield name
    assert native_on.amber_set_isa(before) == 0   # the library is process-wide: later tests see it


def _reference(c: Case, f: dict[str, np.ndarray]) -> list[np.ndarray]:
    """ORT's GQA; a batch of prefill chunks one sequence at a time (ORT takes B > 1 with S > 1
    only for a first prompt)."""
    if c.d % 16:
        return numpy_reference(c, f)   # ORT's kernel takes head sizes that are multiples of 16 only
    if c.b == 1 or c.s == 1:
        return session(model(c, False), amber=False).run(None, f)
    one = replace(c, b=1)
    parts = []
    for i, t in enumerate(c.totals):
        fi = {k: (v[i:i + 1] if k in ("query", "key", "value", "past_key", "past_value", "seqlens_k") else v)
              for k, v in f.items()}
        fi["total_sequence_length"] = np.array([t], np.int32)
        parts.append(session(model(replace(one, totals=[t]), False), amber=False).run(None, fi))
    return [np.concatenate([p[j] for p in parts]) for j in range(3)]


def _compare(c: Case, seed: int, threads: int = 1) -> tuple[list[np.ndarray], list[np.ndarray]]:
    f = feeds(c, np.random.default_rng(seed))
    ref = _reference(c, f)
    got = session(model(c, True), threads).run(None, as_half(f))
    return ref, got


def _check(c: Case, ref: list[np.ndarray], got: list[np.ndarray]) -> None:
    assert got[0].dtype == np.float32 and got[0].shape == ref[0].shape
    np.testing.assert_allclose(got[0], ref[0], atol=ATOL, rtol=0)
    assert got[1].dtype == np.float16 and got[1].shape == ref[1].shape
    for i, t in enumerate(c.totals):
        for j in (1, 2):
            want = ref[j][i, :, :t].astype(np.float16).astype(np.float32)
            np.testing.assert_allclose(got[j][i, :, :t].astype(np.float32), want, rtol=2 ** -10, atol=2 ** -20)


@pytest.mark.parametrize("name", list(CASES))
def test_matches_float32_gqa(native_on, name):
    c = CASES[name]
    for seed in range(2):
        ref, got = _compare(c, seed)
        _check(c, ref, got)


@pytest.mark.parametrize("isa", ISAS, indirect=True)
@pytest.mark.parametrize("name", ["prefill_from_empty", "batch4_decode_different_lengths", "window_prefill",
                                  "odd_head_dim", "softcap", "head_dim_128"])
def test_every_isa_path_matches(isa, name):
    c = CASES[name]
    ref, got = _compare(c, 3)
    _check(c, ref, got)


@pytest.mark.parametrize("name", ["prefill_chunk_after_past", "window_prefill", "softcap", "packed_qkv"])
def test_numpy_reference_agrees_with_ort(name):
    """The float64 reference used for head sizes ORT refuses is itself checked against ORT."""
    c = CASES[name]
    f = feeds(c, np.random.default_rng(11))
    ref = session(model(c, False), amber=False).run(None, f)
    mine = numpy_reference(c, f)
    np.testing.assert_allclose(mine[0], ref[0], atol=1e-4, rtol=0)


def test_threads_give_identical_bits(native_on):
    c = CASES["prefill_from_empty"]
    f = as_half(feeds(c, np.random.default_rng(5)))
    one = session(model(c, True), 1).run(None, f)
    two = session(model(c, True), 2).run(None, f)
    for a, b in zip(one, two, strict=True):
        assert np.array_equal(a, b)


def test_separate_present_copies_the_valid_past_and_zeros_the_rest(native_on):
    c = Case(s=2, totals=[10], cap=16)
    f = as_half(feeds(c, np.random.default_rng(6)))
    _, pk, pv = session(model(c, True)).run(None, f)
    assert np.array_equal(pk[:, :, :8], f["past_key"][:, :, :8])
    assert np.array_equal(pv[:, :, :8], f["past_value"][:, :, :8])
    assert not pk[:, :, 10:].any() and not pv[:, :, 10:].any()


def test_present_grows_to_total_sequence_length(native_on):
    """An empty past with 5 new tokens: present has total_sequence_length positions (as GQA)."""
    c = Case(s=5, totals=[5], cap=0)
    f = feeds(c, np.random.default_rng(7))
    ref = session(model(c, False), amber=False).run(None, f)
    got = session(model(c, True)).run(None, as_half(f))
    assert got[1].shape == ref[1].shape == (1, 2, 5, 32)
    _check(c, ref, got)


def test_shared_buffer_writes_only_the_new_positions(native_on):
    """past and present bound to one OrtValue (as engine/runtime/kvcache.py binds them): the step
    writes [past, total) of each sequence and leaves every other position's bits alone."""
    c = Case(b=2, s=3, totals=[12, 7], cap=20)
    f = as_half(feeds(c, np.random.default_rng(8)))
    sess = session(model(c, True), 2)
    want = sess.run(None, f)
    k0, v0 = f["past_key"].copy(), f["past_value"].copy()
    kv = {n: ort.OrtValue.ortvalue_from_numpy(f[n]) for n in ("past_key", "past_value")}
    binding = sess.io_binding()
    for n, arr in f.items():
        if n in kv:
            binding.bind_ortvalue_input(n, kv[n])
        else:
            binding.bind_cpu_input(n, arr)
    binding.bind_output("out")
    binding.bind_ortvalue_output("present_key", kv["past_key"])
    binding.bind_ortvalue_output("present_value", kv["past_value"])
    sess.run_with_iobinding(binding)
    out = binding.copy_outputs_to_cpu()[0]
    assert np.array_equal(out, want[0])
    k1, v1 = kv["past_key"].numpy(), kv["past_value"].numpy()
    for i, t in enumerate(c.totals):
        past = t - c.s
        assert np.array_equal(k1[i, :, past:t], want[1][i, :, past:t])
        assert np.array_equal(v1[i, :, past:t], want[2][i, :, past:t])
        keep = np.ones(c.cap, bool)
        keep[past:t] = False
        assert np.array_equal(k1[i, :, keep], k0[i, :, keep]) and np.array_equal(v1[i, :, keep], v0[i, :, keep])


def test_decode_steps_continue_a_prefill(native_on):
    """Prefill 20 then 3 decode steps through one shared buffer equals one 23-token prefill."""
    rng = np.random.default_rng(9)
    whole = Case(s=23, totals=[23], cap=32)
    f = as_half(feeds(whole, rng))
    want = session(model(whole, True)).run(None, f)[0]
    step_case = Case(s=1, totals=[1], cap=32)
    sess = session(model(step_case, True))
    kv = {n: ort.OrtValue.ortvalue_from_numpy(f[n]) for n in ("past_key", "past_value")}
    outs = []
    for s0, s1 in ((0, 20), (20, 21), (21, 22), (22, 23)):
        binding = sess.io_binding()
        step = {"query": f["query"][:, s0:s1], "key": f["key"][:, s0:s1], "value": f["value"][:, s0:s1],
                "seqlens_k": np.array([s1 - 1], np.int32), "total_sequence_length": np.array([s1], np.int32),
                "cos_cache": f["cos_cache"], "sin_cache": f["sin_cache"]}
        for n, arr in step.items():
            binding.bind_cpu_input(n, np.ascontiguousarray(arr))
        for n in kv:
            binding.bind_ortvalue_input(n, kv[n])
        binding.bind_output("out")
        binding.bind_ortvalue_output("present_key", kv["past_key"])
        binding.bind_ortvalue_output("present_value", kv["past_value"])
        sess.run_with_iobinding(binding)
        outs.append(binding.copy_outputs_to_cpu()[0])
    got = np.concatenate(outs, axis=1)
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


def _run_bound(sess: ort.InferenceSession, step: dict[str, np.ndarray], kv: dict[str, ort.OrtValue]) -> np.ndarray:
    binding = sess.io_binding()
    for n, arr in step.items():
        binding.bind_cpu_input(n, np.ascontiguousarray(arr))
    for n in kv:
        binding.bind_ortvalue_input(n, kv[n])
    binding.bind_output("out")
    binding.bind_ortvalue_output("present_key", kv["past_key"])
    binding.bind_ortvalue_output("present_value", kv["past_value"])
    sess.run_with_iobinding(binding)
    out: np.ndarray = binding.copy_outputs_to_cpu()[0]
    return out


DECODE_GROUPS = {   # one new position: the AVX2 and AVX-512 paths that take a KV group's rows together
    "default_model_heads": Case(s=2, hq=9, hkv=3, d=64, cap=208, totals=[200]),
    # beyond one 512-position key window: the step's windows are tasks, folded after; the chunk's
    # task folds them itself
    "three_windows": Case(s=2, hq=9, hkv=3, d=64, cap=1300, totals=[1290]),
    "batch2_windows": Case(b=2, s=2, hq=6, hkv=2, d=64, cap=1100, totals=[600, 1090]),
    "head_dim_128_windows": Case(s=2, hq=2, hkv=1, d=128, cap=1040, totals=[1030]),
    "window": Case(s=2, hq=9, hkv=3, d=64, cap=80, totals=[70], window=16),
    "head_dim_128": Case(s=2, hq=2, hkv=1, d=128, cap=136, totals=[130]),
    "head_dim_80": Case(s=2, hq=3, hkv=1, d=80, cap=72, totals=[65]),
    "batch2": Case(b=2, s=2, hq=6, hkv=2, d=64, cap=136, totals=[40, 131]),
}


@pytest.mark.parametrize("name", list(DECODE_GROUPS))
def test_decode_has_the_bits_of_the_same_query_in_a_chunk(native_on, name):
    """A decode step (one position: the rows of a KV group see the same keys and are computed
    together) gives the bits the same query gets as the last of a 2-token chunk (row by row)."""
    c = DECODE_GROUPS[name]
    f = as_half(feeds(c, np.random.default_rng(31)))
    kv = {n: ort.OrtValue.ortvalue_from_numpy(f[n].copy()) for n in ("past_key", "past_value")}
    step = {n: f[n] for n in ("query", "key", "value", "seqlens_k", "total_sequence_length", "cos_cache", "sin_cache")}
    chunk = _run_bound(session(model(c, True)), step, kv)
    one = replace(c, s=1)
    last = {**step, "query": f["query"][:, 1:2], "key": f["key"][:, 1:2], "value": f["value"][:, 1:2]}
    for threads in (1, 2):
        got = _run_bound(session(model(one, True), threads), last, kv)
        np.testing.assert_array_equal(got[:, 0], chunk[:, 1], err_msg=f"{name} threads={threads}")


def test_decode_wide_group_matches_float32_gqa(native_on):
    """Five query rows a KV head (the decode path's four plus one) against ORT's GQA."""
    c = Case(hq=5, hkv=1, d=64, cap=140, totals=[131])
    ref, got = _compare(c, seed=5)
    _check(c, ref, got)


PROMPT_SHAPES = {   # (query heads, KV heads, head size) of real models
    "default_model": (9, 3, 64),
    "llama_1b": (32, 8, 64),
    "qwen_1_5b": (12, 2, 128),
}


PROMPT_CHUNKS = {160: (160, 64, 48, 16), 1200: (1200, 512, 300, 48)}   # prompt length: chunk lengths


@pytest.mark.parametrize(("shape", "n"), [(s, 160) for s in PROMPT_SHAPES] + [("default_model", 1200)])
def test_a_prompt_has_the_same_bits_in_chunks_of_any_length(native_on, shape, n):
    """A prompt prefilled in chunks of 16, 48, 64 or 160 new positions (the runner's chunk length
    follows the model's shape) gives every position the same output and KV bits: the query rows
    of a chunk are split evenly among the tasks, so none lands in a short task on another path;
    past 512 positions, every row folds its key windows in the same order whatever its chunk."""
    hq, hkv, d = PROMPT_SHAPES[shape]
    chunks = PROMPT_CHUNKS[n]
    c = Case(s=n, hq=hq, hkv=hkv, d=d, cap=n, totals=[n])
    f = as_half(feeds(c, np.random.default_rng(41)))
    outs = {}
    for chunk in chunks:
        bufs = {x: np.zeros((1, hkv, n, d), np.float16) for x in ("past_key", "past_value")}   # kept alive
        kv = {x: ort.OrtValue.ortvalue_from_numpy(b) for x, b in bufs.items()}
        parts = []
        for s0 in range(0, n, chunk):
            s1 = min(n, s0 + chunk)
            step = {"query": f["query"][:, s0:s1], "key": f["key"][:, s0:s1], "value": f["value"][:, s0:s1],
                    "seqlens_k": np.array([s1 - 1], np.int32), "total_sequence_length": np.array([s1], np.int32),
                    "cos_cache": f["cos_cache"], "sin_cache": f["sin_cache"]}
            parts.append(_run_bound(session(model(replace(c, s=s1 - s0, totals=[s1]), True), 2), step, kv))
        outs[chunk] = (np.concatenate(parts, axis=1), bufs["past_key"], bufs["past_value"])
    for chunk in chunks[1:]:
        for got, want in zip(outs[chunk], outs[n], strict=True):
            np.testing.assert_array_equal(got, want, err_msg=f"{shape}: chunks of {chunk}")


def test_a_batch_decode_step_has_each_sequences_bits_alone(native_on):
    """Two sequences of 600 and 1090 positions decoded together (their key windows as tasks of a
    batch) give each one the bits it gets decoded alone."""
    c = Case(b=2, hq=9, hkv=3, d=64, cap=1100, totals=[600, 1090])
    f = as_half(feeds(c, np.random.default_rng(17)))
    both = session(model(c, True), 2).run(None, f)
    for i, t in enumerate(c.totals):
        one = replace(c, b=1, totals=[t])
        fi = {k: (v[i:i + 1] if k in ("query", "key", "value", "past_key", "past_value", "seqlens_k") else v)
              for k, v in f.items()}
        fi["total_sequence_length"] = np.array([t], np.int32)
        alone = session(model(one, True), 2).run(None, fi)
        np.testing.assert_array_equal(alone[0][0], both[0][i], err_msg=f"sequence {i}")
