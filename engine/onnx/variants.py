"""The GPU (float16) variant of a converted model, derived from its saved CPU graph.

Why a second graph: ONNX Runtime's CUDA `GroupQueryAttention` kernel exists only for float16 and
bfloat16, so the float32 CPU graph cannot run its attention on the GPU (OperatorKernels.md,
CUDAExecutionProvider, com.microsoft). The variant is the same graph with:

- float16 activations, float16 KV cache (past/present), float16 GroupQueryAttention and rotary tables;
- every float32 initializer stored as float16: MatMulNBits scales, the zero-point corrections, norm
  weights, biases, dense weights. The packed 4-/8-bit levels and the block mapping are untouched
  (the same bytes as the CPU graph), so the variant is the GGUF's exact blocks with float16 scales;
- RMSNorm in float32: SimplifiedLayerNormalization gets `stash_type=1` (float32 statistics); ORT's
  CUDA SkipSimplifiedLayerNormalization and GroupQueryAttention (its softmax) accumulate in float32
  for float16 inputs by construction;
- float32 logits (one Cast at the end), so sampling reads the same dtype from either variant;
- no CPU-only nodes: CUDA has no BitwiseAnd/BitShift kernels (the embedding unpacks nibbles with
  integer Div/Mul/Sub instead), and Shape-fed subgraphs (total_sequence_length, the tied lm_head's
  output shape) are replaced by a ReduceMax of the mask length and a constant shape. ORT places
  Shape-fed arithmetic on the CPU EP by design (fallback_cpu_capability.cc), which a session with
  `session.disable_cpu_ep_fallback` refuses.

It is derived from the saved ONNX graph and weights rather than from the GGUF (which Amber does
not keep), so existing model folders get it on first use of a GPU without re-importing. It lives
in `gpu/` inside the model folder: its own graph and data file, so its fingerprint differs from
the CPU graph's and saved KV of one is never loaded into the other.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .errors import ModelImportError
from .fold import LazyValues, fold_lazily
from .graph_scan import op_domains, read_graph
from .ort_form import PROGRESS_TAG, ensure_ort_form
from engine.native import OP_DOMAIN as NATIVE_DOMAIN
from .partials import new_partial, publish, source_stamp
from .writer import DataWriter

VARIANT_DIR = "gpu"
VARIANT_NAME = "fp16"
VARIANT_FORMAT = 2           # bump when the rewrite changes: older variant folders are rebuilt
MARKER = "amber_variant.json"
MODEL_FILE = "model.onnx"
DATA_FILE = "model.onnx.data"
IR_VERSION = 10              # onnx 1.23 writes IR 14 by default, which ONNX Runtime 1.31/1.32 rejects

ProgressFn = Callable[[int, int, str], None]   # (done, total, what)

# Kernels ONNX Runtime registers per execution provider, for the ops and element types the fp16
# variant uses (docs/OperatorKernels.md of onnxruntime; "*" = every type the graph can hold).
# Used to name the nodes a provider cannot place when a strict session fails.
_F16 = {"float16"}
_ANY = {"*"}
KERNELS: dict[str, dict[str, set[str]]] = {
    "CUDAExecutionProvider": {
        "GroupQueryAttention": {"float16", "bfloat16"}, "MatMulNBits": {"float", "float16", "bfloat16"},
        "SkipSimplifiedLayerNormalization": {"float", "float16", "bfloat16"},
        "SimplifiedLayerNormalization": {"float", "float16", "bfloat16", "double"},
        "GatherBlockQuantized": {"float", "float16", "bfloat16"},
        "BitwiseAnd": set(), "BitShift": set(),
        "Add": _ANY, "Sub": _ANY, "Mul": _ANY, "Div": _ANY, "Sigmoid": _ANY, "MatMul": _ANY, "Gemm": _ANY,
        "Cast": _ANY, "Gather": _ANY, "Reshape": _ANY, "Unsqueeze": _ANY, "Concat": _ANY, "Slice": _ANY,
        "Split": _ANY, "ReduceSum": _ANY, "ReduceMax": _ANY, "Identity": _ANY, "Shape": _ANY,
        "Greater": _ANY,     # phi3's long/short rotary switch (graph_blocks.rope_inputs)
    },
    "DmlExecutionProvider": {
        "GroupQueryAttention": {"float", "float16"}, "MatMulNBits": {"float", "float16"},
        "SkipSimplifiedLayerNormalization": {"float", "float16"},
        "SimplifiedLayerNormalization": {"float", "float16"},
        "BitwiseAnd": _ANY, "BitShift": _ANY,
        "Add": _ANY, "Sub": _ANY, "Mul": _ANY, "Div": _ANY, "Sigmoid": _ANY, "MatMul": _ANY, "Gemm": _ANY,
        "Cast": _ANY, "Gather": _ANY, "Reshape": _ANY, "Unsqueeze": _ANY, "Concat": _ANY, "Slice": _ANY,
        "Split": _ANY, "ReduceSum": _ANY, "ReduceMax": _ANY, "Identity": _ANY, "Shape": _ANY,
        "Greater": _ANY,
    },
}


def variant_dir(model_dir: Path) -> Path:
    return Path(model_dir) / VARIANT_DIR


def variant_graph(model_dir: Path) -> Path:
    return variant_dir(model_dir) / MODEL_FILE



def variant_is_current(model_dir: Path, cpu_graph: Path) -> bool:
    """True when gpu/ holds a complete variant made by this format from the current CPU graph."""
    folder = variant_dir(model_dir)
    try:
        marker = json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return (marker.get("format") == VARIANT_FORMAT and marker.get("variant") == VARIANT_NAME
            and marker.get("source") == source_stamp(cpu_graph) and (folder / MODEL_FILE).is_file())


def unplaceable_nodes(graph: onnx.ModelProto, provider: str) -> list[str]:
    """Nodes of `graph` for which `provider` registers no kernel of their element type ("Name (Op
    float)"), from the KERNELS table; ops the table does not know are reported too."""
    table = KERNELS.get(provider)
    if table is None:
        return []
    types = _value_types(graph)
    bad = []
    for node in graph.graph.node:
        allowed = table.get(node.op_type)
        elem = next((types[i] for i in list(node.input) + list(node.output) if i in types
                     and types[i] in ("float", "float16", "bfloat16", "double")), "")
        if allowed is None or (allowed != _ANY and (not allowed or (elem and elem not in allowed))):
            bad.append(f"{node.name} ({node.op_type}{' ' + elem if elem else ''})")
    return bad


