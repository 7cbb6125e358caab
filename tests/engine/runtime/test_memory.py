"""Memory while generating: session options, KV sized once per prompt, prefill chunks
bounded by attention scratch, mapped weights given back, no `onnx` import in a generating process.

No RSS thresholds here (those are bench figures, docs/BENCHMARKS.md): the tests check the
mechanisms with byte counts and page counts that do not vary, and that results do not change."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

from engine.runtime.host import residency
from engine.runtime import runner as runner_mod
from engine.onnx.graph_scan import op_types, read_graph
from engine.runtime.model import ModelLoadError, load_model
from engine.runtime.native_ops import graph_is_native
from engine.runtime.model_config import ConfigError, check_external_data
from engine.runtime.providers import session_options
from engine.runtime.runner import Runner

REPO = Path(__file__).resolve().parents[3]


def _prompt(n: int, vocab: int = 200) -> list[int]:
    return [int(x) for x in np.random.default_rng(3).integers(3, vocab, size=n)]


# ---- session options ---------------------------------------------------------------------------
def test_cpu_sessions_run_without_the_memory_arena(tiny_model) -> None:
    assert session_options(2).enable_cpu_mem_arena is False
    # the loaded session was made with them (ORT reports its options back)
    assert tiny_model.session.get_session_options().enable_cpu_mem_arena is False


# ---- KV sized once per prompt ---------------------------------------------------------------------
def test_a_long_prompt_reserves_its_kv_once_not_by_doubling(tiny_model, monkeypatch) -> None:
    from engine.runtime import kvcache
    monkeypatch.setattr(runner_mod, "PREFILL_CHUNK", 16)
    monkeypatch.setattr(kvcache, "MIN_CAPACITY", 16)
    runner = Runner(tiny_model)
    cache = runner.new_cache()
    runner.forward(cache, _prompt(300))
    # chunk by chunk, the buffer grew 16 -> 32 -> ... -> 512, each copy holding both; one reserve: 304
    assert cache.capacity == 304
    assert len(cache) == 300
    per_pos = 2 * tiny_model.kv.n_layers * tiny_model.kv.kv_heads * tiny_model.kv.head_dim * 4
    assert cache.nbytes == cache.capacity * per_pos


def test_reserving_the_whole_prompt_leaves_the_logits_unchanged(tiny_model, monkeypatch) -> None:
    runner = Runner(tiny_model)
    ids = _prompt(90)
    whole = runner.forward(runner.new_cache(), ids)
    monkeypatch.setattr(runner_mod, "PREFILL_CHUNK", 7)      # many chunks, one reservation
    chunked = runner.forward(runner.new_cache(), ids)
    assert whole is not None and chunked is not None
    np.testing.assert_allclose(chunked, whole, rtol=1e-4, atol=1e-4)


# ---- prefill chunks bounded by the attention scratch ----------------------------------------------
def test_chunks_shrink_as_the_context_grows(tiny_model) -> None:
    runner = Runner(tiny_model)
    heads = tiny_model.config["num_attention_heads"]
    cache = runner.new_cache()
    assert runner.chunk_len(cache, 100) == runner_mod.PREFILL_CHUNK     # short: the full chunk
    budget_positions = runner_mod.ATTENTION_SCRATCH_BYTES // (2 * 4 * heads * 256)
    cache.reserve(budget_positions)          # scores of 256-token chunks fill the budget exactly
    assert cache.capacity == budget_positions
    assert runner.chunk_len(cache, 100) == 256
    cache.reserve(2 * budget_positions)
    assert runner.chunk_len(cache, 100) == 128
    cache.reserve(4 * budget_positions)
    assert runner.chunk_len(cache, 100) == runner_mod.MIN_CHUNK      # never below the floor


def test_small_scratch_budget_gives_the_same_logits(tiny_model, monkeypatch) -> None:
    runner = Runner(tiny_model)
    ids = _prompt(200)
    reference = runner.forward(runner.new_cache(), ids)
    monkeypatch.setattr(runner_mod, "ATTENTION_SCRATCH_BYTES", 1)    # every chunk MIN_CHUNK long
    monkeypatch.setattr(runner_mod, "MIN_CHUNK", 24)
    cache = runner.new_cache()
    assert runner.chunk_len(cache, len(ids)) == 24
    seen: list[int] = []
    small = runner.forward(cache, ids, between_chunks=lambda done: seen.append(done) or False)
    assert seen == list(range(24, 200, 24))
    assert small is not None and reference is not None
    np.testing.assert_allclose(small, reference, rtol=1e-4, atol=1e-4)


def test_the_generator_prefills_in_the_runners_chunks(generator, monkeypatch) -> None:
    from engine.api import SamplingParams
    from engine.generation.generate import PrefillProgress, collect
    ids = _prompt(150)
    greedy = SamplingParams(greedy=True, max_new_tokens=6)
    reference = collect(generator.stream(generator.new_cache(), ids, greedy))
    monkeypatch.setattr(runner_mod, "ATTENTION_SCRATCH_BYTES", 1)
    monkeypatch.setattr(runner_mod, "MIN_CHUNK", 32)
    events = list(generator.stream(generator.new_cache(), ids, greedy))
    progress = [e.done for e in events if isinstance(e, PrefillProgress)]
    assert progress == [0, 32, 64, 96, 128, 150]
    assert collect(iter(events)).token_ids == reference.token_ids


# ---- mapped weights given back ---------------------------------------------------------------------
SMAPS_SAMPLE = """\
7f00a0000000-7f00a0400000 rw-p 00001000 fe:00 42                         /models/m/model.onnx.data
Size:               4096 kB
Rss:                4096 kB
Private_Clean:      4096 kB
Private_Dirty:         0 kB
Anonymous:             0 kB
VmFlags: rd wr mr mw me ac
7f00a0400000-7f00a0401000 rw-p 00900000 fe:00 42                         /models/m/model.onnx.data
Size:                  4 kB
Rss:                   4 kB
Private_Dirty:         4 kB
Anonymous:             4 kB
7f00a0401000-7f00a0402000 r--p 00000000 fe:00 43                         /models/m/model.onnx
Rss:                   4 kB
7f00a0402000-7f00a0403000 rw-p 00000000 00:00 0
Rss:                   4 kB
7f00a0403000-7f00a0404000 r--p 00000000 fe:00 44                         /models/other/model.onnx.data
Rss:                   4 kB
"""


def test_smaps_parsing_keeps_the_model_folders_data_files(monkeypatch) -> None:
    monkeypatch.setattr(residency.os.path, "realpath", lambda p: str(p))
    maps = residency.model_mappings(Path("/models/m"), SMAPS_SAMPLE)
    assert [(m.start, m.end - m.start, m.rss_kib, m.dirty_kib, m.anon_kib) for m in maps] == [
        (0x7f00a0000000, 4 << 20, 4096, 0, 0), (0x7f00a0400000, 4096, 4, 4, 4)]


def _resident_kib(folder: Path) -> tuple[int, int]:
    maps = residency.model_mappings(folder, residency.SMAPS.read_text())
    return sum(m.rss_kib for m in maps), len(maps)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/smaps and madvise are Linux's")
def test_loading_gives_back_the_mapped_weights_and_results_stay(tiny_dir) -> None:
    model = load_model(tiny_dir, provider="cpu", threads=1)
    resident, count = _resident_kib(tiny_dir)
    assert count > 0, "ONNX Runtime 1.31 maps the external initializers it keeps (the embedding table)"
    assert resident == 0
    runner = Runner(model)
    cache = runner.new_cache()
    first = runner.forward(cache, [7])         # one token: a decode-sized step, nothing dropped after
    # the step read the rows it needed back from the page cache; giving them back again is exact
    assert _resident_kib(tiny_dir)[0] > 0
    assert residency.release_mapped_weights(tiny_dir) > 0
    assert _resident_kib(tiny_dir)[0] == 0
    again = runner.forward(runner.new_cache(), [7])
    assert first is not None and again is not None
    np.testing.assert_array_equal(again, first)


def test_releasing_elsewhere_is_a_no_op(tmp_path) -> None:
    assert residency.release_mapped_weights(tmp_path) == 0
    assert residency.drop_mapped_pages(tmp_path) == 0      # never checked clean: not touched


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/smaps and madvise are Linux's")
def test_a_prompt_leaves_no_embedding_pages_mapped_and_decode_still_matches(tiny_dir, monkeypatch) -> None:
    # The tiny model's mappings are all small enough to be kept (test_decode_after_prompt.py): here
    # every one is dropped, as the embedding tables of real models are.
    monkeypatch.setattr(residency, "KEEP_MAX_BYTES", 0)
    model = load_model(tiny_dir, provider="cpu", threads=1)
    runner = Runner(model)
    cache = runner.new_cache()
    logits = runner.forward(cache, _prompt(120))
    assert _resident_kib(tiny_dir)[0] == 0         # the rows the prompt read were dropped after it
    steps = []
    tok = int(np.argmax(logits))
    for _ in range(4):                             # decode reads rows back (not dropped per step)
        tok = int(np.argmax(runner.forward(cache, [tok])))
        steps.append(tok)
    reference = load_model(tiny_dir, provider="cpu", threads=1)
    ref_runner = Runner(reference)
    ref_cache = ref_runner.new_cache()
    tok = int(np.argmax(ref_runner.forward(ref_cache, _prompt(120))))
    ref_steps = []
    for _ in range(4):
        tok = int(np.argmax(ref_runner.forward(ref_cache, [tok])))
        ref_steps.append(tok)
    assert steps == ref_steps


# ---- the graph read without onnx -------------------------------------------------------------------
def _facts(proto) -> tuple[Any, ...]:
    inits = [(t.name, t.data_location, {e.key: e.value for e in t.external_data}) for t in proto.graph.initializer]
    nodes = [(n.op_type, n.domain, list(n.input), list(n.output)) for n in proto.graph.node]
    return proto.producer_name, nodes, inits


def test_the_graph_reads_as_onnx_reads_it(tiny_dir, default_model_dir) -> None:
    for folder in (tiny_dir, default_model_dir):
        graph = folder / "model.onnx"
        assert _facts(read_graph(graph)) == _facts(onnx.load(str(graph), load_external_data=False))
        # ORT's GroupQueryAttention, or Amber's own ai.amber.Attention in native conversions
        assert {"GroupQueryAttention", "Attention"} & op_types(read_graph(graph))


def test_generating_with_the_default_model_imports_no_onnx(default_model_dir) -> None:
    """The default model's native form prepares only small casts at load (ONNX Runtime folds
    them): a process that loads and runs it never imports onnx or ml_dtypes."""
    graph = default_model_dir / "model.onnx"
    if not graph_is_native(graph):
        pytest.skip("the default model is in its ONNX Runtime form here (prefold imports onnx for it)")
    code = ("import sys\n"
            "from engine.runtime.model import load_model\n"
            "from engine.runtime.runner import Runner\n"
            "model = load_model(sys.argv[1], provider='cpu', threads=1)\n"
            "runner = Runner(model)\n"
            "runner.forward(runner.new_cache(), [1, 2, 3])\n"
            "print(sorted(m for m in ('onnx', 'ml_dtypes', 'engine.runtime.prefold') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code, str(default_model_dir)], capture_output=True, text=True,
                         timeout=300, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_a_second_graph_message_merges_as_protobuf_merges(tiny_dir, tmp_path) -> None:
    """Protobuf merges a repeated `graph` field: an initializer hidden in a second copy is seen."""
    base = onnx.load(str(tiny_dir / "model.onnx"), load_external_data=False)
    extra = onnx.ModelProto()
    t = extra.graph.initializer.add(name="sneaky", data_type=onnx.TensorProto.FLOAT, dims=[4])
    t.data_location = onnx.TensorProto.EXTERNAL
    t.external_data.add(key="location", value="../../etc/passwd")
    path = tmp_path / "model.onnx"
    path.write_bytes(base.SerializeToString() + extra.SerializeToString())
    for f in tiny_dir.glob("*.onnx.data"):
        (tmp_path / f.name).write_bytes(f.read_bytes())
    ours = read_graph(path)
    theirs = onnx.load(str(path), load_external_data=False)
    assert _facts(ours) == _facts(theirs)
    with pytest.raises(ConfigError, match="sneaky.*outside the model folder"):
        check_external_data(ours, path)


def test_bytes_that_are_not_a_graph_are_refused_in_one_line(tiny_dir, tmp_path) -> None:
    folder = tmp_path / "broken"
    folder.mkdir()
    for f in tiny_dir.iterdir():
        if f.is_file():
            (folder / f.name).write_bytes(f.read_bytes())
    graph = (folder / "model.onnx").read_bytes()
    (folder / "model.onnx").write_bytes(graph[: len(graph) // 2])
    with pytest.raises(ModelLoadError) as err:
        load_model(folder, provider="cpu", threads=1)
    assert "model.onnx" in str(err.value) and "\n" not in str(err.value)


# ---- malloc's mmap threshold rides with the huge-page tunable ----------------------------------------
def test_the_huge_page_tunable_fixes_the_mmap_threshold_unless_the_user_set_one(tmp_path) -> None:
    from engine.runtime.host import hugepages
    thp = tmp_path / "enabled"
    thp.write_text("always [madvise] never\n")
    env = hugepages.tunable_env({}, thp, (2, 36))
    assert env is not None
    assert env["GLIBC_TUNABLES"].split(":") == ["glibc.malloc.hugetlb=1", "glibc.malloc.mmap_threshold=1048576"]
    theirs = hugepages.tunable_env({"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=65536"}, thp, (2, 36))
    assert theirs is not None
    assert theirs["GLIBC_TUNABLES"] == "glibc.malloc.mmap_threshold=65536:glibc.malloc.hugetlb=1"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc tunables")
def test_a_process_started_with_the_tunable_runs_with_that_threshold(tmp_path) -> None:
    """glibc takes the threshold (a typo would be ignored silently): after a 4 MiB block is freed,
    glibc's moving threshold would serve a 1.5 MiB block from the heap; with it fixed, it maps it."""
    import os
    from engine.runtime.host import hugepages
    thp = tmp_path / "enabled"
    thp.write_text("always [madvise] never\n")
    env = hugepages.tunable_env(dict(os.environ), thp, (2, 36))
    if env is None or hugepages.glibc_version() is None:
        pytest.skip("no glibc")
    code = (
        "import ctypes\n"
        "libc = ctypes.CDLL(None)\n"
        "libc.malloc.restype = libc.sbrk.restype = ctypes.c_void_p\n"
        "libc.free.argtypes = [ctypes.c_void_p]; libc.malloc.argtypes = [ctypes.c_size_t]\n"
        "libc.sbrk.argtypes = [ctypes.c_ssize_t]\n"
        "libc.free(libc.malloc(4 << 20))\n"          # raises a moving threshold to 4 MiB
        "top = libc.sbrk(0); p = libc.malloc(1536 << 10)\n"
        "print('from-heap', top <= p < libc.sbrk(0) or libc.sbrk(0) != top)\n"
    )
    def run(tunables: str) -> str:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                             env={**env, "GLIBC_TUNABLES": tunables})
        assert out.returncode == 0, out.stderr
        return out.stdout.strip()
    assert run(hugepages.HUGETLB) == "from-heap True"          # glibc's default: the heap
    assert run(env["GLIBC_TUNABLES"]) == "from-heap False"     # Amber's tunable: mapped, given back


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_trim_heap_gives_back_freed_heap_pages() -> None:
    """Blocks freed in the middle of the heap stay with the process until malloc_trim."""
    code = (
        "import ctypes\n"
        "from engine.runtime.host.malloc import trim_heap\n"
        "libc = ctypes.CDLL(None); libc.malloc.restype = ctypes.c_void_p\n"
        "libc.malloc.argtypes = [ctypes.c_size_t]; libc.free.argtypes = [ctypes.c_void_p]\n"
        "blocks = [libc.malloc(64 << 10) for _ in range(400)]\n"
        "for b in blocks: ctypes.memset(b, 1, 64 << 10)\n"
        "keep = libc.malloc(64 << 10)\n"        # the heap's top stays in use: no automatic trim
        "for b in blocks: libc.free(b)\n"
        "rss = lambda: int(open('/proc/self/statm').read().split()[1]) * 4096\n"
        "before = rss(); gave = trim_heap(); after = rss()\n"
        "print(gave, (before - after) >> 20)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert out.returncode == 0, out.stderr
    gave, mib = out.stdout.split()
    assert gave == "True" and int(mib) >= 24      # the 25 MiB freed, less partly used edge pages
