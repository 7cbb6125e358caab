"""Model folders that move: a folder converted for Amber's native kernels (GgufMatMul, and
ai.amber.Attention where the library loaded) loads where those kernels cannot run, re-formed for
ONNX Runtime from the weights in the folder (engine/onnx/ort_form.py); its GPU (float16) variant
is made from that form; and an ORT-form folder loads as it is where the kernels run.

Tolerance of the re-formed logits against a direct ORT conversion of the same GGUF: the re-form
writes the same MatMulNBits inputs from the same blocks (the converter's own decoders and linear
forms) at the same accuracy level, so ONNX Runtime runs the same arithmetic: exact equality is
expected (measured 0.0 on every model here); the bound 1e-6 only allows for a kernel choosing
another summation order for a differently shaped, numerically identical graph.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
import onnx
import pytest

from engine.convert import FAST, convert_gguf, native_form
from engine.onnx import ort_form
from engine.runtime.model import ModelLoadError, load_model
from tests.support.reference_model import Q4K, prompt
from tests.support.tiny_gguf import TinyConfig, variant, write_tiny_gguf

DOMAIN = "ai.amber"
MAX_DLOGIT = 1e-6
BASE = TinyConfig(seed=90)
Q4_K_M = variant(BASE, wtype="Q4_K", tied=False, seed=91, **Q4K,
                 overrides=(("attn_v.weight", "Q6_K"), ("ffn_down.weight", "Q6_K"), ("output.weight", "Q6_K"),
                            ("token_embd.weight", "Q5_0")))
MODELS = [variant(BASE, wtype="Q4_1", seed=92),                                   # SmolLM2's type, tied head
          variant(BASE, wtype="Q8_0", arch="qwen2", bias=True, seed=93),
          variant(BASE, wtype="Q6_K", tied=False, seed=94, **Q4K),
          variant(BASE, wtype="Q5_0", arch="phi3", seed=95),                      # fused Q|K|V, gate|up
          Q4_K_M]                                                                 # mixed types per layer
IDS = [c.name for c in MODELS]


def _library_loads() -> bool:
    try:
        import engine.native as native
        from engine.native import build
        if native.library_path() is None and build.find_compiler() is not None:
            build.build()
        return bool(native.available())
    except Exception:   # noqa: BLE001 - no library here: the native folders get no ai.amber.Attention
        return False


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """folders(cfg) -> (TinyModel, native folder, ORT folder), converted once. The native form is
    made for every type of the op contract (whatever this CPU's kernels handle), with the kernel
    library's attention op where the library loads here."""
    root = tmp_path_factory.mktemp("ortform")
    library = _library_loads()
    made: dict[str, tuple] = {}

    def get(cfg: TinyConfig):
        if cfg.name not in made:
            src = root / f"{cfg.name}.gguf"
            model = write_tiny_gguf(src, cfg)
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(native_form, "kernel_types", lambda: native_form.CONTRACT_TYPES)
                mp.setenv("AMBER_KERNELS", "native")
                nat = convert_gguf(src, root / f"{cfg.name}.native", accuracy_level=FAST)
                mp.setenv("AMBER_KERNELS", "ort")
                ort = convert_gguf(src, root / f"{cfg.name}.ort", accuracy_level=FAST, gpu_variant=False)
            made[cfg.name] = (model, nat, ort)
        return made[cfg.name]
    get.library = library   # type: ignore[attr-defined]
    return get


def _copy(folder: Path, dest: Path) -> Path:
    shutil.copytree(folder, dest, ignore=shutil.ignore_patterns("ort", "gpu", "amber_fingerprint.json"))
    return dest


def _logits(model, ids: np.ndarray) -> np.ndarray:
    """The last position's logits over `ids` from an empty past, through the loaded session."""
    sess = model.session
    feed = {"input_ids": ids[None].astype(np.int64), "attention_mask": np.ones((1, len(ids)), np.int64),
            "position_ids": np.arange(len(ids), dtype=np.int64)[None]}
    for i in sess.get_inputs():
        if i.name.startswith("past_key_values."):
            dtype = np.float16 if i.type == "tensor(float16)" else np.float32
            feed[i.name] = np.zeros((1, model.kv.kv_heads, 0, model.kv.head_dim), dtype)
    return np.asarray(sess.run([model.logits_name], feed)[0], np.float64).reshape(-1)


def _domains(graph: Path) -> set[str]:
    return {n.domain for n in onnx.load(str(graph), load_external_data=False).graph.node}


@pytest.mark.parametrize("cfg", MODELS, ids=IDS)
def test_native_folder_loads_with_kernels_off_as_the_ort_conversion(folders, cfg, tmp_path, monkeypatch):
    """Converted with the kernels, loaded with AMBER_KERNELS=ort: the folder's ORT form (ort/) runs
    and gives the logits of the folder converted with AMBER_KERNELS=ort from the same GGUF."""
    model, nat, ort = folders(cfg)
    nat = _copy(nat, tmp_path / "m")
    assert DOMAIN in _domains(nat / "model.onnx")
    monkeypatch.setenv("AMBER_KERNELS", "ort")
    seen: list[tuple[int, int]] = []
    got = load_model(nat, provider="cpu", threads=1, progress=lambda d, t, _w: seen.append((d, t)))
    assert got.graph == nat / "ort" / "model.onnx" and got.variant == "fp32"
    assert DOMAIN not in _domains(got.graph) and not got.amber_attention
    assert got.kv.dtype == np.float32
    assert seen and seen[-1][0] == seen[-1][1]                     # the re-form reported its progress
    want = load_model(ort, provider="cpu", threads=1)
    for seed in range(2):
        ids = prompt(model, 17, seed)
        d = float(np.abs(_logits(got, ids) - _logits(want, ids)).max())
        assert d <= MAX_DLOGIT, d
    # the native folder's own files are untouched; a second load reuses ort/ as it is
    stamp = (got.graph.stat().st_mtime_ns, (got.graph.parent / "model.onnx.data").stat().st_mtime_ns)
    again = load_model(nat, provider="cpu", threads=1)
    assert again.graph == got.graph and again.fingerprint == got.fingerprint
    assert (got.graph.stat().st_mtime_ns, (got.graph.parent / "model.onnx.data").stat().st_mtime_ns) == stamp


def test_native_attention_is_re_formed_too(folders, tmp_path, monkeypatch):
    """Where the library loaded at conversion, the native folder uses ai.amber.Attention (float16
    KV): its ORT form has GroupQueryAttention over float32 KV, and the same logits as the ORT folder."""
    if not folders.library:
        pytest.skip("the kernel library does not load here: native conversions keep GroupQueryAttention")
    model, nat, ort = folders(MODELS[0])
    nat = _copy(nat, tmp_path / "m")
    ops = {(n.domain, n.op_type) for n in onnx.load(str(nat / "model.onnx"), load_external_data=False).graph.node}
    assert (DOMAIN, "Attention") in ops
    monkeypatch.setenv("AMBER_KERNELS", "ort")
    got = load_model(nat, provider="cpu", threads=1)
    ops = {(n.domain, n.op_type) for n in onnx.load(str(got.graph), load_external_data=False).graph.node}
    assert ("com.microsoft", "GroupQueryAttention") in ops and not {d for d, _ in ops} & {DOMAIN}
    ids = prompt(model, 23, 4)
    assert float(np.abs(_logits(got, ids) - _logits(load_model(ort, provider="cpu", threads=1), ids)).max()) \
        <= MAX_DLOGIT


def test_fp16_variant_of_a_native_folder_runs_on_the_cpu(folders, tmp_path):
    """variant="fp16" of a native folder (the GPU's graph, checked on the CPU provider): made from
    its ORT form, and the same logits as the variant of the ORT folder."""
    model, nat, ort = folders(MODELS[0])
    nat = _copy(nat, tmp_path / "m")
    ort = _copy(ort, tmp_path / "o")
    got = load_model(nat, provider="cpu", threads=1, variant="fp16")
    assert got.variant == "fp16" and got.graph == nat / "gpu" / "model.onnx"
    assert DOMAIN not in _domains(got.graph) and got.kv.dtype == np.float16
    want = load_model(ort, provider="cpu", threads=1, variant="fp16")
    ids = prompt(model, 19, 2)
    assert float(np.abs(_logits(got, ids) - _logits(want, ids)).max()) <= MAX_DLOGIT


def test_ort_folder_loads_as_it_is_where_the_kernels_run(folders, tmp_path, monkeypatch):
    """The reverse move: an ORT-form folder on a machine with the native kernels runs its own graph
    (nothing re-formed, nothing written beside it) and gives the same logits."""
    if not folders.library:
        pytest.skip("the kernel library does not load here")
    model, _, ort = folders(MODELS[2])
    ort = _copy(ort, tmp_path / "o")
    monkeypatch.setenv("AMBER_KERNELS", "native")
    from engine.runtime import native_ops
    assert native_ops.unavailable_reason() is None
    got = load_model(ort, provider="cpu", threads=1)
    assert got.graph == ort / "model.onnx" and not (ort / "ort").exists()
    monkeypatch.setenv("AMBER_KERNELS", "ort")
    want = load_model(ort, provider="cpu", threads=1)
    ids = prompt(model, 21, 3)
    assert float(np.abs(_logits(got, ids) - _logits(want, ids)).max()) <= MAX_DLOGIT


def test_native_folder_where_the_kernels_run_is_not_re_formed(folders, tmp_path, monkeypatch):
    if not folders.library:
        pytest.skip("the kernel library does not load here")
    _, nat, _ = folders(MODELS[0])
    nat = _copy(nat, tmp_path / "m")
    monkeypatch.setenv("AMBER_KERNELS", "native")
    got = load_model(nat, provider="cpu", threads=1)
    assert got.graph == nat / "model.onnx" and not (nat / "ort").exists()


def test_native_graph_the_loaded_kernels_cannot_run_falls_back_to_its_ort_form(folders, tmp_path, monkeypatch):
    """The library loads but ONNX Runtime cannot make the native session (here: the op is never
    registered, as with a kernel build that lacks one of the folder's types): the ORT form runs."""
    if not folders.library:
        pytest.skip("the kernel library does not load here")
    from engine.runtime import native_ops
    model, nat, ort = folders(MODELS[2])
    folder = _copy(nat, tmp_path / "m")
    monkeypatch.setenv("AMBER_KERNELS", "native")
    assert native_ops.unavailable_reason() is None
    monkeypatch.setattr(native_ops, "register", lambda so: True)
    got = load_model(folder, provider="cpu", threads=1)
    assert got.graph == folder / "ort" / "model.onnx"
    ids = prompt(model, 13, 7)
    assert float(np.abs(_logits(got, ids) - _logits(load_model(ort, provider="cpu", threads=1), ids)).max()) \
        <= MAX_DLOGIT


def test_read_only_folder_is_re_formed_into_amber_home(folders, tmp_path, monkeypatch):
    """An installed package's folder is read-only: the ORT form goes under AMBER_HOME/variants and
    is reused from there. (Tests run as root, which ignores file modes, so writing into the folder
    is refused here.)"""
    model, nat, ort = folders(MODELS[1])
    folder = _copy(nat, tmp_path / "installed" / "model")
    home = tmp_path / "home"
    monkeypatch.setenv("AMBER_HOME", str(home))
    monkeypatch.setenv("AMBER_KERNELS", "ort")
    real = ort_form.build_ort_form

    def read_only(model_dir, graph=None, dest=None, progress=None):
        if dest is None:
            raise PermissionError(13, "Permission denied", str(Path(model_dir) / ".ort.partial"))
        return real(model_dir, graph, dest, progress)
    monkeypatch.setattr(ort_form, "build_ort_form", read_only)
    got = load_model(folder, provider="cpu", threads=1)
    assert got.graph.parent.parent == home / "variants" and not (folder / "ort").exists()
    assert DOMAIN not in _domains(got.graph)
    ids = prompt(model, 15, 6)
    assert float(np.abs(_logits(got, ids) - _logits(load_model(ort, provider="cpu", threads=1), ids)).max()) \
        <= MAX_DLOGIT
    again = load_model(folder, provider="cpu", threads=1)
    assert again.graph == got.graph and again.fingerprint == got.fingerprint


def test_damaged_native_folder_is_one_line(folders, tmp_path, monkeypatch):
    """A native folder whose data file lost its end cannot be re-formed: one line naming the graph,
    and nothing left half-made."""
    _, nat, _ = folders(MODELS[0])
    folder = _copy(nat, tmp_path / "m")
    data = folder / "model.onnx.data"
    with open(data, "r+b") as f:
        f.truncate(data.stat().st_size // 2)
    monkeypatch.setenv("AMBER_KERNELS", "ort")
    with pytest.raises(ModelLoadError) as err:
        load_model(folder, provider="cpu", threads=1)
    msg = str(err.value)
    assert "\n" not in msg and "Traceback" not in msg and str(folder / "model.onnx") in msg, msg
    assert not (folder / "ort").exists()
    assert not [p for p in folder.iterdir() if ".partial" in p.name]


def test_kernels_off_on_the_cli_generates_from_a_native_folder(folders, run_cli, tmp_path):
    _, nat, _ = folders(MODELS[0])
    folder = _copy(nat, tmp_path / "m")
    r = run_cli("generate", "--model", str(folder), "--max-tokens", "2", "--prompt", "hello",
                env={"AMBER_KERNELS": "ort"})
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr and (folder / "ort" / "model.onnx").is_file()
    assert "re-forming the model for ONNX Runtime" in r.stderr and "GPU" not in r.stderr


@pytest.mark.slow
def test_default_model_re_formed_matches_its_ort_conversion(default_model_dir, default_model_ort_dir, tmp_path,
                                                            monkeypatch):
    """The real default model as this machine converts it (native kernels), loaded with
    AMBER_KERNELS=ort: the re-formed graph gives the logits of the GGUF converted with the ORT form."""
    if DOMAIN not in _domains(default_model_dir / "model.onnx"):
        pytest.skip("the prepared default model has the ORT form here (no native kernels at conversion)")
    folder = _copy(default_model_dir, tmp_path / default_model_dir.name)
    monkeypatch.setenv("AMBER_KERNELS", "ort")
    started = time.perf_counter()
    got = load_model(folder, provider="cpu", threads=2)
    seconds = time.perf_counter() - started
    want = load_model(default_model_ort_dir, provider="cpu", threads=2)
    ids = np.array(got.tokenizer.encode("The capital of France is a city that").ids, np.int64)
    d = float(np.abs(_logits(got, ids) - _logits(want, ids)).max())
    print(f"default model: re-formed in {seconds:.1f}s (load included); max |dlogit| {d:.3g}")
    if os.environ.get("AMBER_REFORM_REPORT"):
        Path(os.environ["AMBER_REFORM_REPORT"]).write_text(json.dumps({"seconds": seconds, "max_dlogit": d}))
    assert d <= MAX_DLOGIT, d
