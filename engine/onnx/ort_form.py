"""The ORT form of a native-form model folder, re-formed at load from the weights already in it.

A folder converted with Amber's native kernels (engine/convert/native_form.py) keeps its matrices
as the GGUF's rows for `ai.amber.GgufMatMul` and may use `ai.amber.Attention` (float16 KV). Where
those kernels cannot run (AMBER_KERNELS=ort, no library, another CPU) or a GPU runs the model (the
float16 variant is made from the ORT form), the folder is re-formed instead of refused:

- every GgufMatMul becomes what the ORT conversion writes for the same GGUF rows (linear.py: the
  same block decoders, the same MatMulNBits inputs and corrections, the same accuracy level, read
  from amber_import.json); a SwiGLU epilogue becomes Split, Sigmoid, Mul, Mul again;
- ai.amber.Attention becomes com.microsoft.GroupQueryAttention with float32 KV (the op was only
  renamed at conversion);
- everything else (embedding, norms, rotary tables) is copied as it is.

No GGUF is needed. The result is cached in `ort/` inside the model folder (or, for a folder Amber
cannot write, under a spare root), written to a temporary folder and renamed into place; a marker
names the native graph it came from, so a re-converted folder is re-formed again.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any, Callable

import onnx
from gguf import GGMLQuantizationType as QT  # noqa: N814 - short, like ggml's own type tags
from onnx import TensorProto, helper

import engine.native.attention as native_attention
from engine.native import OP_DOMAIN as NATIVE_DOMAIN
from engine.native import OP_NAME as NATIVE_OP

from .errors import ModelImportError
from .fold import LazyValues
from .linear import ModelGraph
from .partials import new_partial, publish, source_stamp
from .weights import convert_tensor
from .writer import DataWriter

FORM_DIR = "ort"
FORM_FORMAT = 1              # bump when the re-form changes: older ort/ folders are re-formed
MARKER = "amber_ort_form.json"
MODEL_FILE = "model.onnx"
DATA_FILE = "model.onnx.data"
IMPORT_FILE = "amber_import.json"
IR_VERSION = 10              # as the converter writes (ONNX Runtime 1.31/1.32 reject onnx 1.23's IR 14)
ROWS_SUFFIX = ".gguf_rows"
KV_PREFIXES = ("past_key_values.", "present.")
SWIGLU = 1                   # GgufMatMul's SwiGLU epilogue (engine/convert/native_swiglu.py)

ProgressFn = Callable[[int, int, str], None]   # (done, total, what)
PROGRESS_TAG = "ort form: "  # starts the `what` of every re-form step (the CLI's progress line says so)


def is_native(model: Any) -> bool:
    """The graph has nodes of Amber's op domain."""
    return any(n.domain == NATIVE_DOMAIN for n in model.graph.node)



def _is_current(folder: Path, graph: Path) -> bool:
    try:
        marker = json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return (isinstance(marker, dict) and marker.get("format") == FORM_FORMAT
            and marker.get("source") == source_stamp(graph) and (folder / MODEL_FILE).is_file())


def form_dir(model_dir: Path) -> Path:
    return Path(model_dir) / FORM_DIR


def spare_dir(model_dir: Path, spare_root: Path) -> Path:
    """Where a read-only folder's ORT form goes: one folder per model folder path."""
    tag = hashlib.blake2b(str(Path(model_dir).resolve()).encode(), digest_size=6).hexdigest()
    return Path(spare_root) / f"{Path(model_dir).name}-{tag}-{FORM_DIR}"


def accuracy_level(model_dir: Path) -> int:
    """The accuracy level the folder was converted with (MatMulNBits' form depends on it)."""
    try:
        value = json.loads((Path(model_dir) / IMPORT_FILE).read_text()).get("accuracy_level", 0)
    except (OSError, ValueError, AttributeError):
        return 0
    return int(value) if isinstance(value, int) else 0


def ensure_ort_form(model_dir: Path | str, graph: Path | None = None, progress: ProgressFn | None = None,
                    spare_root: Path | None = None) -> Path:
    """The ORT-form graph of a native-form folder, re-formed first when missing or stale."""
    model_dir = Path(model_dir)
    graph = graph or model_dir / MODEL_FILE
    folder = form_dir(model_dir)
    if _is_current(folder, graph):
        return folder / MODEL_FILE
    try:
        return build_ort_form(model_dir, graph, progress=progress)
    except OSError:
        if spare_root is None:
            raise
    spare = spare_dir(model_dir, spare_root)
    if _is_current(spare, graph):
        return spare / MODEL_FILE
    spare.parent.mkdir(parents=True, exist_ok=True)
    return build_ort_form(model_dir, graph, dest=spare, progress=progress)


class _Graph(ModelGraph):
    """The converter's linear forms, with names that cannot meet the native graph's own."""

    def name(self, base: str) -> str:
        return "ortform_" + super().name(base)


def _attr(node: onnx.NodeProto, name: str, default: Any = None) -> Any:
    return next((helper.get_attribute_value(a) for a in node.attribute if a.name == name), default)


