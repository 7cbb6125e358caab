"""Loads a model folder in the Hugging Face optimum / onnx-community layout."""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from tokenizers import Tokenizer

from engine.base import paths
from engine.base.oneline import one_line
from engine.onnx.fingerprint import model_fingerprint
from engine.onnx.graph_scan import op_types, read_graph
from engine.native.attention import uses_attention
from engine.runtime.native_ops import graph_is_native, unavailable_reason
from engine.runtime.model_config import (ConfigError, check_config, check_external_data, check_generation_config,
                           check_tokenizer_config, read_json_object)
from engine.runtime.providers import ProviderChoice, create_session, short_name
from engine.runtime.host.malloc import trim_heap
from engine.runtime.host.residency import release_mapped_weights
from engine.text.sampling import resolve_sampling

_PAST = re.compile(r"^past_key_values\.(\d+)\.(key|value)$")
_ORT_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16}


class ModelLoadError(Exception):
    """A model folder cannot be loaded; the message names the file and what is wrong."""

    def __init__(self, message: str = "") -> None:
        super().__init__(one_line(str(message)))   # one line, whatever the file names hold


_ORT_NODE_FAILED = re.compile(r"running (?P<op>\S+) node\. Name:'(?P<name>[^']*)' Status Message: (?P<why>.*)")


class ModelRunError(Exception):
    """ONNX Runtime could not run the model (a crafted or damaged graph whose op fails on the
    shapes it is given); one line naming the graph and ORT's own reason."""

    def __init__(self, graph: Path | str | None, exc: BaseException) -> None:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        node = _ORT_NODE_FAILED.search(reason)
        if node is not None:        # "... while running GgufMatMul node. Name:'x' Status Message: why"
            reason = f"node {node['name']} ({node['op']}): {node['why']}"
        super().__init__(one_line(f"{graph or 'the model'}: ONNX Runtime could not run the model ({reason[:500]})"))


def ort_failures() -> tuple[type[BaseException], ...]:
    """The exceptions a session's run raises when the graph fails (RuntimeError from an IOBinding
    run, pybind11's own classes from `run`)."""
    from onnxruntime.capi import onnxruntime_pybind11_state as state  # type: ignore[import-untyped]  # noqa: PLC0415
    ours = [c for c in vars(state).values() if isinstance(c, type) and issubclass(c, Exception)
            and c.__module__ == state.__name__]
    return (RuntimeError, *ours)


@dataclass
class KVLayout:
    """The KV cache tensors as the session declares them (names, counts, dtype, shapes)."""
    n_layers: int
    kv_heads: int
    head_dim: int
    dtype: type
    past_names: list[tuple[str, str]]      # per layer: (key input, value input)
    present_names: list[tuple[str, str]]   # per layer: (key output, value output)
    shared_buffer: bool                    # GroupQueryAttention: past and present may be one buffer

    @property
    def bytes_per_token(self) -> int:
        return 2 * self.n_layers * self.kv_heads * self.head_dim * np.dtype(self.dtype).itemsize


@dataclass
class LoadedModel:
    path: Path
    name: str
    session: Any                      # onnxruntime.InferenceSession
    provider: str                     # e.g. "CPUExecutionProvider", as get_providers() reports
    provider_fallback_reason: str | None
    kv: KVLayout
    tokenizer: Tokenizer
    config: dict[str, Any]
    generation_config: dict[str, Any]
    tokenizer_config: dict[str, Any]
    context_window: int
    eos_token_ids: list[int]
    fingerprint: str
    input_names: set[str] = field(default_factory=set)
    logits_name: str = "logits"
    variant: str = "fp32"             # "fp16": the GPU variant (float16 activations and KV)
    graph: Path | None = None         # the ONNX file the session runs
    amber_attention: bool = False     # ai.amber.Attention: flash-style, no score matrix (runner.chunk_len)

    @property
    def provider_short(self) -> str:
        return short_name(self.provider)

    @property
    def attention(self) -> str:
        return "gqa" if self.kv.shared_buffer else "standard"