_TYPE_NAMES = {TensorProto.FLOAT: "float", TensorProto.FLOAT16: "float16", TensorProto.BFLOAT16: "bfloat16",
               TensorProto.DOUBLE: "double"}


def _value_types(model: onnx.ModelProto) -> dict[str, str]:
    """Element type names of the graph's float values (inputs, outputs, initializers, inferred)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:   # noqa: BLE001 - contrib ops without inference: whatever is declared still counts
        inferred = model
    out: dict[str, str] = {}
    g = inferred.graph
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        name = _TYPE_NAMES.get(vi.type.tensor_type.elem_type)
        if name:
            out[vi.name] = name
    for init in g.initializer:
        name = _TYPE_NAMES.get(init.data_type)
        if name:
            out[init.name] = name
    return out


class _Rewriter:
    """Turns Amber's float32 decoder graph into the float16 variant (see the module docstring)."""

    def __init__(self, model: onnx.ModelProto, values: LazyValues) -> None:
        self.model = model
        self.g = model.graph
        self.values = values
        self._n = 0

    def _placeholder(self, name: str) -> None:
        """An initializer slot for a value `values` computes when the variant is written."""
        t = TensorProto()
        t.name = name
        self.g.initializer.append(t)

    def name(self, base: str) -> str:
        self._n += 1
        return f"fp16_{base}_{self._n}"

    def const(self, value: Any, dtype: Any) -> str:
        n = self.name("const")
        self.g.initializer.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), n))
        return n

    def node(self, op: str, inputs: list[str], outputs: list[str] | None = None, **attrs: Any) -> str:
        outs = outputs or [self.name(op.lower())]
        self.new_nodes.append(helper.make_node(op, inputs, outs, name=self.name(op), **attrs))
        return outs[0]

    def fold_zero_point_corrections(self) -> None:
        """Float zero points (Q4_1, Q4_K, int4) back into MatMulNBits.

        The CPU graph runs MatMulNBits with an integer zero point z0 and adds the difference as
        blocksum(x) @ ((z0 - z) s) (ORT's CPU kernel is ~10x slower with float zero points). In
        float16 that sum cancels badly (two large terms, a small difference), so the variant
        recovers z = z0 - corr / s in float32 and gives it to MatMulNBits as its float zero points
        (CUDA and CPU kernels take them as float16): the same blocks, w = (q - z) s."""
        g = self.g
        get = self.values.get
        producers = {o: n for n in g.node for o in n.output}
        drop: list[onnx.NodeProto] = []
        for add in list(g.node):
            if add.op_type != "Add" or len(add.input) != 2:
                continue
            mm, corr_mm = producers.get(add.input[0]), producers.get(add.input[1])
            if (mm is None or corr_mm is None or mm.op_type != "MatMulNBits" or corr_mm.op_type != "MatMul"
                    or not corr_mm.input[1].endswith(".zp_correction") or _attr(mm, "bits") != 4):
                continue
            n_out, k, block = int(_attr(mm, "N")), int(_attr(mm, "K")), int(_attr(mm, "block_size"))
            nb = k // block
            corr = get(corr_mm.input[1]).astype(np.float64).T   # [N, nb]
            scales = get(mm.input[2]).astype(np.float64).reshape(n_out, nb)
            if len(mm.input) > 3 and mm.input[3]:
                pairs = get(mm.input[3]).reshape(n_out, -1)
                z0 = np.stack([pairs & 0x0F, pairs >> 4], axis=-1).reshape(n_out, -1)[:, :nb].astype(np.float64)
            else:
                z0 = np.full((n_out, nb), 8.0)
            dead = scales == 0
            if dead.any():
                # Constant blocks (scale 0, levels 0, w = -corr): scale 1 and zero point -corr.
                scales = np.where(dead, 1.0, scales)
                z0 = np.where(dead, 0.0, z0)
                self.values.overrides[mm.input[2]] = scales.astype(np.float32).reshape(-1)
            zero_points = (z0 - corr / scales).astype(np.float32).reshape(-1)
            name = self.name(mm.input[2].removesuffix(".scales") + ".zero_points")
            self.values.overrides[name] = zero_points
            self._placeholder(name)
            inputs = list(mm.input[:3]) + [name] + list(mm.input[4:])
            del mm.input[:]
            mm.input.extend(inputs)
            mm.output[0] = add.output[0]
            drop.append(add)
        for n in drop:
            g.node.remove(n)

    def run(self) -> onnx.ModelProto:
        g = self.g
        fold_lazily(self.model, self.values)
        for name in self.values.recipes:
            self._placeholder(name)
        self.fold_zero_point_corrections()
        for vi in list(g.input) + list(g.output):
            if vi.name.startswith(("past_key_values.", "present.")):
                vi.type.tensor_type.elem_type = TensorProto.FLOAT16
        producers = {o: n for n in g.node for o in n.output}
        seqlens_k = total_len = None
        self.new_nodes: list[onnx.NodeProto] = []
        for n in g.node:
            if n.op_type == "Cast" and _attr(n, "to") == TensorProto.FLOAT:
                _set_attr(n, "to", TensorProto.FLOAT16)
            elif n.op_type == "SimplifiedLayerNormalization":
                _set_attr(n, "stash_type", 1)
            elif n.op_type == "MatMulNBits":
                _set_attr(n, "accuracy_level", 0)   # float16 A: ORT computes with float accumulation
            elif n.op_type == "GroupQueryAttention":
                seqlens_k, total_len = n.input[5], n.input[6]
        # Bit unpacking without BitwiseAnd/BitShift (no CUDA kernels): integer division.
        inits = {i.name: i for i in g.initializer}
        for n in list(g.node):
            if n.op_type in ("BitwiseAnd", "BitShift"):
                amount = int(numpy_helper.to_array(inits[n.input[1]]).reshape(-1)[0])
                wide = self.node("Cast", [n.input[0]], to=TensorProto.INT32)
                if n.op_type == "BitShift":     # x >> s = x // 2**s
                    val = self.node("Div", [wide, self.const(1 << amount, np.int32)])
                else:                           # x & (2**b - 1) = x - (x // 2**b) * 2**b
                    base = amount + 1
                    hi = self.node("Div", [wide, self.const(base, np.int32)])
                    val = self.node("Sub", [wide, self.node("Mul", [hi, self.const(base, np.int32)])])
                self.node("Cast", [val], outputs=[n.output[0]], to=TensorProto.UINT8)
                g.node.remove(n)
        if total_len is not None and seqlens_k is not None:
            # total_sequence_length = the mask's length: for Amber's (batch 1, no padding) feeds,
            # the largest row sum, i.e. seqlens_k + 1, computed on the device from the mask.
            sk = producers.get(seqlens_k)
            lengths = self.node("ReduceSum", [self.node("Cast", ["attention_mask"], to=TensorProto.INT32),
                                              self.const([1], np.int64)], keepdims=0)
            self.node("ReduceMax", [lengths], outputs=[total_len + "_fp16v"], keepdims=0)
            for n in g.node:   # GroupQueryAttention, and phi3's rotary switch (graph_blocks.py)
                for j, name in enumerate(n.input):
                    if name == total_len:
                        n.input[j] = total_len + "_fp16v"
            if sk is not None:
                self.node("Sub", [lengths, self.const(1, np.int32)], outputs=[seqlens_k + "_fp16v"])
                for n in g.node:
                    if n.op_type == "GroupQueryAttention":
                        n.input[5] = seqlens_k + "_fp16v"
        self._constant_logits_shape(producers)
        # float32 logits out: the graph's last node writes logits_fp16, one Cast makes `logits`.
        for n in g.node:
            for j, o in enumerate(n.output):
                if o == "logits":
                    n.output[j] = "logits_fp16"
        g.node.extend(self.new_nodes)
        g.node.append(helper.make_node("Cast", ["logits_fp16"], ["logits"], name=self.name("Cast"),
                                       to=TensorProto.FLOAT))
        _topological_sort(g)
        _drop_dead_nodes(g)
        return self.model

    def materialize(self, writer: DataWriter, progress: ProgressFn | None) -> None:
        """Writes every initializer the variant keeps, one at a time: float32 ones as float16."""
        g = self.g
        out: list[TensorProto] = []
        total = len(g.initializer)
        for i, init in enumerate(g.initializer):
            name = init.name
            lazy = name in self.values.overrides or name in self.values.recipes
            if lazy or init.data_location == TensorProto.EXTERNAL:
                arr = self.values.get(name)
            else:
                arr = numpy_helper.to_array(init)
            if arr.dtype == np.float32:
                with np.errstate(over="ignore"):
                    half = arr.astype(np.float16)
                if not np.all(np.isfinite(half[np.isfinite(arr)])):
                    raise ModelImportError(f"initializer {name}: values beyond float16's range")
                arr = half
            out.append(writer.tensor(name, arr))
            del arr
            if progress and (i % 64 == 0 or i + 1 == total):
                progress(i + 1, total, name)
        del g.initializer[:]
        g.initializer.extend(out)

    def _constant_logits_shape(self, producers: dict[str, onnx.NodeProto]) -> None:
        """The tied lm_head reshapes [B, V] back to [B, 1, V] with a Shape-fed shape: make it constant
        (the graph computes logits for the last position only)."""
        node = producers.get("logits")
        if node is None or node.op_type != "Reshape" or node.input[1] not in producers:
            return
        vocab = next((d.dim_value for o in self.g.output if o.name == "logits"
                      for d in o.type.tensor_type.shape.dim[2:3]), 0)
        if vocab:
            node.input[1] = self.const([-1, 1, vocab], np.int64)


