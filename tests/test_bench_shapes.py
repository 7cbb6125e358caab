"""The real-size comparison bench's own logic: llama.cpp build flags from CPU features, and the weight bytes
a decode step reads (ONNX and GGUF), on real small files."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from bench.suites import shapes as bench_shapes
from bench.harness import llama_build
from bench.harness import shapes_spec
from bench.suites.shapes_doc import render

ZEN5 = ("processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse2 avx f16c fma bmi1 avx2 bmi2 avx512f avx512dq "
        "avx512cd avx512bw avx512vl avx512vbmi avx512_vnni avx512_bf16 avx_vnni\n")
ZEN3 = "flags\t\t: fpu sse2 avx f16c fma bmi1 avx2 bmi2\n"
SPR = ZEN5.replace("avx_vnni", "avx_vnni amx_tile amx_int8 amx_bf16")


def test_flags_follow_cpu_features_and_never_enable_amx() -> None:
    zen5 = llama_build.cpu_flags(ZEN5)
    args = llama_build.cmake_args(zen5)
    assert args.split() == ["-DGGML_NATIVE=OFF", "-DGGML_AVX512=ON", "-DGGML_AVX512_VBMI=ON",
                            "-DGGML_AVX512_VNNI=ON", "-DGGML_AVX512_BF16=ON", "-DGGML_AVX_VNNI=ON"]
    assert "AMX" not in llama_build.cmake_args(llama_build.cpu_flags(SPR))
    assert llama_build.cmake_args(llama_build.cpu_flags(ZEN3)) == "-DGGML_NATIVE=OFF"
    # No AVX2: the baseline options are switched off instead of crashing at load.
    old = llama_build.cpu_flags("flags : sse2 avx\n")
    assert "-DGGML_AVX2=OFF" in llama_build.cmake_args(old) and "-DGGML_AVX=OFF" not in llama_build.cmake_args(old)


def test_side_venv_is_keyed_by_the_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AMBER_BENCH_VENV", raising=False)
    assert llama_build.side_venv(tmp_path, llama_build.cpu_flags(ZEN3)) == tmp_path / "bench-venv"
    zen5 = llama_build.side_venv(tmp_path, llama_build.cpu_flags(ZEN5))
    assert zen5 == tmp_path / "bench-venv-avx512-avx512_vbmi-avx512_vnni-avx512_bf16-avx_vnni"
    # AVX-512 without VNNI is another build, so another venv.
    assert llama_build.side_venv(tmp_path, llama_build.cpu_flags(ZEN5.replace(" avx512_vnni", ""))) != zen5
    monkeypatch.setenv("AMBER_BENCH_VENV", str(tmp_path / "mine"))
    assert llama_build.side_venv(tmp_path, llama_build.cpu_flags(ZEN5)) == tmp_path / "mine"


def _model(tmp: Path, external: bool) -> Path:
    table = numpy_helper.from_array(np.arange(40, dtype=np.float32).reshape(10, 4), "embed")   # 160 B, 16 B a row
    w = numpy_helper.from_array(np.ones((4, 8), np.float32), "w")                               # 128 B
    nodes = [helper.make_node("Gather", ["embed", "ids"], ["h"]), helper.make_node("MatMul", ["h", "w"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])], [table, w])
    model = helper.make_model(graph)
    path = tmp / "model.onnx"
    onnx.save(model, str(path), save_as_external_data=external, all_tensors_to_one_file=True,
              location="model.onnx.data", size_threshold=0)
    return tmp


@pytest.mark.parametrize("external", [False, True])
def test_onnx_decode_bytes_counts_one_embedding_row(tmp_path: Path, external: bool) -> None:
    got = bench_shapes.onnx_decode_bytes(str(_model(tmp_path, external)))
    assert got == {"decode_bytes": 16 + 128, "initializer_bytes": 160 + 128}


def _save_tied_table_model(folder: Path) -> None:
    """model.onnx in `folder`: a 10 x 4 float32 table read by a Gather and, transposed, by a MatMul."""
    table = numpy_helper.from_array(np.ones((10, 4), np.float32), "embed")
    nodes = [helper.make_node("Gather", ["embed", "ids"], ["h"]),
             helper.make_node("MatMul", ["h", "embed_t"], ["y"]), helper.make_node("Transpose", ["embed"], ["embed_t"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], [table])
    onnx.save(helper.make_model(graph), str(folder / "model.onnx"))


def test_onnx_decode_bytes_counts_a_tied_table_whole(tmp_path: Path) -> None:
    _save_tied_table_model(tmp_path)
    assert bench_shapes.onnx_decode_bytes(str(tmp_path))["decode_bytes"] == 160


def _gguf(path: Path, untied: bool) -> Path:
    import gguf
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tensor("token_embd.weight", np.ones((10, 4), np.float32))       # 160 B
    w.add_tensor("blk.0.ffn_up.weight", np.ones((8, 4), np.float16))       # 64 B
    if untied:
        w.add_tensor("output.weight", np.ones((10, 4), np.float32))       # 160 B
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_gguf_decode_bytes(tmp_path: Path) -> None:
    tied = bench_shapes.gguf_decode_bytes(str(_gguf(tmp_path / "tied.gguf", False)))
    assert tied == {"decode_bytes": 224, "tensor_bytes": 224}      # the output reads the whole table
    untied = bench_shapes.gguf_decode_bytes(str(_gguf(tmp_path / "untied.gguf", True)))
    assert untied == {"decode_bytes": 16 + 64 + 160, "tensor_bytes": 384}


def test_best_llama_config_is_chosen_per_figure_and_rendered() -> None:
    def eng(p: float, d: float, rss: int, load: float) -> dict:
        return {"prefill": {"2048": {"tokens_per_s": p}}, "decode": {"100": {"tokens_per_s": d}},
                "peak_rss_bytes": rss, "load_s": load}
    llama = {"llama.cpp FA on": eng(100, 10, 300 << 20, 0.5), "llama.cpp FA off": eng(80, 12, 280 << 20, 0.4)}
    best = bench_shapes._best(llama)
    assert best["prefill"]["2048"] == {"tokens_per_s": 100, "config": "llama.cpp FA on"}
    assert best["decode"]["100"] == {"tokens_per_s": 12, "config": "llama.cpp FA off"}
    assert best["peak_rss_bytes"]["value"] == 280 << 20
    amber = eng(160, 13, 350 << 20, 1.0)
    model = {"shape": "0.5b", "quant": "Q4_0", "label": "Qwen2.5-0.5B shape", "plan": {},
             "engines": {"Amber": amber, **llama},
             "best": best, "ratios": {"prefill_2048": 1.6, "decode_100": 13 / 12, "rss": 1.25, "load": 2.5},
             "bw_share": {"Amber": 0.5, "llama.cpp": 0.45}, "targets": {"prefill_2048": True, "decode_100": False}}
    text = render({"models": [model], "threads": 2, "facts": {"date": "d", "cpu": "c", "logical_cores": 2,
                                                                "memory_gib": 1, "os": "o", "python": "p", "ort": "r",
                                                                "threads": 2, "load_avg": [1.0, 1.0, 1.0]}})
    assert "1.60× ✅" in text and "1.08× ❌" in text and "1.25× ❌" in text and "50% ❌" in text
    assert "Targets met: 1 of 2." in text


def test_onnx_kernel_bytes_counts_the_forms_made_at_load(tmp_path: Path) -> None:
    """A float16 weight cast at load is read as float32; a constant slice is read at its own size;
    a gathered table counts one row. The stored count sees the file's bytes only."""
    table = numpy_helper.from_array(np.ones((10, 4), np.float32), "embed")                 # 16 B a row
    w16 = numpy_helper.from_array(np.ones((4, 8), np.float16), "w16")                      # 64 B stored
    big = numpy_helper.from_array(np.ones((8, 8), np.float32), "big")                      # 256 B stored
    consts = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
              (("lo", [0]), ("hi", [4]), ("ax", [0]))]
    nodes = [helper.make_node("Gather", ["embed", "ids"], ["h"]),
             helper.make_node("Cast", ["w16"], ["w32"], to=TensorProto.FLOAT),            # 128 B read
             helper.make_node("MatMul", ["h", "w32"], ["y1"]),
             helper.make_node("Slice", ["big", "lo", "hi", "ax"], ["part"]),              # [4, 8]: 128 B read
             helper.make_node("MatMul", ["h", "part"], ["y2"]),
             helper.make_node("Add", ["y1", "y2"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
                              [table, w16, big, *consts])
    onnx.save(helper.make_model(graph), str(tmp_path / "model.onnx"))
    got = bench_shapes.onnx_kernel_bytes(str(tmp_path))
    assert got == {"kernel_bytes": 16 + 128 + 128, "by_op": {"Gather": 16, "MatMul": 256}, "unknown_tensors": 0}
    assert bench_shapes.onnx_decode_bytes(str(tmp_path))["decode_bytes"] == 16 + 64 + 256 + 3 * 8


def test_onnx_kernel_bytes_of_a_converted_q4_k_m_model(tmp_path: Path) -> None:
    """On a real conversion (Q4_K with Q6_K parts, fast mode): what MatMulNBits reads is its levels,
    float32 scales and packed zero points at the node's own K, N, bits and block size, and the
    zero-point corrections are float32 [blocks, N] matrices; both exceed the compact file."""
    from engine.convert import FAST, convert_gguf
    from tests.support.tiny_gguf import TinyConfig, variant, write_tiny_gguf
    cfg = variant(TinyConfig(), wtype="Q4_K", tied=True, seed=40, n_embd=256, n_head=4, head_dim=64, n_ff=512,
                  overrides=(
        ("attn_v.weight", "Q6_K"), ("ffn_down.weight", "Q6_K"), ("token_embd.weight", "Q6_K")))
    write_tiny_gguf(tmp_path / "m.gguf", cfg)
    folder = convert_gguf(tmp_path / "m.gguf", tmp_path / "conv", accuracy_level=FAST, gpu_variant=False,
                          kernels="ort")   # the MatMulNBits forms
    g = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    nbits = corrections = 0
    seen_blocks = set()
    for node in g.graph.node:
        if node.op_type == "MatMulNBits":
            a = {x.name: helper.get_attribute_value(x) for x in node.attribute}
            nb = -(-a["K"] // a["block_size"])
            seen_blocks.add((a["bits"], a["block_size"]))
            nbits += a["N"] * nb * a["block_size"] * a["bits"] // 8 + a["N"] * nb * 4
            if len(node.input) > 3 and node.input[3]:
                nbits += a["N"] * -(-nb * a["bits"] // 8)
        elif node.op_type == "MatMul" and node.input[1].endswith("zp_correction"):
            corrections += 1
    got = bench_shapes.onnx_kernel_bytes(str(folder))
    assert got["unknown_tensors"] == 0
    assert {(8, 16), (4, 32)} <= seen_blocks                  # Q6_K as an 8-bit plane, Q4_K as 4-bit
    assert got["by_op"]["MatMulNBits"] == nbits
    assert corrections > 0 and got["by_op"]["MatMul"] > 0
    assert got["kernel_bytes"] > bench_shapes.onnx_decode_bytes(str(folder))["decode_bytes"]


def test_amber_bandwidth_share_uses_the_kernel_bytes_and_both_are_printed() -> None:
    def eng(d: float) -> dict:
        return {"prefill": {"2048": {"tokens_per_s": 100.0}}, "decode": {"100": {"tokens_per_s": d}},
                "peak_rss_bytes": 1 << 20, "load_s": 1.0}
    sizes = {"amber": {"decode_bytes": 100 << 20, "kernel_bytes": 150 << 20},
             "llama": {"decode_bytes": 90 << 20}, "gguf_file_bytes": 90 << 20, "onnx_file_bytes": 100 << 20}
    model = {"shape": "1b", "quant": "Q4_K_M", "label": "Llama-3.2-1B shape", "plan": {}, "sizes": sizes,
             "engines": {"Amber": eng(10.0), "llama.cpp FA on": eng(20.0)}}
    model["best"] = bench_shapes._best({"llama.cpp FA on": model["engines"]["llama.cpp FA on"]})
    model["ratios"] = {"prefill_2048": 1.0, "decode_100": 0.5, "rss": 1.0, "load": 1.0}
    bench_shapes._score(model, bandwidth=float(1 << 30))
    assert model["bw_share"]["Amber"] == pytest.approx(150 * 10 / 1024)       # kernel bytes, not stored
    assert model["bw_share"]["llama.cpp"] == pytest.approx(90 * 20 / 1024)
    del sizes["amber"]["kernel_bytes"]                                          # older results: stored bytes
    bench_shapes._score(model, bandwidth=float(1 << 30))
    assert model["bw_share"]["Amber"] == pytest.approx(100 * 10 / 1024)
    sizes["amber"]["kernel_bytes"] = 150 << 20
    text = render({"models": [model], "threads": 2, "facts": {"date": "d", "cpu": "c", "logical_cores": 2,
                                                                "memory_gib": 1, "os": "o", "python": "p", "ort": "r",
                                                                "threads": 2, "load_avg": [1.0, 1.0, 1.0]}})
    assert "Amber 100 MiB, llama.cpp 90 MiB (Amber's in the forms its kernels read, made at load: 150 MiB)" in text


def test_onnx_kernel_bytes_counts_a_tied_table_whole_under_its_matmul(tmp_path: Path) -> None:
    _save_tied_table_model(tmp_path)
    # The Gather reads a row of the stored table; the MatMul its transposed copy made at load.
    assert bench_shapes.onnx_kernel_bytes(str(tmp_path)) == {"kernel_bytes": 16 + 160,
                                                              "by_op": {"Gather": 16, "MatMul": 160},
                                                              "unknown_tensors": 0}
    table = numpy_helper.from_array(np.ones((10, 4), np.float32), "embed")
    direct = [helper.make_node("Gather", ["embed", "ids"], ["h"]), helper.make_node("MatMul", ["h", "embed"], ["y"])]
    graph = helper.make_graph(direct, "g", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [table])
    onnx.save(helper.make_model(graph), str(tmp_path / "model.onnx"))
    # One tensor read by both: counted once, whole, under the op that reads it whole.
    assert bench_shapes.onnx_kernel_bytes(str(tmp_path))["by_op"] == {"MatMul": 160}


def test_native_column_is_scored_against_llama_and_against_the_ort_form(tmp_path: Path) -> None:
    """--amber-kernels ort,native: the native form's ratios to llama.cpp's best and to Amber's ORT
    form, its bandwidth share from its own folder's bytes, both tables rendered; unknown forms refused."""
    def eng(p: float, d: float, rss: int) -> dict:
        return {"prefill": {"2048": {"tokens_per_s": p}}, "decode": {"100": {"tokens_per_s": d}},
                "peak_rss_bytes": rss, "load_s": 1.0}
    sizes = {"amber": {"decode_bytes": 100 << 20}, "native": {"decode_bytes": 90 << 20},
             "llama": {"decode_bytes": 90 << 20}, "gguf_file_bytes": 90 << 20, "onnx_file_bytes": 100 << 20}
    native = eng(80.0, 30.0, 200 << 20)
    model = {"shape": "135m", "quant": "Q4_1", "label": "SmolLM2-135M", "plan": {}, "sizes": sizes,
             "engines": {"Amber": eng(100.0, 20.0, 300 << 20), shapes_spec.AMBER_NATIVE: native,
                         "llama.cpp FA on": eng(50.0, 25.0, 250 << 20)}}
    best = model["best"] = bench_shapes._best({"llama.cpp FA on": model["engines"]["llama.cpp FA on"]})
    model["ratios"] = bench_shapes._ratios(model["engines"]["Amber"], best)
    model["ratios_native"] = bench_shapes._ratios(native, best)
    model["ratios_native_vs_ort"] = bench_shapes._ratios(native, bench_shapes._as_best(model["engines"]["Amber"]))
    assert model["ratios_native"]["decode_100"] == pytest.approx(1.2)
    assert model["ratios_native_vs_ort"]["decode_100"] == pytest.approx(1.5)
    assert model["ratios_native_vs_ort"]["rss"] == pytest.approx(200 / 300)
    bench_shapes._score(model, bandwidth=float(1 << 30))
    assert model["bw_share"][shapes_spec.AMBER_NATIVE] == pytest.approx(90 * 30 / 1024)   # older results
    sizes["native"]["kernel_bytes"] = 80 << 20      # what its kernels read, as Amber's column counts
    bench_shapes._score(model, bandwidth=float(1 << 30))
    assert model["bw_share"][shapes_spec.AMBER_NATIVE] == pytest.approx(80 * 30 / 1024)
    text = render({"models": [model], "threads": 2, "facts": {"date": "d", "cpu": "c", "logical_cores": 2,
                                                                "memory_gib": 1, "os": "o", "python": "p", "ort": "r",
                                                                "threads": 2, "load_avg": [1.0, 1.0, 1.0]}})
    assert "**Amber native** (`--amber-kernels ort,native`" in text and "1.50×" in text and "0.67×" in text
    assert "Amber native (GGUF blocks, as its kernels read them): 80 MiB" in text
    with pytest.raises(ValueError, match="unknown --amber-kernels"):
        bench_shapes.run(kernels=["fast"], save=str(tmp_path / "r.json"))


def test_ort_form_as_the_second_column_when_native_is_scored() -> None:
    """--amber-kernels native,ort (the default form scored): the ORT form's column gets its own ratios,
    share and table, and the scored column says which conversion it is."""
    def eng(p: float, d: float, rss: int) -> dict:
        return {"prefill": {"2048": {"tokens_per_s": p}}, "decode": {"100": {"tokens_per_s": d}},
                "peak_rss_bytes": rss, "load_s": 1.0}
    sizes = {"amber": {"decode_bytes": 90 << 20}, "ort": {"decode_bytes": 100 << 20, "kernel_bytes": 120 << 20},
             "llama": {"decode_bytes": 90 << 20}, "gguf_file_bytes": 90 << 20, "onnx_file_bytes": 90 << 20}
    ort_form = eng(100.0, 20.0, 300 << 20)
    model = {"shape": "135m", "quant": "Q4_1", "label": "SmolLM2-135M", "plan": {}, "sizes": sizes,
             "kernels": ["native", "ort"],
             "engines": {"Amber": eng(80.0, 30.0, 200 << 20), shapes_spec.AMBER_ORT: ort_form,
                         "llama.cpp FA on": eng(50.0, 25.0, 250 << 20)}}
    best = model["best"] = bench_shapes._best({"llama.cpp FA on": model["engines"]["llama.cpp FA on"]})
    model["ratios"] = bench_shapes._ratios(model["engines"]["Amber"], best)
    name, key, vs_key = shapes_spec.SECOND["ort"]
    model[key] = bench_shapes._ratios(ort_form, best)
    model[vs_key] = bench_shapes._ratios(ort_form, bench_shapes._as_best(model["engines"]["Amber"]))
    assert model[vs_key]["decode_100"] == pytest.approx(20 / 30)
    bench_shapes._score(model, bandwidth=float(1 << 30))
    assert model["bw_share"][name] == pytest.approx(120 * 20 / 1024)
    assert model["bw_share"]["Amber"] == pytest.approx(90 * 30 / 1024)
    text = render({"models": [model], "threads": 2, "facts": {"date": "d", "cpu": "c", "logical_cores": 2,
                                                                "memory_gib": 1, "os": "o", "python": "p", "ort": "r",
                                                                "threads": 2, "load_avg": [1.0, 1.0, 1.0]}})
    assert "\"Amber\" is the conversion `--amber-kernels native`" in text
    assert "**Amber ORT form** (`--amber-kernels native,ort`" in text and "0.67×" in text
    assert "Amber ORT form (as MatMulNBits reads it): 120 MiB" in text
    assert "**Amber native**" not in text


@pytest.mark.parametrize("tied", [True, False])
def test_native_form_bytes_are_the_ggufs_matrices_once(tmp_path: Path, tied: bool) -> None:
    """A real native conversion (GgufMatMul over the GGUF's rows; a Q6_K embedding the graph decodes
    at load for its lookup): what a step reads is each matrix's GGUF bytes once, tied or not, and
    the embedding's lookup table one row. The stored count takes the decoded lookup table whole
    (the bug that put the native column's bandwidth share at 1.27x its bytes at 1B)."""
    from gguf import GGUFReader

    from engine import native
    from engine.convert import FAST, convert_gguf
    from tests.support.tiny_gguf import TinyConfig, variant, write_tiny_gguf
    if not native.supports(12):
        pytest.skip("the native kernels are not built here")
    cfg = variant(TinyConfig(), wtype="Q4_K", tied=tied, seed=41, n_embd=256, n_head=4, head_dim=64, n_ff=512,
                  overrides=(("token_embd.weight", "Q6_K"),))
    write_tiny_gguf(tmp_path / "m.gguf", cfg)
    folder = convert_gguf(tmp_path / "m.gguf", tmp_path / "conv", accuracy_level=FAST, gpu_variant=False,
                          kernels="native")
    g = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    assert any(n.op_type == "GgufMatMul" for n in g.graph.node)
    tensors = {t.name: t for t in GGUFReader(str(tmp_path / "m.gguf"), "r").tensors}
    ends = ("token_embd.weight", "output.weight")
    matrices = sum(int(t.n_bytes) for n, t in tensors.items() if len(t.shape) == 2 and n not in ends)
    output = tensors["token_embd.weight" if tied else "output.weight"]
    got = bench_shapes.onnx_kernel_bytes(str(folder))
    assert got["unknown_tensors"] == 0
    assert got["by_op"]["GgufMatMul"] == matrices + int(output.n_bytes)
    stored = bench_shapes.onnx_decode_bytes(str(folder))["decode_bytes"]
    emb_rows = int(tensors["token_embd.weight"].shape[-1])
    assert stored - got["kernel_bytes"] >= int(tensors["token_embd.weight"].n_bytes) * (emb_rows - 1) // emb_rows


def test_amber_worker_refuses_to_measure_another_form_than_the_folders(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A native folder loads its ONNX Runtime form where Amber's kernels cannot run (here: turned
    off by AMBER_KERNELS=ort, as a stale library would): the bench worker must stop with the reason
    instead of writing that form's figures as Amber's; with the kernels on it measures."""
    import json

    from engine import config, native
    from engine.convert import FAST, convert_gguf
    from tests.support.tiny_gguf import TinyConfig, variant, write_tiny_gguf
    if not native.supports(2):
        pytest.skip("the native kernels are not built here")
    write_tiny_gguf(tmp_path / "m.gguf", variant(TinyConfig(), wtype="Q4_0", seed=43))
    folder = convert_gguf(tmp_path / "m.gguf", tmp_path / "conv", accuracy_level=FAST, gpu_variant=False,
                          kernels="native")
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps([5, 6, 7, 8, 9, 10, 11, 12]))
    args = dict(model_dir=str(folder), threads=1, tokens_file=str(tokens), prefill_sizes=[4],
                decode_contexts=[4], decode_steps=2, runs=1)
    out = bench_shapes.worker_amber(**args)
    assert len(out["decode"]["4"]) == 1 and out["prefill"]["4"]
    monkeypatch.setenv(config.KERNELS, "ort")
    with pytest.raises(bench_shapes.FormError, match=r"ONNX Runtime form .*AMBER_KERNELS=ort turns them off"):
        bench_shapes.worker_amber(**args)
    assert (folder / "ort" / "model.onnx").is_file()   # the engine itself did load that form
