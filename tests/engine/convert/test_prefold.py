"""engine.runtime.prefold: the weight-preparation values of Amber's graphs formed in
numpy at load and handed to ONNX Runtime, against ONNX Runtime folding the same graph itself: the
same logits for every compact form in both modes, the numpy reference in exact mode, no
preparation node left, no temporary file left behind, and foreign graphs left alone. Also which
graphs the loader prefolds: the nodes the graph scan (no onnx) finds are those fold.py takes, and
only graphs that widen tables pay for importing onnx."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from engine.convert import EXACT, FAST
from engine.onnx.fold import LazyValues, fold_lazily
from engine.onnx.graph_scan import read_graph, weight_preparation
from engine.runtime import prefold, providers
from engine.runtime.providers import create_session, session_options
from tests.support.reference_model import Runner, prompt, reference_logits
from test_convert_forms import FORMS, IDS, converted  # noqa: F401 - the module-scoped fixture


class PrefoldedRunner(Runner):
    """The test runner on a session whose weights prefold formed (whatever the graph)."""

    def __init__(self, folder: Path) -> None:
        super().__init__(folder)
        self.session = prefold.cpu_session(str(folder / "model.onnx"), session_options(2), ["CPUExecutionProvider"])


@pytest.fixture(autouse=True)
def spill_here(tmp_path, monkeypatch):
    """The temporary file goes to a folder of the test's own, to check nothing stays there."""
    folder = tmp_path / "spill"
    monkeypatch.setattr(prefold, "_spill_folder", lambda: folder)
    return folder


@pytest.mark.parametrize("level", [EXACT, FAST])
@pytest.mark.parametrize("cfg", FORMS, ids=IDS)
def test_prefolded_session_matches_onnxruntime_folding(converted, cfg, level, spill_here):   # noqa: F811
    model, folder = converted(cfg, level)
    ids = prompt(model, 17)
    plain = Runner(folder)
    ours = PrefoldedRunner(folder)
    a, past_a = plain.run(ids)
    b, past_b = ours.run(ids)
    # numpy forms the same float32 products, shifts and masks as ONNX Runtime's kernels
    assert np.array_equal(a, b), float(np.abs(a - b).max())
    step = [int(np.argmax(a.reshape(-1)))]
    a2, _ = plain.run(step, past_a)
    b2, _ = ours.run(step, past_b)
    assert np.array_equal(a2, b2)
    if level == EXACT:
        assert np.abs(b - reference_logits(model, ids)).max() <= 1e-3
    assert hasattr(ours.session, "amber_prefolded")
    assert spill_here.is_dir() and list(spill_here.iterdir()) == []     # unlinked as soon as made


def test_no_preparation_node_is_left(converted, spill_here):   # noqa: F811
    _, folder = converted(FORMS[-1], FAST)      # the Q4_K_M mix: every kind of preparation
    spill = prefold._Spill(spill_here)
    stored: list[np.ndarray] = []
    folded = prefold.prefold(folder / "model.onnx", spill, stored)
    assert folded is not None
    data, names = folded
    g = onnx.load_from_string(data).graph
    inits = {i.name for i in g.initializer}
    assert set(names) <= inits
    assert [n.name for n in g.node if n.input and all(i in inits for i in n.input if i)] == []
    kinds = {n.rsplit(".", 1)[-1] for n in names}
    assert {"scales", "zero_points_u4", "zp_correction", "qweight"} <= kinds
    assert len(spill.items) + len(stored) == len(names)
    spill.file.close()


def test_foreign_graphs_are_loaded_as_they_are(tmp_path, spill_here):
    """A graph Amber did not write (an onnx-community export) is handed to ONNX Runtime as is."""
    from onnx import TensorProto, helper, numpy_helper
    w = numpy_helper.from_array(np.arange(6, dtype=np.float16).reshape(2, 3), "w")
    g = helper.make_graph([helper.make_node("Cast", ["w"], ["w32"], to=TensorProto.FLOAT),
                           helper.make_node("MatMul", ["x", "w32"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)], producer_name="pytorch")
    m.ir_version = 10
    onnx.save_model(m, str(tmp_path / "model.onnx"))
    spill = prefold._Spill(spill_here)
    assert prefold.prefold(tmp_path / "model.onnx", spill, []) is None
    spill.file.close()
    s = prefold.cpu_session(str(tmp_path / "model.onnx"), ort.SessionOptions(), ["CPUExecutionProvider"])
    y = s.run(None, {"x": np.array([[1.0, 2.0]], np.float32)})[0]
    assert np.array_equal(y, np.array([[6.0, 9.0, 12.0]], np.float32))
    assert not hasattr(s, "amber_prefolded")


def test_no_writable_scratch_folder_falls_back_to_onnxruntime(converted, tmp_path, monkeypatch):   # noqa: F811
    """Where Amber's scratch folder cannot be made, ONNX Runtime folds the graph itself."""
    model, folder = converted(FORMS[0], FAST)
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    monkeypatch.setattr(prefold, "_spill_folder", lambda: blocker / "tmp")
    ids = prompt(model, 9)
    a, _ = Runner(folder).run(ids)
    ours = PrefoldedRunner(folder)
    assert not hasattr(ours.session, "amber_prefolded")
    b, _ = ours.run(ids)
    assert np.array_equal(a, b)


@pytest.mark.parametrize("cfg", FORMS, ids=IDS)
def test_the_scan_finds_the_nodes_fold_takes_and_the_loader_prefolds_what_widens(converted, cfg, spill_here):   # noqa: F811
    _, folder = converted(cfg, FAST)
    graph = folder / "model.onnx"
    proto = onnx.load(str(graph), load_external_data=False)
    values = LazyValues(proto, folder)
    fold_lazily(proto, values)
    scanned = weight_preparation(read_graph(graph))
    assert [n.output[0] for n in scanned] == list(values.recipes)
    widens = any(n.op_type not in providers.ORT_FOLDS for n in scanned)
    session = create_session(str(graph), "cpu", 2).session
    assert hasattr(session, "amber_prefolded") == widens


def test_small_casts_are_left_to_onnxruntime_and_large_ones_prefolded(converted, monkeypatch, spill_here):   # noqa: F811
    """The tied Q8_0 form prepares only its embedding's scales (a cast and a reshape), as the
    default model's native form does: ONNX Runtime folds those, to the same logits; past the size
    limit prefold forms them."""
    model, folder = converted(FORMS[4], FAST)
    graph = folder / "model.onnx"
    assert {n.op_type for n in weight_preparation(read_graph(graph))} == {"Cast", "Reshape"}
    ids = prompt(model, 9)
    left = create_session(str(graph), "cpu", 2).session
    assert not hasattr(left, "amber_prefolded")
    monkeypatch.setattr(providers, "ORT_FOLDS_MAX_BYTES", 0)
    folded = create_session(str(graph), "cpu", 2).session
    assert hasattr(folded, "amber_prefolded")
    a, b = Runner(folder), Runner(folder)
    a.session, b.session = left, folded
    assert np.array_equal(a.run(ids)[0], b.run(ids)[0])
