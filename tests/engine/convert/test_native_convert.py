"""The converter's native form (engine/convert/native_form.py): GgufMatMul nodes over the GGUF's own
rows, the kernels setting recorded and followed, and what happens where Amber's kernel library
cannot run. The end-to-end checks (native vs ORT logits, greedy tokens, a session round trip) run
only where the library is built (`python -m engine.native.build`)."""
from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import numpy as np
import onnx
import pytest
from gguf import GGMLQuantizationType as QT  # noqa: N814 - short, like ggml's own type tags
from gguf import GGUFReader, quants
from onnx import numpy_helper

from engine.convert import EXACT, FAST, ModelImportError, convert_gguf, default_model, native_form
from engine.onnx.variants import build_variant
from engine.runtime import native_ops
from engine.runtime.model import load_model
from tests.support.reference_model import Q4K, prompt
from tests.support.tiny_gguf import TinyConfig, variant, write_tiny_gguf

BASE = TinyConfig(seed=70)
Q4_K_M = variant(BASE, wtype="Q4_K", tied=False, seed=71, **Q4K,
                 overrides=(("attn_v.weight", "Q6_K"), ("ffn_down.weight", "Q6_K"), ("output.weight", "Q6_K"),
                            ("token_embd.weight", "Q5_0")))
FORMS = [variant(BASE, wtype="Q4_0", seed=72), variant(BASE, wtype="Q4_1", seed=73),
         variant(BASE, wtype="Q5_0", tied=False, seed=74), variant(BASE, wtype="Q5_1", seed=75),
         variant(BASE, wtype="Q8_0", arch="qwen2", bias=True, seed=76),
         variant(BASE, wtype="Q4_K", seed=77, **Q4K), variant(BASE, wtype="Q5_K", seed=78, **Q4K),
         variant(BASE, wtype="Q6_K", tied=False, seed=79, **Q4K), Q4_K_M,
         variant(BASE, wtype="Q4_0", arch="phi3", seed=80)]
IDS = [c.name for c in FORMS]
DOMAIN = "ai.amber"


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """converted(cfg, kernels, level=FAST, types=None) -> (TinyModel, folder). The converter's side is
    checked for every type of the op contract whatever the built kernels handle yet (`types`
    None: the contract's types; the end-to-end tests pass the library's own list)."""
    root = tmp_path_factory.mktemp("native")
    made: dict[tuple[str, str], tuple] = {}
    models: dict[str, object] = {}

    def get(cfg: TinyConfig, kernels: str, level: int = FAST, types: frozenset | None = None):
        key = (cfg.name, f"{kernels}{level}{sorted(types) if types is not None else ''}")
        if key not in made:
            src = root / f"{cfg.name}.gguf"
            if cfg.name not in models:
                models[cfg.name] = write_tiny_gguf(src, cfg)
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(native_form, "kernel_types",
                           lambda: native_form.CONTRACT_TYPES if types is None else types)
                made[key] = (models[cfg.name], convert_gguf(src, root / f"{cfg.name}.{kernels}{level}.{len(made)}",
                                                            accuracy_level=level, kernels=kernels))
        return made[key]
    return get


@pytest.fixture(scope="module")
def library():
    """The kernel library, built once (as tests/engine/native/conftest.py does), used with
    AMBER_KERNELS=native so the op runs whatever ISA this machine has; the types it handles."""
    try:
        import engine.native as native
        from engine.native import build
    except ImportError:
        pytest.skip("engine.native has no build module here (the op library is not merged)")
    if build.find_compiler() is None and native.library_path() is None:
        pytest.skip("no C compiler (cc/gcc/clang) to build the native kernels")
    build.build()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AMBER_KERNELS", "native")
        assert native_ops.unavailable_reason() is None
        types = frozenset(t for t in native_form.CONTRACT_TYPES if native.supports(int(t)))
        yield types


def _graph(folder: Path, data: bool = False) -> onnx.ModelProto:
    return onnx.load(str(folder / "model.onnx"), load_external_data=data)


