"""Amber's own GGUF → ONNX importer (numpy + onnx + gguf; no torch, no transformers)."""
from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Callable, Protocol

import numpy as np
import onnx

from .arch import ARCHS
from .arch_weights import extra_vector_sizes, load_layer
from engine.onnx.errors import ModelImportError
from engine.onnx.fingerprint import model_fingerprint
from .gguf_source import GGUFSource, ModelSpec
from .graph import build_graph
from .model_weights import LayerWeights, ModelWeights
from engine.native.attention import uses_attention

from .native_form import OP_DOMAIN as NATIVE_DOMAIN
from .native_form import Kernels, check_kernels, choose_kernels, native_weight
from .native_swiglu import uses_swiglu
from engine.onnx.partials import new_partial, unmark
from .tokenizer import build_tokenizer_files, eos_token_ids
from engine.onnx.variants import VARIANT_DIR, build_variant
from engine.onnx.weights import WEIGHT_POLICIES, Weight, WeightPolicy, convert_tensor
from engine.onnx.writer import DataWriter, drop_pages

__all__ = ["convert_gguf", "ModelImportError", "ConversionCancelled", "WEIGHT_POLICIES", "EXACT", "FAST",
           "format_size_report"]

# MatMulNBits accuracy levels. EXACT computes in float32: the model equals the dequantized GGUF
# to float rounding (the tests check this). FAST lets ONNX Runtime quantize activations to int8
# per block of 32, the numerics llama.cpp uses for its quantized dot products: ~2x faster
# decoding, mean KL 0.005 from EXACT on the default model (0.0049 with the compact weight forms,
# 0.0051 before them: bench.suites.convert.kl_worker). Amber's own imports use FAST.
EXACT, FAST = 0, 4

ProgressFn = Callable[[int, int, str], None]   # (done, total, what)
MODEL_FILE = "model.onnx"
DATA_FILE = "model.onnx.data"
# Sampling defaults written to generation_config.json (a GGUF carries none).
DEFAULT_SAMPLING = {"do_sample": True, "temperature": 0.7, "top_k": 40, "top_p": 0.95, "min_p": 0.05,
                    "repetition_penalty": 1.1}


class ConversionCancelled(Exception):
    """The caller cancelled the conversion; nothing was left behind."""


class _Cancel(Protocol):
    def is_set(self) -> bool: ...