def _matmul_nodes(g: _Graph, node: onnx.NodeProto, values: LazyValues) -> list[onnx.NodeProto]:
    """The ORT form of one GgufMatMul node: its rows decoded as the ORT conversion decodes them."""
    x, rows = str(node.input[0]), str(node.input[1])
    try:
        qtype, k, n = QT(int(_attr(node, "ggml_type"))), int(_attr(node, "K")), int(_attr(node, "N"))
    except (TypeError, ValueError):
        raise ModelImportError(f"node {node.name}: a GgufMatMul without a known ggml_type, K and N") from None
    prefix = rows.removesuffix(ROWS_SUFFIX)
    raw = values.get(rows)
    w = convert_tensor(prefix, qtype, raw, n, k)
    if w.kind != "quant" or w.n != n or w.k != k:
        raise ModelImportError(f"node {node.name}: {qtype.name} rows have no ORT form")
    start = len(g.nodes)
    y = g.linear(x, w, prefix)
    del raw
    epilogue = int(_attr(node, "epilogue", 0) or 0)
    if epilogue == SWIGLU:
        gate, up = g.op("Split", [y, g.const([n // 2, n // 2])], n_out=2, axis=-1)
        silu = g.op1("Mul", [gate, g.op1("Sigmoid", [gate])])
        g.op1("Mul", [silu, up], outputs=[str(node.output[0])])
    elif epilogue == 0:
        g.op1("Identity", [y], outputs=[str(node.output[0])])
    else:
        raise ModelImportError(f"node {node.name}: unknown GgufMatMul epilogue {epilogue}")
    return g.nodes[start:]


def reform(model: onnx.ModelProto, values: LazyValues, writer: DataWriter, level: int,
           progress: ProgressFn | None = None) -> onnx.ModelProto:
    """Rewrites `model` (loaded without its external data) into the ORT form, in place; every
    initializer it keeps, and those it makes, go to `writer`."""
    g = _Graph(level, writer)
    graph = model.graph
    matmuls = [n for n in graph.node if n.domain == NATIVE_DOMAIN and n.op_type == NATIVE_OP]
    inits = list(graph.initializer)
    total = len(matmuls) + len(inits)
    done = 0
    nodes: list[onnx.NodeProto] = []
    dropped: set[str] = set()
    for node in list(graph.node):
        if node.domain == NATIVE_DOMAIN and node.op_type == NATIVE_OP:
            if len(node.input) != 2 or len(node.output) != 1:
                raise ModelImportError(f"node {node.name}: a GgufMatMul with {len(node.input)} inputs")
            nodes.extend(_matmul_nodes(g, node, values))
            dropped.add(str(node.input[1]))
            done += 1
            if progress:
                progress(done, total, PROGRESS_TAG + str(node.input[1]))
        elif node.domain == NATIVE_DOMAIN and node.op_type == native_attention.OP_NAME:
            node.op_type, node.domain = native_attention.GQA, native_attention.MS_DOMAIN
            nodes.append(node)
        elif node.domain == NATIVE_DOMAIN:
            raise ModelImportError(f"node {node.name}: Amber op {node.op_type} has no ORT form")
        else:
            nodes.append(node)
    for vi in list(graph.input) + list(graph.output):
        if vi.name.startswith(KV_PREFIXES):
            vi.type.tensor_type.elem_type = TensorProto.FLOAT
    kept: list[TensorProto] = []
    for init in inits:
        done += 1
        if init.name in dropped:
            pass
        elif init.data_location == TensorProto.EXTERNAL:
            kept.append(writer.tensor(init.name, values.get(init.name)))
        else:
            kept.append(init)
        if progress and (done % 64 == 0 or done == total):
            progress(done, total, PROGRESS_TAG + init.name)
    del graph.node[:]
    graph.node.extend(nodes)
    del graph.initializer[:]
    graph.initializer.extend(kept + g.inits)
    opsets = [o for o in model.opset_import if o.domain != NATIVE_DOMAIN]
    del model.opset_import[:]
    model.opset_import.extend(opsets)
    model.ir_version = IR_VERSION
    if is_native(model):
        raise ModelImportError("the re-formed graph still has Amber ops")
    return model


def build_ort_form(model_dir: Path | str, graph: Path | None = None, dest: Path | None = None,
                   progress: ProgressFn | None = None) -> Path:
    """Writes the ORT form of `model_dir`'s native graph into `dest` (default `model_dir/ort/`) and
    returns its graph path. Temp folder + fsync + rename: an interrupted re-form leaves nothing."""
    model_dir = Path(model_dir)
    graph = graph or model_dir / MODEL_FILE
    folder = dest or form_dir(model_dir)
    try:
        model = onnx.load(str(graph), load_external_data=False)
    except Exception as exc:  # noqa: BLE001 - untrusted file: the library raises any kind; reported as one line
        raise ModelImportError(f"{graph}: cannot read the graph to re-form it for ONNX Runtime ({exc})") from None
    if not is_native(model):
        return graph
    values = LazyValues(model, graph.parent)
    tmp = new_partial(folder)
    try:
        writer = DataWriter(tmp / DATA_FILE, DATA_FILE)
        try:
            reform(model, values, writer, accuracy_level(model_dir), progress)
        except ModelImportError as exc:
            raise ModelImportError(f"{graph}: cannot re-form it for ONNX Runtime ({exc})") from None
        except (KeyError, ValueError, AssertionError) as exc:   # a damaged graph or data file
            raise ModelImportError(f"{graph}: cannot re-form it for ONNX Runtime "
                                   f"({type(exc).__name__}: {str(exc)[:200]})") from None
        finally:
            writer.close()
            values.close()
        onnx.save_model(model, tmp / MODEL_FILE)
        (tmp / MARKER).write_text(json.dumps({"format": FORM_FORMAT, "source": source_stamp(graph)}))
        publish(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return folder / MODEL_FILE