def _attr(node: onnx.NodeProto, name: str) -> Any:
    return next((helper.get_attribute_value(a) for a in node.attribute if a.name == name), None)


def _set_attr(node: onnx.NodeProto, name: str, value: int) -> None:
    for a in node.attribute:
        if a.name == name:
            a.CopyFrom(helper.make_attribute(name, value))
            return
    node.attribute.append(helper.make_attribute(name, value))


def _drop_dead_nodes(g: onnx.GraphProto) -> None:
    """Removes nodes whose outputs nothing uses (the replaced Shape subgraphs), and unused initializers."""
    needed = {o.name for o in g.output}
    keep: list[onnx.NodeProto] = []
    for n in reversed(list(g.node)):
        if any(o in needed for o in n.output if o):
            keep.append(n)
            needed.update(i for i in n.input if i)
    del g.node[:]
    g.node.extend(reversed(keep))
    inits = [i for i in g.initializer if i.name in needed]
    del g.initializer[:]
    g.initializer.extend(inits)


def _topological_sort(g: onnx.GraphProto) -> None:
    available = {i.name for i in g.input} | {i.name for i in g.initializer} | {""}
    pending, ordered = list(g.node), []
    while pending:
        ready = [n for n in pending if all(i in available for i in n.input)]
        if not ready:
            missing = sorted({i for n in pending for i in n.input if i not in available
                              and i not in {o for m in pending for o in m.output}})
            raise ModelImportError(f"the fp16 variant's graph has a cycle or missing inputs {missing[:3]}")
        for n in ready:
            ordered.append(n)
            available.update(n.output)
        ids = {id(n) for n in ready}
        pending = [n for n in pending if id(n) not in ids]
    del g.node[:]
    g.node.extend(ordered)