def _expected(model, prefix: str) -> np.ndarray | None:
    """The HF-order float values a GgufMatMul named `prefix` must hold (the test's own reference)."""
    w, c = model.weights, model.config
    if prefix == "lm_head":
        return w["lm_head"] if not c.tied else w["embed"]
    layer, kind = prefix.split(".")[2], prefix.split(".")[-1]
    p = f"layers.{layer}."
    parts = {"qkv_proj": ["q", "k", "v"], "gate_up_proj": ["gate", "up"], "q_proj": ["q"], "k_proj": ["k"],
             "v_proj": ["v"], "o_proj": ["o"], "gate_proj": ["gate"], "up_proj": ["up"], "down_proj": ["down"]}
    return np.concatenate([w[p + x] for x in parts[kind]])


@pytest.mark.parametrize("cfg", FORMS, ids=IDS)
def test_native_graph_holds_the_gguf_rows(converted, cfg):
    """Every matrix of a type the kernels handle is a GgufMatMul whose W is the GGUF's bytes: each
    row of W is a row of the file's tensor, and W decodes to the weight in Hugging Face order (the
    Q/K unpermute and the Q|K|V, gate|up fusions are whole rows)."""
    model, folder = converted(cfg, "native")
    g = _graph(folder, data=True)
    assert any(o.domain == DOMAIN and o.version == 1 for o in g.opset_import)
    inits = {i.name: i for i in g.graph.initializer}
    reader = GGUFReader(str(model.path))
    gguf_rows: dict[bytes, int] = {}
    for t in reader.tensors:
        if len(t.shape) == 2 and t.tensor_type in native_form.CONTRACT_TYPES:
            for row in np.asarray(t.data).reshape(int(t.shape[1]), -1):
                gguf_rows[row.tobytes()] = int(t.tensor_type)
    nodes = [n for n in g.graph.node if n.op_type == "GgufMatMul"]
    assert {n.domain for n in nodes} == {DOMAIN}
    assert not [n for n in g.graph.node if n.op_type == "MatMulNBits"]     # every type here is native
    covered = set()
    for n in nodes:
        attrs = {a.name: a.i for a in n.attribute}
        wname = n.input[1]
        raw = numpy_helper.to_array(inits[wname])
        qt = QT(attrs["ggml_type"])
        block, size = quants.GGML_QUANT_SIZES[qt]
        assert raw.dtype == np.uint8 and raw.shape == (attrs["N"], attrs["K"] // block * size)
        assert all(gguf_rows.get(row.tobytes()) == attrs["ggml_type"] for row in raw)
        prefix = wname.removesuffix(".gguf_rows")
        want = _expected(model, prefix)
        got = quants.dequantize(raw, qt).reshape(attrs["N"], attrs["K"])
        np.testing.assert_array_equal(got, want.astype(np.float32))
        covered.add(prefix.split(".")[-1])
    n_layers = cfg.n_layers
    assert "lm_head" in covered                                  # the tied head reads the raw rows too
    if cfg.overrides:   # Q4_K_M: Q/K Q4_K, V Q6_K -> separate nodes; gate|up one node
        assert {"q_proj", "k_proj", "v_proj", "gate_up_proj"} <= covered
    else:
        assert {"qkv_proj", "gate_up_proj", "o_proj", "down_proj"} <= covered
        assert len(nodes) == 4 * n_layers + 1
    # The embedding lookup keeps its Gather form (it never reads GgufMatMul's W).
    assert any(n.op_type == "Gather" and n.input[0].startswith("model.embed_tokens") for n in g.graph.node)
    info = json.loads((folder / "amber_import.json").read_text())
    assert info["kernels"] == "native"
    assert not (folder / "gpu").exists()                          # no float16 variant of a CPU-only graph


def test_ort_form_and_exact_mode_have_no_native_nodes(converted):
    for kernels, level in (("ort", FAST), ("native", EXACT)):
        _, folder = converted(FORMS[1], kernels, level)
        g = _graph(folder)
        assert not [n for n in g.graph.node if n.domain == DOMAIN]
        assert all(o.domain != DOMAIN for o in g.opset_import)
        assert json.loads((folder / "amber_import.json").read_text())["kernels"] == "ort"


def test_types_the_kernels_lack_keep_their_ort_form(converted, tmp_path):
    """F16 matrices (no native kernel) stay MatMul; a requantizing --weights policy stays MatMulNBits."""
    cfg = variant(BASE, wtype="Q8_0", overrides=(("ffn_down.weight", "F16"),), seed=81)
    model, folder = converted(cfg, "native")
    ops = [n.op_type for n in _graph(folder).graph.node]
    assert ops.count("GgufMatMul") == 3 * cfg.n_layers + 1 and "MatMul" in ops
    out = convert_gguf(model.path, tmp_path / "int4", weights="int4", accuracy_level=FAST, kernels="native")
    assert not [n for n in _graph(out).graph.node if n.domain == DOMAIN]


def test_the_gpu_variant_of_a_native_graph_comes_from_its_ort_form(converted, tmp_path):
    """GgufMatMul has no GPU kernel: the variant is made from the folder's ORT form (ort/), not refused."""
    _, folder = converted(FORMS[0], "native")
    graph = build_variant(folder, dest=tmp_path / "gpu")
    assert not [n for n in onnx.load(str(graph), load_external_data=False).graph.node if n.domain == DOMAIN]
    assert (folder / "ort" / "model.onnx").is_file()


def test_choose_kernels_follows_the_setting(monkeypatch):
    monkeypatch.setattr(native_form, "library_available", lambda: True)
    monkeypatch.setenv("AMBER_KERNELS", "ort")
    assert native_form.choose_kernels() == "ort"
    monkeypatch.setenv("AMBER_KERNELS", "native")
    assert native_form.choose_kernels() == "native"
    assert native_form.choose_kernels(gpu=True) == "native"     # forced
    monkeypatch.delenv("AMBER_KERNELS")
    assert native_form.choose_kernels(gpu=False) == native_form.DEFAULT_KERNELS
    monkeypatch.setattr(native_form, "DEFAULT_KERNELS", "native")
    assert native_form.choose_kernels(gpu=False) == "native"
    assert native_form.choose_kernels(gpu=True) == "ort"        # never regress GPU users
    monkeypatch.setattr(native_form, "library_available", lambda: False)
    monkeypatch.setenv("AMBER_KERNELS", "native")
    assert native_form.choose_kernels(gpu=False) == "ort"       # no library: the ORT form
    with pytest.raises(ModelImportError, match="unknown kernels option"):
        convert_gguf("x.gguf", "y", kernels="fast")


def _no_library(monkeypatch):
    import engine.native as native
    monkeypatch.setattr(native, "library_path", lambda: None, raising=False)
    monkeypatch.setattr(native, "available", lambda: False, raising=False)


def test_native_model_without_the_library_loads_its_ort_form(converted, monkeypatch):
    _, folder = converted(FORMS[1], "native")
    _no_library(monkeypatch)
    m = load_model(folder, provider="cpu", threads=1)
    assert m.graph == folder / "ort" / "model.onnx"
    assert not native_ops.graph_is_native(m.graph)


def _marker(folder: Path, **extra: object) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.onnx").write_bytes(b"graph")
    (folder / default_model.MARKER).write_text(json.dumps({"gguf_sha256": default_model.GGUF_SHA256,
                                                           "accuracy_level": default_model.FAST, **extra}))
    return folder


def test_default_model_follows_the_kernels_setting(tmp_path, monkeypatch):
    """A default model converted with one form is converted again when the setting changes; where
    the wheel cannot be had, the form that still runs is used; a native one without the library is
    not ready (the CLI then asks for fetch-default, which converts the ORT form)."""
    monkeypatch.setenv("AMBER_HOME", str(tmp_path / "home"))
    from engine.base import paths
    monkeypatch.setattr(default_model, "library_available", lambda: True)
    monkeypatch.setattr(native_form, "library_available", lambda: True)
    ort_dir = _marker(paths.default_model_dir())                    # an older marker: the ORT form
    monkeypatch.setenv("AMBER_KERNELS", "ort")
    assert default_model.is_ready(ort_dir) and default_model.is_current(ort_dir)
    monkeypatch.setenv("AMBER_KERNELS", "native")
    assert default_model.is_ready(ort_dir) and not default_model.is_current(ort_dir)

    def no_network(*_: object) -> Path:
        raise default_model.DefaultModelError("could not download")
    monkeypatch.setattr(default_model, "_download_wheel", no_network)
    assert default_model.ensure_default_model() == ort_dir          # no wheel: the ORT form still runs
    native_dir = _marker(tmp_path / "n", kernels="native", kernels_chosen="native", attention="amber",
                         swiglu="fused")
    assert default_model.is_current(native_dir)
    old_native = _marker(tmp_path / "o", kernels="native", kernels_chosen="native")   # float32 GQA: made again
    assert default_model.is_ready(old_native) and not default_model.is_current(old_native)
    monkeypatch.setenv("AMBER_NATIVE_ATTENTION", "0")
    monkeypatch.setenv("AMBER_NATIVE_SWIGLU", "0")
    assert default_model.is_current(old_native) and not default_model.is_current(native_dir)
    monkeypatch.delenv("AMBER_NATIVE_ATTENTION")
    # made with ai.amber.Attention but before GgufMatMul's SwiGLU epilogue: made again once
    pre_swiglu = _marker(tmp_path / "p", kernels="native", kernels_chosen="native", attention="amber")
    assert default_model.is_current(pre_swiglu) and not default_model.is_current(native_dir)
    monkeypatch.delenv("AMBER_NATIVE_SWIGLU")
    assert not default_model.is_current(pre_swiglu) and default_model.is_current(native_dir)
    monkeypatch.setattr(default_model, "library_available", lambda: False)
    assert default_model.is_ready(native_dir)        # loads anywhere (re-formed for ONNX Runtime)
    assert not default_model.is_current(native_dir)


def _wheel() -> Path:
    home = os.environ.get("AMBER_TEST_HOME")
    wheel = Path(home or ".") / "downloads" / default_model.WHEEL_FILE
    if not home or not wheel.is_file():
        pytest.skip(f"no {default_model.WHEEL_FILE} under AMBER_TEST_HOME/downloads (make default-model keeps it)")
    return wheel


@pytest.mark.slow
def test_default_model_is_converted_again_when_the_kernels_setting_changes(library, tmp_path, monkeypatch):
    """The real default model converted native, then AMBER_KERNELS=ort: it is not current any more,
    ensure_default_model converts the ORT form in its place, and that loads and generates."""
    wheel, folder = _wheel(), tmp_path / "m"
    out = default_model.ensure_default_model(model_dir=folder, wheel=wheel)     # AMBER_KERNELS=native here
    marker = json.loads((out / default_model.MARKER).read_text())
    assert marker["kernels"] == marker["kernels_chosen"] == "native"
    assert native_ops.graph_is_native(out / "model.onnx") and default_model.is_current(out)
    monkeypatch.setenv("AMBER_KERNELS", "ort")
    assert default_model.is_ready(out) and not default_model.is_current(out)
    assert load_model(out, provider="cpu", threads=1).graph == out / "ort" / "model.onnx"    # re-formed
    again = default_model.ensure_default_model(model_dir=folder, wheel=wheel)
    marker = json.loads((again / default_model.MARKER).read_text())
    assert again == out and marker["kernels"] == marker["kernels_chosen"] == "ort"
    assert not native_ops.graph_is_native(again / "model.onnx")
    assert _greedy_ids(again, [1, 2, 3, 4], 4)


# ---- end to end: where the library is built ----------------------------------------------------
# Native vs ORT form: both quantize activations to int8 per block of 32 (llama.cpp's numerics, ORT's
# accuracy level 4), with different rounding details, on random models whose logits have std ~1.
NATIVE_TOL, NATIVE_REL = 0.4, 0.1
E2E = [variant(BASE, wtype="Q4_1", seed=73), variant(BASE, wtype="Q8_0", seed=82), Q4_K_M,
       variant(BASE, wtype="Q6_K", tied=False, seed=79, **Q4K)]


def _logits(folder: Path, ids: np.ndarray) -> np.ndarray:
    """The last position's logits from a fresh CPU session over `ids` (empty past), as the engine feeds it."""
    import onnxruntime as ort
    from engine.runtime.providers import session_options
    so = session_options(1)
    if native_ops.graph_is_native(folder / "model.onnx"):
        assert native_ops.register(so)
    sess = ort.InferenceSession(str(folder / "model.onnx"), so, providers=["CPUExecutionProvider"])
    cfg = json.loads((folder / "config.json").read_text())
    n_layers, kv, hd = cfg["num_hidden_layers"], cfg["num_key_value_heads"], cfg["head_dim"]
    feed = {"input_ids": ids[None].astype(np.int64), "attention_mask": np.ones((1, len(ids)), np.int64),
            "position_ids": np.arange(len(ids), dtype=np.int64)[None]}
    types = {i.name: i.type for i in sess.get_inputs()}   # float16 KV with ai.amber.Attention
    for i in range(n_layers):
        for kind in ("key", "value"):
            name = f"past_key_values.{i}.{kind}"
            feed[name] = np.zeros((1, kv, 0, hd), np.float16 if types[name] == "tensor(float16)" else np.float32)
    return np.asarray(sess.run(["logits"], feed)[0], np.float64).reshape(-1)


def _greedy_ids(folder: Path, ids: list[int], n: int) -> list[int]:
    from engine.api import SamplingParams
    from engine.generation.generate import Generator, collect
    model = load_model(folder, provider="cpu", threads=1)
    gen = Generator(model)
    sampling = SamplingParams(greedy=True, repetition_penalty=1.0, max_new_tokens=n)
    return collect(gen.stream(gen.new_cache(), ids, sampling)).token_ids


def _need(types: frozenset, cfg: TinyConfig) -> None:
    wanted = {QT[cfg.wtype]} | {QT[t] for _, t in cfg.overrides if t in QT.__members__}
    if not wanted & types:
        pytest.skip(f"the built kernels handle none of {sorted(t.name for t in wanted)} yet")


@pytest.mark.parametrize("cfg", E2E, ids=[c.name for c in E2E])
def test_native_logits_agree_with_the_ort_form(converted, library, cfg):
    _need(library, cfg)
    model, ort_dir = converted(cfg, "ort")
    _, nat_dir = converted(cfg, "native", types=library)
    assert native_ops.graph_is_native(nat_dir / "model.onnx")
    for seed in range(3):
        ids = prompt(model, 21, seed)
        a, b = _logits(ort_dir, ids), _logits(nat_dir, ids)
        d = float(np.abs(a - b).max())
        assert d <= NATIVE_TOL, d
        assert np.linalg.norm(a - b) / np.linalg.norm(a) <= NATIVE_REL


def test_native_greedy_tokens_equal_the_ort_form(converted, library):
    """On a model whose greedy choice is stable (a wide logit margin), both forms pick the same 8 tokens."""
    cfg = variant(BASE, wtype="Q8_0", seed=82)
    _need(library, cfg)
    model, ort_dir = converted(cfg, "ort")
    _, nat_dir = converted(cfg, "native", types=library)
    ids = list(map(int, prompt(model, 12, 5)))
    want = _greedy_ids(ort_dir, ids, 8)
    assert len(want) == 8
    assert _greedy_ids(nat_dir, ids, 8) == want


def test_native_session_round_trip(converted, library, tmp_path):
    """generate, pin, shut down, reopen from disk and continue: the same tokens as never stopping."""
    from engine.api import SamplingParams, SessionKind
    from engine.sessions.manager import SessionManager
    cfg = variant(BASE, wtype="Q8_0", seed=82)
    _need(library, cfg)
    model, folder = converted(cfg, "native", types=library)
    assert native_ops.graph_is_native(folder / "model.onnx")
    loaded = load_model(folder, provider="cpu", threads=1)
    greedy = SamplingParams(greedy=True, repetition_penalty=1.0, max_new_tokens=8)
    p1 = list(map(int, prompt(model, 40, 1)))
    from engine.generation.generate import collect
    s1, s2 = str(uuid.uuid4()), str(uuid.uuid4())
    m = SessionManager(loaded, tmp_path / "state", block_tokens=16)
    m.open(s1, SessionKind.PINNED)
    t1 = collect(m.generate_tokens(s1, p1, greedy)).token_ids
    assert m.wait_for_saves()
    m.shutdown()
    p2 = p1 + t1 + list(map(int, prompt(model, 12, 2)))
    live = SessionManager(loaded, tmp_path / "live", block_tokens=16)
    live.open(s2, SessionKind.TEMPORARY)
    assert collect(live.generate_tokens(s2, p1, greedy)).token_ids == t1
    never = collect(live.generate_tokens(s2, p2, greedy)).token_ids
    live.shutdown()
    m2 = SessionManager(load_model(folder, provider="cpu", threads=1), tmp_path / "state", block_tokens=16)
    assert m2.open(s1).tokens == len(p1) + len(t1) - 1
    r = collect(m2.generate_tokens(s1, p2, greedy))
    m2.shutdown()
    assert r.figures.resume == "disk" and r.token_ids == never


def test_native_model_asked_for_the_gpu_gets_a_variant_from_its_ort_form(converted, library, monkeypatch):
    """A GPU provider wanted for a native folder: its float16 variant is made from the folder's ORT
    form (here no GPU can run it, so the CPU session runs the native graph, with the op registered)."""
    from engine.runtime import providers
    cfg = variant(BASE, wtype="Q8_0", seed=82)
    _need(library, cfg)
    _, folder = converted(cfg, "native", types=library)
    monkeypatch.setattr(providers, "wanted_providers", lambda choice: ["CUDAExecutionProvider", providers.CPU])
    monkeypatch.setattr(providers, "provider_library_problem", lambda p: None)
    m = load_model(folder, provider="auto", threads=1)
    assert m.provider == "CPUExecutionProvider" and m.variant == "fp32" and m.graph == folder / "model.onnx"
    reason = m.provider_fallback_reason or ""
    assert reason.startswith("CUDA") and "could not be made" not in reason, reason
    assert (folder / "gpu" / "model.onnx").is_file() and (folder / "ort" / "model.onnx").is_file()
    assert not native_ops.graph_is_native(folder / "gpu" / "model.onnx")


def test_native_batched_decode_gives_each_stream_its_solo_tokens(converted, library, monkeypatch):
    """Several streams decoding at once through the batcher (GgufMatMul over [batch, 1, K]) give the
    tokens each gives alone: the op quantizes and multiplies each row on its own."""
    from engine.api import SamplingParams
    from engine.generation.generate import Generator, collect
    from engine.runtime import batcher as batcher_mod
    from tests.support.batching import Together, run_threads, solo_tokens
    monkeypatch.setattr(batcher_mod, "GATHER_WAIT_S", 60.0)
    cfg = variant(BASE, wtype="Q8_0", seed=82)
    _need(library, cfg)
    model, folder = converted(cfg, "native", types=library)
    m = load_model(folder, provider="cpu", threads=1)
    specs = [(12, 10), (40, 10), (5, 6)]
    prompts = [list(map(int, prompt(model, n, 20 + i))) for i, (n, _) in enumerate(specs)]
    want = [solo_tokens(m, p, n) for p, (_, n) in zip(prompts, specs, strict=True)]
    gen = Generator(m)
    caches = [gen.new_cache() for _ in specs]
    together = Together(gen.runner, caches)
    got: list[list[int] | None] = [None] * len(specs)

    def worker(i: int):
        def run() -> None:
            try:
                sampling = SamplingParams(greedy=True, repetition_penalty=1.0, max_new_tokens=specs[i][1])
                got[i] = collect(gen.stream(caches[i], prompts[i], sampling)).token_ids
            finally:
                together.release(caches[i])
        return run
    run_threads([worker(i) for i in range(len(specs))])
    assert got == want
    b = gen.runner.batcher
    assert b is not None and b.batched_steps > 0


@pytest.mark.parametrize("available", [["CPUExecutionProvider"], ["CUDAExecutionProvider", "CPUExecutionProvider"],
                                       ["DmlExecutionProvider", "CPUExecutionProvider"],
                                       ["CoreMLExecutionProvider", "CPUExecutionProvider"]])
def test_gpu_rule_of_the_chooser_is_the_runtimes(available, monkeypatch):
    """native_form.gpu_would_run (the converter cannot import the runtime) says what
    providers.wanted_providers("auto") picks, for each provider list."""
    import onnxruntime as ort
    from engine.runtime import providers
    monkeypatch.setattr(ort, "get_available_providers", lambda: list(available))
    # with a CUDA device present the chooser follows the runtime's provider rule exactly...
    monkeypatch.setattr(native_form, "cuda_device_count", lambda: 1)
    assert native_form.gpu_would_run() == (providers.wanted_providers("auto")[0] != providers.CPU)
    # ...and without one, a listed CUDA provider (onnxruntime-gpu on a CPU-only machine) is no GPU
    monkeypatch.setattr(native_form, "cuda_device_count", lambda: 0)
    assert native_form.gpu_would_run() == (providers.wanted_providers("auto")[0] not in (providers.CPU,
                                                                                          "CUDAExecutionProvider"))
