"""Bad GgufMatMul nodes, run through a real InferenceSession: `python -m tests.support.native_hostile`.

Prints one JSON object {case: {"phase": "create"|"run"|"none", "error": class, "message": text}}.
The tests run it in a child process, so a crash shows as a signal instead of killing pytest.
"""
from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import onnxruntime as ort
from onnx import TensorProto

import engine.native as native
from tests.support.native_op import gguf_matmul_model, random_rows

Q8 = 8
K, N = 512, 96

# case -> (expected part of the message, model builder, X to feed)
Case = tuple[str, Callable[[np.ndarray], bytes], Callable[[np.random.Generator], Any]]


def _x(shape: tuple[int, ...], dtype: Any = np.float32) -> Callable[[np.random.Generator], Any]:
    return lambda rng: rng.standard_normal(shape).astype(dtype)


def _model(**kw: Any) -> Callable[[np.ndarray], bytes]:
    def make(rows: np.ndarray) -> bytes:
        w = kw.pop("w", None)
        args: dict[str, Any] = {"ggml_type": Q8, "k": K, "n": N, "x_rank": 2}
        args.update(kw)
        return gguf_matmul_model(rows if w is None else w(rows), **args)
    return make


CASES: dict[str, Case] = {
    "w_too_short": ("W holds 52223 bytes", _model(w=lambda r: r.reshape(-1)[:-1]), _x((3, K))),
    "w_too_long": ("W holds 52225 bytes", _model(w=lambda r: np.concatenate([r.reshape(-1), [7]]).astype(np.uint8)),
                   _x((3, K))),
    "w_one_row_short": ("need 52224", _model(w=lambda r: r[:-1]), _x((3, K))),
    "k_not_block_multiple": ("K = 100 is not a multiple", _model(k=100), _x((3, 100))),
    "k_zero": ("K = 0 is out of range", _model(k=0), _x((3, K))),
    "k_negative": ("K = -32 is out of range", _model(k=-32), _x((3, K))),
    "k_huge": ("is out of range", _model(k=1 << 50), _x((3, K))),
    "x_last_dim_not_k": ("X's last dimension is 256, K is 512", _model(), _x((3, 256))),
    "type_f16": ("ggml_type 1 is not supported", _model(ggml_type=1), _x((3, K))),
    "type_unknown": ("ggml_type 99 is not supported", _model(ggml_type=99), _x((3, K))),
    "type_negative": ("ggml_type -5 is not supported", _model(ggml_type=-5), _x((3, K))),
    "n_zero": ("N = 0 is out of range", _model(n=0), _x((3, K))),
    "n_negative": ("N = -4 is out of range", _model(n=-4), _x((3, K))),
    "n_huge_small_w": ("W holds 52224 bytes, but N = 549755813888 rows", _model(n=1 << 39), _x((3, K))),
    "n_overflow": ("N = 4611686018427387904 is out of range", _model(n=1 << 62), _x((3, K))),
    "x_float16": ("tensor(float16)", _model(x_type=TensorProto.FLOAT16), _x((3, K), np.float16)),
    "w_float32": ("input parameter (W)", _model(w=lambda r: r.astype(np.float32)), _x((3, K))),
    "attr_missing": ("attribute 'K' is missing", _model(attrs={"K": None}), _x((3, K))),
    # W fed at run time (not an initializer): the check happens at every run
    "w_input_too_short": ("W holds 49152 bytes", _model(w_input=True), _x((3, K))),
    "x_rank_0": ("X must have rank >= 1", _model(x_rank=0), lambda rng: np.array(1.0, dtype=np.float32)),
    # the SwiGLU epilogue (ort_op.c): only 0 and 1, and N must split into gate and up halves
    "epilogue_unknown": ("epilogue 7 is not supported", _model(attrs={"epilogue": 7}), _x((3, K))),
    "epilogue_negative": ("epilogue -1 is not supported", _model(attrs={"epilogue": -1}), _x((3, K))),
    "epilogue_huge": ("epilogue 4294967297 is not", _model(attrs={"epilogue": (1 << 32) + 1}), _x((3, K))),
    "epilogue_odd_n": ("needs an even N", _model(n=95, attrs={"epilogue": 1}, w=lambda r: r[:-1]), _x((3, K))),
}


def run_case(name: str, rng: np.random.Generator) -> dict[str, str]:
    _, make, feed = CASES[name]
    rows = random_rows(Q8, N, K, rng)
    so = ort.SessionOptions()
    so.log_severity_level = 4   # the errors are the point; keep stderr quiet
    if not native.register(so):
        raise SystemExit("the native library is not available")
    phase = "create"
    try:
        sess = ort.InferenceSession(make(rows), so, providers=["CPUExecutionProvider"])
        phase = "run"
        feeds = {"X": feed(rng)}
        if any(i.name == "W" for i in sess.get_inputs()):
            feeds["W"] = rows[:, :-32].copy()   # one Q8_0 block short a row
        sess.run(None, feeds)
    except Exception as exc:  # noqa: BLE001 - the class and message are what the tests check
        return {"phase": phase, "error": type(exc).__name__, "message": str(exc)}
    return {"phase": "none", "error": "", "message": ""}


def main(names: list[str]) -> int:
    rng = np.random.default_rng(18)
    out = {name: run_case(name, rng) for name in (names or list(CASES))}
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