def build_variant(model_dir: Path | str, cpu_graph: Path | None = None,
                  progress: ProgressFn | None = None, dest: Path | None = None) -> Path:
    """Writes the float16 variant into `model_dir/gpu/` (or `dest`) from the saved CPU graph and
    returns its graph path. Temp folder + fsync + rename: an interrupted build leaves nothing."""
    model_dir = Path(model_dir)
    cpu_graph = cpu_graph or model_dir / MODEL_FILE
    folder = dest or variant_dir(model_dir)
    try:
        # The structure only: weights are read one at a time from the data file (LazyValues).
        model = onnx.load(str(cpu_graph), load_external_data=False)
    except Exception as exc:  # noqa: BLE001 - untrusted file: the library raises any kind; reported as one line
        raise ModelImportError(f"{cpu_graph}: cannot read the graph to make its GPU variant ({exc})") from None
    if any(n.domain == NATIVE_DOMAIN for n in model.graph.node):
        # GgufMatMul runs on the CPU only: the variant is made from the folder's ORT form (ort_form.py).
        cpu_graph = ensure_ort_form(model_dir, cpu_graph, progress)
        model = onnx.load(str(cpu_graph), load_external_data=False)
    if not any(n.op_type == "GroupQueryAttention" for n in model.graph.node):
        raise ModelImportError(f"{cpu_graph}: not an Amber-converted graph (no GroupQueryAttention); "
                               "a GPU variant is made only for models Amber imported")
    rewriter = _Rewriter(model, LazyValues(model, cpu_graph.parent))
    model = rewriter.run()
    model.ir_version = IR_VERSION
    tmp = new_partial(folder)
    try:
        writer = DataWriter(tmp / DATA_FILE, DATA_FILE)
        try:
            rewriter.materialize(writer, progress)
        finally:
            writer.close()
        onnx.save_model(model, tmp / MODEL_FILE)
        (tmp / MARKER).write_text(json.dumps({"variant": VARIANT_NAME, "format": VARIANT_FORMAT,
                                              "source": source_stamp(cpu_graph)}))
        publish(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return folder / MODEL_FILE


def graph_is_native(graph: Path) -> bool:
    """The graph has nodes of Amber's op domain (False for a file protobuf cannot read)."""
    try:
        return NATIVE_DOMAIN in op_domains(read_graph(graph))
    except (OSError, ValueError):
        return False


def print_variant_progress(done: int, total: int, what: str) -> None:
    """CLI progress while the GPU variant is made (first use of a GPU), or a native folder is
    re-formed for ONNX Runtime (ort_form.py): one line on stderr."""
    end = "\n" if done == total else ""
    label = ("re-forming the model for ONNX Runtime" if what.startswith(PROGRESS_TAG)
             else "preparing the GPU (float16) variant")
    if sys.stderr.isatty():
        sys.stderr.write(f"\r{label}: {done}/{total} tensors{end}")
    elif done == total:
        sys.stderr.write(f"{label}: {done}/{total} tensors\n")
    sys.stderr.flush()


def is_variant_folder(folder: Path) -> bool:
    """True for a folder holding a variant graph (its marker file is there)."""
    return (Path(folder) / MARKER).is_file()


def ensure_variant(model_dir: Path | str, cpu_graph: Path | None = None,
                   progress: ProgressFn | None = None, spare_root: Path | None = None) -> Path:
    """The variant's graph, made first if missing or stale (first use of a GPU on an older folder).

    A model folder Amber cannot write (an installed package's read-only copy of the default model)
    gets its variant under `spare_root` instead, one folder per model folder path."""
    model_dir = Path(model_dir)
    cpu_graph = cpu_graph or model_dir / MODEL_FILE
    if graph_is_native(cpu_graph):
        # Amber's native CPU kernels have no GPU form: the variant comes from the ORT form.
        cpu_graph = ensure_ort_form(model_dir, cpu_graph, progress, spare_root=spare_root)
    if variant_is_current(model_dir, cpu_graph):
        return variant_graph(model_dir)
    try:
        return build_variant(model_dir, cpu_graph, progress)
    except OSError:
        if spare_root is None:
            raise
    tag = hashlib.blake2b(str(model_dir.resolve()).encode(), digest_size=6).hexdigest()
    spare = Path(spare_root) / f"{model_dir.name}-{tag}"
    marker_ok = False
    try:
        marker = json.loads((spare / MARKER).read_text())
        marker_ok = (marker.get("format") == VARIANT_FORMAT and marker.get("source") == source_stamp(cpu_graph)
                     and (spare / MODEL_FILE).is_file())
    except (OSError, ValueError):
        pass
    if marker_ok:
        return spare / MODEL_FILE
    spare.parent.mkdir(parents=True, exist_ok=True)
    return build_variant(model_dir, cpu_graph, progress, dest=spare)
