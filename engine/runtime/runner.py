"""One forward step of the decoder over a `KVCache`: the only place that calls ONNX Runtime."""
from __future__ import annotations

import weakref
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Callable

import numpy as np
import onnxruntime as ort

from engine.runtime.batcher import DecodeBatcher
from engine.config import settings
from engine.runtime.kvcache import KVCache, bind_kv_shared
from engine.runtime.model import LoadedModel, ModelRunError, ort_failures
from engine.runtime.host.residency import PageDropper, drop_mapped_pages

# Long prompts run in chunks: bounded attention memory, cancellable between chunks. 512 prefills
# as fast as 1024 here (2048 tokens: 453-458 vs 446-451 tok/s) with ~90 MiB less peak memory.
PREFILL_CHUNK = 512
# ...and shorter ones as the context grows: ORT's CPU GroupQueryAttention holds float32
# scores for every head x chunk position x cache position (about twice over), 75 MiB for a 512-token
# chunk against 2048 positions on the default model, the largest transient of a long prefill.
# Chunks are cut so that those scores stay near this; shorter chunks measured no slower.
ATTENTION_SCRATCH_BYTES = 24 << 20
# ...and by the activations every chunk token holds while it runs: at the step's peak
# about 11 float32 vectors of the MLP's width per token (measured: 186 MiB that go again at the end
# of a 512-token chunk at the Qwen2.5-1.5B shape, 8960 wide; 36 MiB at 135M, 1536 wide),
# plus the logits of every position where a graph returns them all. 224 MiB keeps 512-token chunks
# up to a 9.3K-wide MLP (the default model, 0.5B, 1B and 1.5B shapes) and cuts wider ones (320 at
# 14336, the 8B class). It was 40 MiB, which cut 1B / 1.5B prompts to 64-token chunks: the native
# GgufMatMul then ran 64-row calls, and a 2048-token prefill took 1.14x (1B) / 1.17x (1.5B) the CPU
# time of 512-token chunks, with the same logits bits, and no lower peak RSS (the weights' mapped
# pages, not the activations, make the prefill's peak there; docs/benchmarks/prefill.md "Prefill at 1B/1.5B").
ACTIVATION_SCRATCH_BYTES = 224 << 20
ACTIVATION_VECTORS = 12
MIN_CHUNK = 64


_ORT_FAILURES = ort_failures()


class _DecodeInputs:
    """A cache's one-token step inputs, bound by address: the token and its
    position are written into the same int64 cells each step and stay bound while the binding is the
    same; the attention mask is a view of one buffer of ones, rebound each step at its new length."""

    def __init__(self) -> None:
        self.ids = np.zeros((1, 1), np.int64)
        self.positions = np.zeros((1, 1), np.int64)
        self.ones = np.ones((1, 0), np.int64)
        # the binding that holds `ids` / `positions` by address, weakly: a closed cache's binding (and
        # the KV buffers it binds) must go when the cache lets go of it
        self.bound_to: weakref.ref[Any] | None = None