def _llama_unpermute(n_heads: int, head_dim: int) -> np.ndarray:
    """Row order that undoes llama.cpp's Q/K permutation (interleaved rotary -> rotate-half)."""
    return np.arange(n_heads * head_dim).reshape(n_heads, head_dim // 2, 2).transpose(0, 2, 1).reshape(-1)


class _WeightLoader:
    def __init__(self, src: GGUFSource, spec: ModelSpec, policy: WeightPolicy,
                 progress: ProgressFn | None, cancel: _Cancel | None) -> None:
        self.src, self.spec, self.policy = src, spec, policy
        self.progress, self.cancel = progress, cancel
        self.done, self.total = 0, len(src.tensors)
        self.exact = False
        self.native = False          # kernels="native": supported matrices stay the GGUF's rows
        self.q_perm = _llama_unpermute(spec.n_head, spec.head_dim)
        self.k_perm = _llama_unpermute(spec.n_head_kv, spec.head_dim)   # K uses the KV head count

    def _tick(self, name: str) -> None:
        if self.cancel is not None and self.cancel.is_set():
            raise ConversionCancelled()
        self.done += 1
        if self.progress:
            self.progress(self.done, self.total, name)

    def matrix(self, name: str, policy: WeightPolicy | None = None, raw: bool = True) -> Weight:
        t = self.src.tensor(name)
        if len(t.shape) != 2:
            raise ModelImportError(f"tensor {name}: expected a matrix, found shape {list(t.shape)}")
        k, n = int(t.shape[0]), int(t.shape[1])     # GGUF lists the fastest axis first
        if raw and self.native and (policy or self.policy) == "auto":
            nw = native_weight(name, t.tensor_type, t.data, n, k)
            if nw is not None:
                self._tick(name)    # its pages are read when it is written, not here
                return nw
        w = convert_tensor(name, t.tensor_type, t.data, n, k, policy or self.policy, exact=self.exact)
        drop_pages(self.src.reader.data, int(t.data_offset), int(t.n_bytes))
        self._tick(name)
        return w

    def vector(self, name: str) -> np.ndarray:
        v = self.src.float_tensor(name).reshape(-1)
        self._tick(name)
        return v

    def optional_vector(self, name: str) -> np.ndarray | None:
        return self.vector(name) if self.src.has_tensor(name) else None

    def head(self) -> ModelWeights:
        """The embedding, final norm and rope factors; layers and output load when the graph needs them."""
        spec = self.spec
        emb_t = self.src.tensor("token_embd.weight")
        if len(emb_t.shape) == 2 and int(emb_t.shape[1]) != spec.vocab_size:
            # The logits are as wide as the embedding table (padded vocabularies are common).
            spec.vocab_size = int(emb_t.shape[1])
        embedding = self.matrix("token_embd.weight", raw=False)   # the lookup keeps the Gather form
        if embedding.k != spec.n_embd:
            raise ModelImportError(f"token_embd.weight rows have {embedding.k} values, expected {spec.n_embd} "
                                   "from the model's metadata")
        final_norm = self._sized(self.vector("output_norm.weight"), "output_norm.weight", spec.n_embd)
        factors = self.optional_vector("rope_freqs.weight")
        if factors is not None:
            self._sized(factors, "rope_freqs.weight", spec.head_dim // 2)
        long_short: list[np.ndarray | None] = [None, None]
        if spec.params.longrope is not None:
            for j, which in enumerate(("long", "short")):
                name = f"rope_factors_{which}.weight"
                long_short[j] = self._sized(self.vector(name), name, spec.head_dim // 2)
        return ModelWeights(embedding=embedding, output=None, final_norm=final_norm, layers=[],
                            rope_factors=factors, output_fn=self.output, rope_long=long_short[0],
                            rope_short=long_short[1])

    def output(self) -> Weight | None:
        if self.spec.tied_embeddings:
            out = None
            if self.native and self.policy == "auto":
                # The tied lm_head as a GgufMatMul over the embedding's raw rows (the lookup has its own form).
                t = self.src.tensor("token_embd.weight")
                out = native_weight("token_embd.weight", t.tensor_type, t.data, int(t.shape[1]), int(t.shape[0]))
        else:
            out = self.matrix("output.weight")
            if out.n != self.spec.vocab_size:
                raise ModelImportError(f"output.weight has {out.n} rows but token_embd.weight has "
                                       f"{self.spec.vocab_size}")
        if self.progress and self.done < self.total:
            self.progress(self.total, self.total, "unused tensors skipped")   # the bar always ends
        return out

    def layer(self, i: int) -> LayerWeights:
        spec = self.spec
        lw = load_layer(self, spec, i)     # the architecture's tensor layout (arch_weights.py)
        self._check_layer(i, lw)       # before the permutation, which indexes by the metadata's shapes
        if ARCHS[spec.architecture].permute_qk:
            # llama.cpp stores llama Q/K rows permuted for its interleaved rotary; qwen2 is not permuted.
            lw.q, lw.k = lw.q.rows(self.q_perm), lw.k.rows(self.k_perm)
            if lw.q_bias is not None:
                lw.q_bias = lw.q_bias[self.q_perm]
            if lw.k_bias is not None:
                lw.k_bias = lw.k_bias[self.k_perm]
        return lw

    def _sized(self, v: np.ndarray, name: str, want: int) -> np.ndarray:
        if v.size != want:
            raise ModelImportError(f"tensor {name} has {v.size} values, expected {want} from the model's metadata")
        return v

    def _check_layer(self, i: int, lw: LayerWeights) -> None:
        s = self.spec
        for key, size in (("attn_norm", s.n_embd), ("ffn_norm", s.n_embd), ("q_bias", s.n_head * s.head_dim),
                          ("k_bias", s.n_head_kv * s.head_dim), ("v_bias", s.n_head_kv * s.head_dim),
                          *extra_vector_sizes(s).items()):
            v = getattr(lw, key)
            if v is not None:
                self._sized(v, f"layer {i} {key}", size)
        want = {"q": (s.n_head * s.head_dim, s.n_embd), "k": (s.n_head_kv * s.head_dim, s.n_embd),
                "v": (s.n_head_kv * s.head_dim, s.n_embd), "o": (s.n_embd, s.n_head * s.head_dim),
                "gate": (s.n_ff, s.n_embd), "up": (s.n_ff, s.n_embd), "down": (s.n_embd, s.n_ff)}
        for key, shape in want.items():
            w: Weight = getattr(lw, key)
            if (w.n, w.k) != shape:
                raise ModelImportError(f"layer {i} {key} weight has shape {(w.n, w.k)}, expected {shape} "
                                       "from the model's metadata")


def _write_json(path: Path, data: object) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False), encoding="utf-8")


def _fsync_tree(folder: Path) -> None:
    for p in folder.iterdir():
        if p.is_dir():
            continue     # gpu/: fsynced when written
        with open(p, "rb") as f:
            os.fsync(f.fileno())


def convert_gguf(src_path: Path | str, dest_dir: Path | str, weights: WeightPolicy = "auto",
                 progress: ProgressFn | None = None, cancel: _Cancel | None = None,
                 accuracy_level: int = 0, gpu_variant: bool = True, kernels: str = "auto") -> Path:
    """Converts a GGUF file into an Amber/optimum model folder at `dest_dir`.

    With `gpu_variant` the folder also gets the float16 GPU variant (gpu/, see variants.py).
    `kernels`: "native" keeps the matrices Amber's kernels handle as the GGUF's rows for the
    GgufMatMul op (native_form.py; CPU only: its GPU variant is made from its ORT form on first
    use, engine/onnx/ort_form.py), "ort" uses ONNX Runtime's
    MatMulNBits, "auto" picks as `native_form.choose_kernels` does. The exact mode is always "ort".

    Writes into a temporary sibling folder and renames it at the end, so an interrupted or
    failed conversion leaves nothing half-made.
    """
    if weights not in WEIGHT_POLICIES:
        raise ModelImportError(f"unknown weights option '{weights}' (choose from {', '.join(WEIGHT_POLICIES)})")
    form: Kernels = choose_kernels() if kernels == "auto" else check_kernels(kernels)
    if accuracy_level == EXACT:
        form = "ort"        # the native kernels quantize activations to int8: not the exact promise
    src_path, dest = Path(src_path), Path(dest_dir)
    if dest.exists() and not dest.is_dir():
        raise ModelImportError(f"{dest}: destination exists and is not a folder")
    if dest.exists() and any(dest.iterdir()):
        raise ModelImportError(f"{dest}: destination exists and is not empty")
    started = time.perf_counter()
    src = GGUFSource(src_path)
    spec = src.spec()
    tok_json, tok_config, template = build_tokenizer_files(src)
    loader = _WeightLoader(src, spec, weights, progress, cancel)
    loader.exact = accuracy_level == EXACT
    loader.native = form == "native"
    emb_shape = src.tensor("token_embd.weight").shape
    n_tokens = len(tok_json["model"]["vocab"])
    rows = int(emb_shape[1]) if len(emb_shape) == 2 else spec.vocab_size
    if n_tokens > rows:
        raise ModelImportError(f"{src_path.name}: the vocabulary has {n_tokens} tokens but token_embd.weight "
                               f"has only {rows} rows")

    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = new_partial(dest)       # a killed conversion's leftover beside it is removed here
    try:
        # Tensor by tensor: each is read from the memory-mapped GGUF, converted and written to the
        # data file, then dropped (writer.py); only the graph's structure stays in memory.
        writer = DataWriter(tmp / DATA_FILE, DATA_FILE)
        try:
            model = build_graph(spec, loader.head(), accuracy_level=accuracy_level, writer=writer,
                                layer=loader.layer)
        except ModelImportError as exc:     # the weight checks name the tensor; say which file too
            raise ModelImportError(f"{src_path.name}: {exc}") from None
        finally:
            writer.close()
        onnx.save_model(model, tmp / MODEL_FILE)
        native = any(o.domain == NATIVE_DOMAIN for o in model.opset_import)   # some matrix kept raw
        attention = "amber" if uses_attention(model) else "gqa"           # ai.amber.Attention, float16 KV
        swiglu = "fused" if uses_swiglu(model) else "split"              # GgufMatMul's SwiGLU epilogue
        del model
        if cancel is not None and cancel.is_set():
            raise ConversionCancelled()
        if gpu_variant and not native:
            # The float16 graph GPUs run (CUDA's GroupQueryAttention has no float32 kernel), in gpu/.
            build_variant(tmp, tmp / MODEL_FILE, dest=tmp / VARIANT_DIR)
        tokens = list(tok_json["model"]["vocab"].keys())
        eos_ids = eos_token_ids(src, tokens)
        config = spec.to_config()
        config.update({"bos_token_id": src.token_id("tokenizer.ggml.bos_token_id", len(tokens)),
                       "eos_token_id": eos_ids})
        _write_json(tmp / "config.json", config)
        _write_json(tmp / "generation_config.json",
                    {"bos_token_id": config["bos_token_id"], "eos_token_id": eos_ids,
                     "pad_token_id": src.token_id("tokenizer.ggml.padding_token_id", len(tokens)),
                     **DEFAULT_SAMPLING})
        _write_json(tmp / "tokenizer.json", tok_json)
        _write_json(tmp / "tokenizer_config.json", tok_config)
        if template:
            (tmp / "chat_template.jinja").write_text(template, encoding="utf-8")
        _write_json(tmp / "amber_import.json", {
            "source": src_path.name, "source_bytes": src_path.stat().st_size, "weights": weights,
            "architecture": spec.architecture, "name": spec.name, "accuracy_level": accuracy_level,
            "kernels": "native" if native else "ort", "attention": attention,
            "swiglu": swiglu,
            "seconds": round(time.perf_counter() - started, 2),
            "sizes": size_report(src, writer.bytes_by_tag)})
        # Hashed now, while the data file is fresh in the page cache: the first load then reads a
        # cached fingerprint instead of every weight byte (its stamps survive the rename below).
        model_fingerprint(tmp, tmp / MODEL_FILE)
        unmark(tmp)
        _fsync_tree(tmp)
        if dest.exists():
            dest.rmdir()    # empty, checked above
        os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


def size_report(src: GGUFSource, written: dict[str, int]) -> dict[str, dict[str, int]]:
    """Bytes by GGUF tensor type: in the GGUF and in model.onnx.data ("other": norms, rotary tables)."""
    report: dict[str, dict[str, int]] = {}
    for t in src.tensors.values():
        kind = t.tensor_type.name if len(t.shape) == 2 else "other"
        report.setdefault(kind, {"gguf": 0, "onnx": 0})["gguf"] += int(t.n_bytes)
    for tag, n in written.items():
        for kind in tag.split("+"):        # fused mixes are rare: counted under their first type
            report.setdefault(kind, {"gguf": 0, "onnx": 0})["onnx"] += n
            break
    return report


def format_size_report(report: dict[str, dict[str, int]]) -> str:
    """The size report as a few lines of text (the CLI's --report)."""
    lines = [f"{'type':<8}{'GGUF MiB':>10}{'ONNX MiB':>10}{'ratio':>8}"]
    tg = to = 0
    for kind, r in sorted(report.items(), key=lambda kv: -kv[1]["gguf"]):
        tg, to = tg + r["gguf"], to + r["onnx"]
        ratio = f"{r['onnx'] / r['gguf']:.3f}" if r["gguf"] else "-"
        lines.append(f"{kind:<8}{r['gguf'] / 2**20:>10.1f}{r['onnx'] / 2**20:>10.1f}{ratio:>8}")
    lines.append(f"{'total':<8}{tg / 2**20:>10.1f}{to / 2**20:>10.1f}{to / max(tg, 1):>8.3f}")
    return "\n".join(lines)


def print_progress(done: int, total: int, what: str) -> None:
    """A progress callback for the CLI: one line on stderr, updated in place on a terminal."""
    if sys.stderr.isatty():
        end = "\n" if done == total else ""
        sys.stderr.write(f"\rconverting: {done}/{total} tensors{end}")
    elif done == total or done % max(1, total // 10) == 0:
        sys.stderr.write(f"converting: {done}/{total} tensors\n")
    sys.stderr.flush()