def find_graph(model_dir: Path, genai_file: str | None = None) -> Path:
    if genai_file is not None:     # onnxruntime-genai's builder names its graph in genai_config.json
        if (model_dir / genai_file).is_file():
            return model_dir / genai_file
        raise ModelLoadError(f"{model_dir / genai_file}: missing (the graph genai_config.json names)")
    for candidate in (model_dir / "model.onnx", model_dir / "onnx" / "model.onnx",
                      model_dir / "decoder_model_merged.onnx", model_dir / "onnx" / "decoder_model_merged.onnx"):
        if candidate.is_file():
            return candidate
    raise ModelLoadError(f"{model_dir}: no model.onnx (looked in the folder and in onnx/)")


def _read_json(path: Path, required: bool) -> dict[str, Any]:
    try:
        return read_json_object(path, required)
    except ConfigError as exc:
        raise ModelLoadError(str(exc)) from None


def _read_genai(model_dir: Path) -> Any:
    from .genai_config import read_genai_config   # noqa: PLC0415 - only folders without config.json
    try:
        return read_genai_config(model_dir)
    except ConfigError as exc:
        raise ModelLoadError(str(exc)) from None


_SOURCES = ("config.json", "generation_config.json")


def _check_folder_files(model_dir: Path, config: dict[str, Any], generation_config: dict[str, Any],
                        tokenizer_config: dict[str, Any], sources: tuple[str, str] = _SOURCES) -> None:
    """Types and ranges of what the loader and the sampler read from the folder's JSON files."""
    try:
        check_config(config, model_dir / sources[0])
        check_generation_config(generation_config, model_dir / sources[1],
                                lambda gen: resolve_sampling(None, gen))
        check_tokenizer_config(tokenizer_config, model_dir / "tokenizer_config.json")
    except ConfigError as exc:
        raise ModelLoadError(str(exc)) from None


def _uses_gqa(graph: Path) -> bool:
    """Also checks the graph's external-data references before ONNX Runtime reads them."""
    return _scan_attention(graph)[0]


def _scan_attention(graph: Path) -> tuple[bool, bool]:
    """(shared-buffer attention, ai.amber.Attention); checks the external-data references too."""
    proto = read_graph(graph)     # not onnx.load: a generating process never imports onnx
    try:
        check_external_data(proto, graph)
    except ConfigError as exc:
        raise ModelLoadError(str(exc)) from None
    # ai.amber.Attention (native form, float16 KV) binds past and present as one buffer too
    amber = uses_attention(proto)
    return "GroupQueryAttention" in op_types(proto) or amber, amber


# The variant builder (and onnx with it) is imported only where a variant is made or looked at.
def _variants() -> Any:
    from engine.onnx import variants   # noqa: PLC0415 - ~25 MiB of imports a CPU run never needs
    return variants


def _ort_form() -> Any:
    from engine.onnx import ort_form   # noqa: PLC0415 - onnx is imported only where a folder is re-formed
    return ort_form


def _is_import_error(exc: BaseException) -> bool:
    """A converter error (it names the file); only raised once the converter was imported."""
    errors = sys.modules.get("engine.onnx.errors")
    return errors is not None and isinstance(exc, errors.ModelImportError)


def _dim(value: Any, fallback: int | None, what: str, graph: Path) -> int:
    if isinstance(value, int) and value > 0:
        return value
    if fallback:
        return int(fallback)
    raise ModelLoadError(f"{graph}: cannot tell the KV {what} (symbolic in the graph, absent from config.json)")


def read_kv_layout(session: Any, config: dict[str, Any], graph: Path, gqa: bool) -> KVLayout:
    """KV names, count, dtype and shapes from the session's own inputs and outputs, like optimum."""
    pasts: dict[int, dict[str, Any]] = {}
    for inp in session.get_inputs():
        m = _PAST.match(inp.name)
        if m:
            pasts.setdefault(int(m.group(1)), {})[m.group(2)] = inp
    if not pasts:
        raise ModelLoadError(f"{graph}: no past_key_values.N.key/value inputs (not a decoder with KV cache)")
    n_layers = max(pasts) + 1
    if sorted(pasts) != list(range(n_layers)) or any(len(v) != 2 for v in pasts.values()):
        raise ModelLoadError(f"{graph}: past_key_values inputs are incomplete")
    outputs = {o.name for o in session.get_outputs()}
    present = [(f"present.{i}.key", f"present.{i}.value") for i in range(n_layers)]
    missing = [n for pair in present for n in pair if n not in outputs]
    if missing:
        raise ModelLoadError(f"{graph}: missing outputs {missing[:2]}…")
    first = pasts[0]["key"]
    dtype = _ORT_TYPES.get(first.type)
    if dtype is None:
        raise ModelLoadError(f"{graph}: KV dtype {first.type} is not supported")
    heads = config.get("num_key_value_heads") or config.get("num_attention_heads")
    head_dim = config.get("head_dim") or (
        config["hidden_size"] // config["num_attention_heads"]
        if "hidden_size" in config and "num_attention_heads" in config else None)
    shape = first.shape
    return KVLayout(n_layers=n_layers, kv_heads=_dim(shape[1], heads, "head count", graph),
                    head_dim=_dim(shape[3], head_dim, "head size", graph), dtype=dtype,
                    past_names=[(f"past_key_values.{i}.key", f"past_key_values.{i}.value") for i in range(n_layers)],
                    present_names=present, shared_buffer=gqa)


