"""Bad ai.amber.Attention nodes and inputs through a real InferenceSession:
`python -m tests.support.attn_hostile`. Prints one JSON object {case: {"phase", "error", "message"}};
the tests run it in a child process, so a crash shows as a signal instead of killing pytest."""
from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import onnxruntime as ort
from onnx import TensorProto

import engine.native as native
from tests.support.attn_graphs import Case, as_half, feeds, model

BASE = Case(s=2, totals=[6], cap=8)
Feeds = dict[str, np.ndarray]


def _edit(**changes: Any) -> Callable[[Feeds], Feeds]:
    def apply(f: Feeds) -> Feeds:
        out = dict(f)
        for k, v in changes.items():
            out[k] = v(out[k]) if callable(v) else v
        return out
    return apply


def _same(f: Feeds) -> Feeds:
    return f


# case -> (expected part of the message, model kwargs + case, feed edit)
CASES: dict[str, tuple[str, dict[str, Any], Callable[[Feeds], Feeds]]] = {
    "seqlens_beyond_capacity": ("does not fit", {}, _edit(seqlens_k=np.array([40], np.int32))),
    "seqlens_negative": ("does not fit", {}, _edit(seqlens_k=np.array([-7], np.int32))),
    "seqlens_int_min": ("does not fit", {}, _edit(seqlens_k=np.array([-2 ** 31], np.int32))),
    "seqlens_int_max": ("does not fit", {}, _edit(seqlens_k=np.array([2 ** 31 - 1], np.int32))),
    "total_huge": ("total_sequence_length = 2147483647 is out of range", {},
                   _edit(seqlens_k=np.array([2 ** 31 - 2], np.int32),
                         total_sequence_length=np.array([2 ** 31 - 1], np.int32))),
    # an empty past buffer, a present grown by total_sequence_length: the "past" must not be read
    "past_beyond_past_buffer": ("past_key holds 0", {"case": Case(s=2, totals=[10], cap=0)},
                                _edit(total_sequence_length=np.array([10], np.int32))),
    "seqlens_wrong_count": ("seqlens_k holds 2 values", {}, _edit(seqlens_k=np.array([5, 5], np.int32))),
    "total_negative": ("total_sequence_length = -3", {}, _edit(total_sequence_length=np.array([-3], np.int32))),
    "total_two_values": ("must hold one value", {}, _edit(total_sequence_length=np.array([6, 6], np.int32))),
    "position_beyond_cos": ("beyond cos_cache", {}, _edit(cos_cache=lambda c: c[:4], sin_cache=lambda c: c[:4])),
    "cos_sin_shapes_differ": ("cos_cache and sin_cache", {}, _edit(sin_cache=lambda c: c[:, :4])),
    "cos_too_wide": ("cos_cache and sin_cache", {},
                     _edit(cos_cache=lambda c: np.ones((20, 40), np.float32),
                           sin_cache=lambda c: np.ones((20, 40), np.float32))),
    "past_value_shape_differs": ("past_key and past_value", {}, _edit(past_value=lambda v: v[:, :, :4].copy())),
    "past_rank_3": ("past_key and past_value", {},
                    _edit(past_key=lambda v: v[0].copy(), past_value=lambda v: v[0].copy())),
    "past_heads_wrong": ("kv_num_heads is 2", {}, _edit(past_key=lambda v: np.concatenate([v, v], 1),
                                                      past_value=lambda v: np.concatenate([v, v], 1))),
    "query_width_wrong": ("query's last dimension", {}, _edit(query=lambda q: q[..., :-1].copy())),
    "query_batch_wrong": ("query must be", {}, _edit(query=lambda q: np.concatenate([q, q]))),
    "key_shape_wrong": ("key and value must be", {}, _edit(key=lambda k: k[:, :1].copy())),
    "head_dim_huge": ("out of range", {}, _edit(past_key=np.zeros((1, 2, 1, 2048), np.float16),
                                                past_value=np.zeros((1, 2, 1, 2048), np.float16))),
    "past_float32": ("expected: (tensor(float16))", {}, _edit(past_key=lambda v: v.astype(np.float32))),
    "query_float16": ("query", {"input_types": {"query": TensorProto.FLOAT16}},
                      _edit(query=lambda q: q.astype(np.float16))),
    "heads_not_multiple": ("num_heads = 3 and kv_num_heads = 2", {"attrs": {"num_heads": 3}}, _same),
    "heads_zero": ("num_heads = 0", {"attrs": {"num_heads": 0}}, _same),
    "kv_heads_negative": ("kv_num_heads = -2", {"attrs": {"kv_num_heads": -2}}, _same),
    "heads_missing": ("are required", {"attrs": {"num_heads": None}}, _same),
    "interleaved_rotary": ("rotary_interleaved = 1", {"attrs": {"rotary_interleaved": 1}}, _same),
    "do_rotary_2": ("do_rotary = 2", {"attrs": {"do_rotary": 2}}, _same),
    "window_negative": ("local_window_size = -5", {"attrs": {"local_window_size": -5}}, _same),
    "scale_negative": ("scale = -1", {"attrs": {"scale": -1.0}}, _same),
    "scale_nan": ("scale = nan", {"attrs": {"scale": float("nan")}}, _same),
    "softcap_inf": ("softcap = inf", {"attrs": {"softcap": float("inf")}}, _same),
    "rotary_without_cos": ("needs cos_cache", {"case": replace(BASE, rotary=False), "attrs": {"do_rotary": 1}},
                           _same),
}


def run_case(name: str, rng: np.random.Generator) -> dict[str, str]:
    _, kw, edit = CASES[name]
    c = kw.get("case", BASE)
    so = ort.SessionOptions()
    so.log_severity_level = 4
    if not native.register(so):
        raise SystemExit("the native library is not available")
    phase = "create"
    try:
        data = model(c, True, attrs=kw.get("attrs"), input_types=kw.get("input_types"))
        sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
        phase = "run"
        sess.run(None, edit(as_half(feeds(c, rng))))
    except Exception as exc:  # noqa: BLE001 - the class and message are what the tests check
        return {"phase": phase, "error": type(exc).__name__, "message": str(exc)}
    return {"phase": "none", "error": "", "message": ""}


def main(names: list[str]) -> int:
    rng = np.random.default_rng(18)
    json.dump({name: run_case(name, rng) for name in (names or list(CASES))}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
