"""A crafted model folder whose custom ops fail (at run time: attention heads that disagree with the
packed QKV, a GgufMatMul whose K disagrees with X; at load: a GgufMatMul whose W is too short for
its N): `generate` exits 2 with one Amber line, and ONNX Runtime's own log line stays silent."""
from __future__ import annotations

import shutil
from pathlib import Path

import onnx
import pytest

from engine.convert import FAST, convert_gguf
from tests.support.cli_errors import one_line_error
from tests.support.tiny_gguf import TinyConfig, write_tiny_gguf


@pytest.fixture(scope="module")
def native_dir(tmp_path_factory) -> Path:
    """A tiny model in the native form (GgufMatMul and ai.amber.Attention)."""
    import engine.native as native
    from engine.native import build
    if build.find_compiler() is None and native.library_path() is None:
        pytest.skip("no C compiler (cc/gcc/clang) to build the native kernels")
    build.build()
    root = tmp_path_factory.mktemp("crafted")
    src = write_tiny_gguf(root / "tiny.gguf", TinyConfig(seed=82, wtype="Q8_0", context_length=512))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AMBER_KERNELS", "native")
        mp.delenv("AMBER_NATIVE_ATTENTION", raising=False)
        folder = convert_gguf(src.path, root / "tiny-native", kernels="native", accuracy_level=FAST)
    ops = {n.op_type for n in onnx.load(str(folder / "model.onnx"), load_external_data=False).graph.node}
    assert {"GgufMatMul", "Attention"} <= ops, ops
    return folder


def _set(op_type: str, **values: int):
    def edit(graph: onnx.GraphProto) -> None:
        node = next(n for n in graph.node if n.op_type == op_type)
        for a in node.attribute:
            if a.name in values:
                a.i = values[a.name]
    return edit


@pytest.mark.parametrize("edit, needle", [
    (_set("Attention", num_heads=8), "Attention"),                 # run: QKV width != heads x head_dim
    (_set("GgufMatMul", K=128, N=64), "X's last dimension is 64, K is 128"),     # run: K != X's width
    (_set("GgufMatMul", N=256), "W holds"),                         # load: W too short for N rows
], ids=["attention-heads", "matmul-k", "matmul-w-at-load"])
def test_a_crafted_model_that_fails_in_onnx_runtime_is_one_line(run_cli, native_dir, tmp_path, edit, needle):
    folder = tmp_path / "crafted"
    shutil.copytree(native_dir, folder)
    model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    edit(model.graph)
    onnx.save(model, str(folder / "model.onnx"))
    proc = run_cli("generate", "--model", folder, "--chat", "hi", "--temporary", "--max-tokens", "2",
                   "--provider", "cpu", "--state-dir", tmp_path / "s")
    line = one_line_error(proc, needle, "model.onnx")       # no "[E:onnxruntime" line before it
    assert "onnxruntime" not in proc.stderr.replace("ONNX Runtime", "")
    assert "\x1b" not in line