def _token_ids(value: Any) -> list[int]:
    if value is None:
        return []
    return [int(v) for v in value] if isinstance(value, list) else [int(value)]


Variant = Literal["auto", "fp32", "fp16"]


def _variant_maker(model_dir: Path, graph: Path, progress: Any) -> Any:
    """The GPU graph for a folder: Amber's float16 variant (made on first use, with progress) for
    graphs Amber converted; any other graph runs as it is."""
    def make() -> str:
        if not _uses_gqa(graph):
            return str(graph)
        return str(_variants().ensure_variant(model_dir, graph, progress, spare_root=_spare_root()))
    return make


def _spare_root() -> Path | None:
    """Where variants of read-only model folders go (Amber's data folder), if it can tell."""
    try:
        return paths.amber_home() / "variants"
    except Exception:   # noqa: BLE001 - no usable data folder: variants then need a writable model folder
        return None


def load_model(model_dir: Path | str, provider: ProviderChoice = "auto", threads: int | None = None,
               variant: Variant = "auto", progress: Any = None) -> LoadedModel:
    """Opens a model folder; every problem becomes a `ModelLoadError` that names the file.

    `variant`: "auto" runs the float32 graph on CPU and the float16 variant on a GPU; "fp16" runs
    the variant on whichever provider (on CPU: to check its numerics); "fp32" never uses it.
    `progress(done, total, what)` reports making the variant (first use of a GPU)."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise ModelLoadError(f"{model_dir}: no such model folder")
    genai = _read_genai(model_dir)
    graph = find_graph(model_dir, genai.graph_file if genai else None)
    config = _read_json(model_dir / "config.json", required=genai is None)
    generation_config = _read_json(model_dir / "generation_config.json", required=False)
    sources = ["config.json", "generation_config.json"]
    if genai is not None:      # the builder's folder: genai_config.json stands in for the HF files
        if not config:
            config, sources[0] = genai.config, genai.path.name
        if not generation_config:
            generation_config, sources[1] = genai.generation, genai.path.name
    tokenizer_config = _read_json(model_dir / "tokenizer_config.json", required=False)
    _check_folder_files(model_dir, config, generation_config, tokenizer_config, (sources[0], sources[1]))
    tok_path = model_dir / "tokenizer.json"
    if not tok_path.is_file():
        raise ModelLoadError(f"{tok_path}: missing")
    try:
        tokenizer = Tokenizer.from_file(str(tok_path))
    except Exception as exc:  # noqa: BLE001 - untrusted file: the library raises any kind; reported as one line
        raise ModelLoadError(f"{tok_path}: not a valid tokenizer ({exc})") from None
    try:
        scanned = graph, _scan_attention(graph)   # checks the external-data references before ORT reads them
        reformed = False
        if graph_is_native(graph) and unavailable_reason() is not None:
            # Amber's kernels (GgufMatMul) cannot run here: the folder's ORT form runs instead,
            # re-formed from its own weights on first use (engine/onnx/ort_form.py).
            graph = _ort_form().ensure_ort_form(model_dir, graph, progress, spare_root=_spare_root())
            reformed = True
        cpu_graph = graph
        if genai is not None and not (model_dir / "amber_import.json").is_file():
            # onnxruntime-genai's builder made this graph (its own float16 builds exist for GPUs):
            # Amber's variant rewriter expects its own graphs (last-position logits), so it runs as is.
            if variant == "fp16":
                raise ModelLoadError(f"{graph}: not an Amber-converted graph (an onnxruntime-genai build); "
                                     "a GPU variant is made only for models Amber imported")
            variant = "fp32"
        if variant == "fp16":
            cpu_graph = _variants().ensure_variant(model_dir, graph, progress, spare_root=_spare_root())
        gpu_graph: Any = str(graph) if variant == "fp32" else _variant_maker(model_dir, graph, progress)
        if variant == "fp16":
            gpu_graph = str(cpu_graph)
        try:
            result = create_session(str(cpu_graph), provider, threads, gpu_model_path=gpu_graph)
        except Exception as failed:  # noqa: BLE001 - a native graph gets its ORT form; anything else is reported below
            if reformed or cpu_graph != graph or not graph_is_native(graph):
                raise
            # Amber's kernels load but cannot run this graph here (say a GGUF type this CPU's
            # kernels lack): the folder's ORT form runs instead.
            try:
                ort_graph = _ort_form().ensure_ort_form(model_dir, graph, progress, spare_root=_spare_root())
            except Exception:  # noqa: BLE001 - it cannot be re-formed either: a broken folder, ORT's reason says why
                raise failed from None
            graph = cpu_graph = ort_graph
            reformed = True
            result = create_session(str(cpu_graph), provider, threads, gpu_model_path=gpu_graph)
        graph = Path(result.model_path or cpu_graph)
        gqa, amber_attention = scanned[1] if graph == scanned[0] else _scan_attention(graph)
    except ModelLoadError:
        raise
    except Exception as exc:  # noqa: BLE001 - ONNX Runtime's errors on a bad graph: reported as one line
        if _is_import_error(exc):
            raise ModelLoadError(str(exc)) from None     # it names the file already
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelLoadError(f"{graph}: ONNX Runtime cannot load it ({first_line[:400]})") from None
    session = result.session
    # What ORT still maps of the weights (the embedding table) was read while the session was made;
    # a step reads a few pages of it: the rest leaves the process's memory.
    release_mapped_weights(graph.parent)
    trim_heap()     # what making the session freed (optimiser, prepacking) leaves the heap
    kv = read_kv_layout(session, config, graph, gqa)
    inputs = {i.name for i in session.get_inputs()}
    if "input_ids" not in inputs:
        raise ModelLoadError(f"{graph}: no input_ids input")
    fed = {"input_ids", "attention_mask", "position_ids", "use_cache_branch"} | {
        n for pair in kv.past_names for n in pair}
    unknown = sorted(inputs - fed)
    if unknown:    # ONNX Runtime would fail on the first step with its own message
        raise ModelLoadError(f"{graph}: needs inputs Amber does not feed ({', '.join(unknown[:4])[:200]})")
    logits = "logits" if "logits" in {o.name for o in session.get_outputs()} else session.get_outputs()[0].name
    eos = []
    for source in (generation_config.get("eos_token_id"), config.get("eos_token_id")):
        for i in _token_ids(source):
            if i not in eos:
                eos.append(i)
    eos_tok = tokenizer_config.get("eos_token")
    if isinstance(eos_tok, dict):
        eos_tok = eos_tok.get("content")
    eos_id = tokenizer.token_to_id(eos_tok) if isinstance(eos_tok, str) else None
    if eos_id is not None and eos_id not in eos:
        eos.append(int(eos_id))
    window = int(config.get("max_position_embeddings") or config.get("n_positions") or 2048)
    name = model_dir.name
    is_variant = graph.parent != model_dir and _variants().is_variant_folder(graph.parent)
    variant_name = _variants().VARIANT_NAME if is_variant else ""
    # The ORT form's KV (float32) is not the native form's (float16 with ai.amber.Attention).
    form_name = variant_name or ("ort" if reformed else "")
    return LoadedModel(path=model_dir, name=name, session=session, provider=result.provider,
                       provider_fallback_reason=result.fallback_reason, kv=kv, tokenizer=tokenizer,
                       config=config, generation_config=generation_config, tokenizer_config=tokenizer_config,
                       context_window=window, eos_token_ids=eos,
                       fingerprint=model_fingerprint(model_dir, graph, form_name),
                       input_names=inputs, logits_name=logits, variant=variant_name or "fp32",
                       graph=graph, amber_attention=amber_attention)