class Runner:
    """Feeds new tokens through the model, extending the cache; returns last-position logits."""

    def __init__(self, model: LoadedModel) -> None:
        self.model = model
        self.session = model.session
        self._has_mask = "attention_mask" in model.input_names
        self._has_positions = "position_ids" in model.input_names
        # optimum's older merged decoder: an `If` picks the with-past branch once there is a past.
        self._has_cache_branch = "use_cache_branch" in model.input_names
        self._vocab, self._last_only = self._logits_layout()
        self._heads = int(model.config.get("num_attention_heads") or model.kv.kv_heads)
        self._weights_dir = model.graph.parent if model.graph is not None else model.path
        # The activation bound is for the host's memory: on a GPU the activations live on the device.
        self._token_bytes = self._activation_bytes_per_token() if model.provider == "CPUExecutionProvider" else 0
        # Where new caches keep their KV between steps: on the GPU under CUDA (shared-buffer graphs);
        # tests and gpu_check set kvcache.STAGED to run the device code paths on a CPU.
        self.kv_device = "cuda" if model.provider == "CUDAExecutionProvider" else "cpu"
        # Concurrent sessions' decode steps run as one batched call (engine.runtime.batcher) on
        # Amber's own graphs on CPU; `batch_decode = False` (or AMBER_BATCH_DECODE=0) takes turns.
        self.batcher = (DecodeBatcher(model, self._vocab, self._has_positions, self._step_shared)
                        if self._vocab is not None and self._can_batch() else None)
        self.batch_decode = settings().batch_decode

    def _can_batch(self) -> bool:
        return (self.model.kv.shared_buffer and self.model.provider == "CPUExecutionProvider"
                and self._vocab is not None and self._last_only and self._has_mask
                and not self._has_cache_branch)

    def decoding(self, cache: KVCache) -> AbstractContextManager[None]:
        """Around a decode loop over `cache`: its one-token steps may then be batched with other
        sessions' (engine.runtime.batcher)."""
        if self.batcher is None or not self.batch_decode or cache.on_device:
            return nullcontext()
        return self.batcher.decoding(cache)

    def _activation_bytes_per_token(self) -> int:
        """Bytes of activations one prefill token holds at the step's peak (ACTIVATION_VECTORS
        float32 vectors of the widest layer), plus its logits when every position returns them."""
        def size(key: str) -> int:
            value = self.model.config.get(key)
            return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
        hidden = size("hidden_size")
        # A config without intermediate_size: the usual 4x MLP of GPT-2-style models.
        width = max(size("intermediate_size") or 4 * hidden, hidden, 1)
        per_token = ACTIVATION_VECTORS * 4 * width
        if not self._last_only:
            per_token += 4 * (self._vocab or size("vocab_size"))
        return per_token

    def chunk_len(self, cache: KVCache, n: int) -> int:
        """How many of `n` new tokens one prefill step takes after what `cache` holds: PREFILL_CHUNK,
        or fewer so that the step's attention scores stay within ATTENTION_SCRATCH_BYTES and its
        activations within ACTIVATION_SCRATCH_BYTES (never below MIN_CHUNK)."""
        positions = max(cache.capacity, len(cache) + n)
        scores = ATTENTION_SCRATCH_BYTES // (2 * 4 * self._heads * max(positions, 1))
        if getattr(self.model, "amber_attention", False):   # online softmax over key blocks: no score matrix to bound
            scores = PREFILL_CHUNK
        activations = ACTIVATION_SCRATCH_BYTES // max(self._token_bytes, 1)
        fit = min(scores, activations) // MIN_CHUNK * MIN_CHUNK
        return max(1, min(PREFILL_CHUNK, max(MIN_CHUNK, fit)))

    def _logits_layout(self) -> tuple[int | None, bool]:
        """(vocab, last_only): the vocabulary size when the graph returns float32 logits of a known
        width, and whether they cover the last position only (Amber's converted graphs) or every
        position of the step (optimum, onnxruntime-genai's builder). (None, False) otherwise."""
        for out in self.session.get_outputs():
            if out.name == self.model.logits_name:
                shape = list(out.shape)
                if out.type == "tensor(float)" and len(shape) == 3 and isinstance(shape[2], int):
                    return shape[2], shape[1] == 1
        return None, False

    def _bind_logits(self, cache: KVCache, binding: object, n: int) -> None:
        """Binds where this step writes its logits: a buffer of the cache's own (not the runner's:
        sessions may generate at once) of this step's shape, kept bound while the shape stays (every
        decode step); ORT's own allocation when the width is unknown. An output bound once keeps
        its first shape in ORT, so a graph with logits for every position is rebound when the
        step's length changes (prefill -> decode)."""
        if self._vocab is None:
            binding.bind_output(self.model.logits_name, "cpu")     # type: ignore[attr-defined]
            return
        shape = (1, 1 if self._last_only else n, self._vocab)
        if cache.logits_out is None or cache.logits_out.shape != shape:
            cache.logits_out = np.empty(shape, np.float32)
            binding.bind_ortvalue_output(self.model.logits_name,     # type: ignore[attr-defined]
                                         ort.OrtValue.ortvalue_from_numpy(cache.logits_out))

    def new_cache(self) -> KVCache:
        return KVCache(self.model.kv, device=self.kv_device)

    def _inputs(self, cache: KVCache, ids: list[int]) -> dict[str, np.ndarray]:
        past, n = len(cache), len(ids)
        feed = {"input_ids": np.asarray([ids], dtype=np.int64)}
        if self._has_mask:
            feed["attention_mask"] = np.ones((1, past + n), dtype=np.int64)
        if self._has_positions:
            feed["position_ids"] = np.arange(past, past + n, dtype=np.int64)[None, :]
        if self._has_cache_branch:
            feed["use_cache_branch"] = np.asarray([past > 0], dtype=np.bool_)
        return feed

    def _step_shared(self, cache: KVCache, ids: list[int]) -> np.ndarray:
        cache.reserve(len(cache) + len(ids))
        bound = cache.ort_values()      # uploads what changed on the host into the same buffers
        binding = cache.binding
        if binding is None:
            # The KV buffers are bound once, as past and present, and stay bound until they are
            # reallocated; each step only rebinds the small inputs.
            binding = self.session.io_binding()
            # Logits first: outputs come back in binding order. Reading outputs back wraps every
            # bound one (logits + 2 per layer): ~0.25 ms a step, so a buffer is read directly.
            cache.logits_out = None
            self._bind_logits(cache, binding, len(ids))
            bind_kv_shared(binding, self.model.kv, bound)     # present written into the same buffer
            cache.binding = binding
        else:
            self._bind_logits(cache, binding, len(ids))     # rebinding keeps the output's place
        if len(ids) == 1 and not self._has_cache_branch:
            self._bind_decode_inputs(cache, binding, ids[0])
        else:
            if cache.step_inputs is not None:
                cache.step_inputs.bound_to = None     # the inputs below replace the bound cells
            for name, value in self._inputs(cache, ids).items():
                binding.bind_cpu_input(name, value)
        cache.before_step()     # waits only when a pending snapshot needs what this step overwrites
        try:
            self.session.run_with_iobinding(binding)
        except _ORT_FAILURES as exc:
            raise ModelRunError(self.model.graph, exc) from None
        cache.device_written()
        if self._vocab is not None:
            last = cache.logits_out[0, -1].copy()    # type: ignore[index]   # the next step overwrites it
        else:
            last = binding.get_outputs()[0].numpy()[0, -1]
        cache.tokens.extend(ids)
        out: np.ndarray = last
        return out

    def _bind_decode_inputs(self, cache: KVCache, binding: Any, token: int) -> None:
        """A one-token step's inputs, without new arrays: ~80 µs of Python a step at 135M went into
        building three small arrays and binding copies of them (docs/benchmarks/decode.md)."""
        st = cache.step_inputs
        if st is None:
            st = cache.step_inputs = _DecodeInputs()
        past = len(cache)
        st.ids[0, 0] = token
        st.positions[0, 0] = past
        if st.bound_to is None or st.bound_to() is not binding:
            binding.bind_input("input_ids", "cpu", 0, np.int64, (1, 1), st.ids.ctypes.data)
            if self._has_positions:
                binding.bind_input("position_ids", "cpu", 0, np.int64, (1, 1), st.positions.ctypes.data)
            st.bound_to = weakref.ref(binding)
        if self._has_mask:
            if st.ones.shape[1] < past + 1:
                st.ones = np.ones((1, max(past + 1, cache.capacity, 2 * st.ones.shape[1])), np.int64)
            binding.bind_input("attention_mask", "cpu", 0, np.int64, (1, past + 1), st.ones.ctypes.data)

    def _step_plain(self, cache: KVCache, ids: list[int]) -> np.ndarray:
        feed = self._inputs(cache, ids)
        for (pk, pv), k, v in zip(self.model.kv.past_names, cache.keys, cache.values, strict=True):
            feed[pk], feed[pv] = np.ascontiguousarray(k), np.ascontiguousarray(v)
        names = [self.model.logits_name] + [n for pair in self.model.kv.present_names for n in pair]
        try:
            out = self.session.run(names, feed)
        except _ORT_FAILURES as exc:
            raise ModelRunError(self.model.graph, exc) from None
        cache.set_presents(out[1::2], out[2::2])
        cache.tokens.extend(ids)
        last: np.ndarray = out[0][0, -1]
        return last

    def forward_rows(self, caches: list[KVCache], tokens: list[int]) -> list[np.ndarray]:
        """One decode step of each cache (`tokens[i]` after what `caches[i]` holds): as one batched
        run where their decode loops may be batched (engine.runtime.batcher), otherwise in turn."""
        if (len(caches) > 1 and self.batcher is not None
                and all(self.batcher.is_decoding(c) for c in caches)):
            return self.batcher.step_rows(caches, [int(t) for t in tokens])
        out = []
        for cache, token in zip(caches, tokens, strict=True):
            logits = self.forward(cache, [int(token)])
            assert logits is not None     # without between_chunks it never stops early
            out.append(logits)
        return out

    def forward(self, cache: KVCache, ids: list[int],
                between_chunks: Callable[[int], bool] | None = None) -> np.ndarray | None:
        """Runs `ids` after what the cache holds. `between_chunks(done)` returning True stops early
        (cancellation); then None is returned and the cache holds the chunks that completed."""
        if len(ids) == 1 and self.batcher is not None and self.batcher.is_decoding(cache):
            return self.batcher.step(cache, int(ids[0]))
        step = self._step_shared if self.model.kv.shared_buffer else self._step_plain
        # The whole prompt's room at once: growing chunk by chunk doubles the buffer
        # while the old one is still held (a 2048-token prompt peaked at 1.5x its KV).
        cache.reserve(len(cache) + len(ids))
        if len(ids) == 1:       # a decode step: one run, no mapped pages to drop
            return step(cache, ids)
        chunk = self.chunk_len(cache, len(ids))
        logits = None
        for start in range(0, len(ids), chunk):
            if start and between_chunks is not None and between_chunks(start):
                return None
            # A prompt: the embedding rows a chunk reads (with the kernel's fault-around, ~0.5 MiB a
            # token at the 1.5B shape) are needed only by its first node; they are dropped while the
            # rest of the chunk runs and again after it.
            with PageDropper(self._weights_dir):
                logits = step(cache, ids[start:start + chunk])
            drop_mapped_pages(self._weights_dir)
        return logits
