"""GgufMatMul's SwiGLU epilogue vs the split graph (GgufMatMul + Split + Sigmoid + Mul + Mul), one
layer's gate|up at real shapes, interleaved in one process: `python -m bench.experiments.swiglu_epilogue [threads]`.

Prints, per shape, each form's best time and the median of per-round split ÷ fused ratios, with the
load average (figures from a loaded machine swing; compare ratios, not absolute times). The
decode rows cycle 12 distinct weight sets so W comes from memory, as in a real step.
"""
from __future__ import annotations

import os
import statistics
import sys
import time

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import engine.native as native
from tests.support.native_op import IR_VERSION, random_rows

# label, ggml type, K, F, rows of X, runs per block, distinct weight sets
SHAPES = [("135M Q4_1 decode m=1", 3, 576, 1536, 1, 20, 12),
          ("0.5B Q4_0 decode m=1", 2, 896, 4864, 1, 10, 12),
          ("135M Q4_1 prefill m=512", 3, 576, 1536, 512, 3, 1),
          ("0.5B Q4_0 prefill m=512", 2, 896, 4864, 512, 2, 1)]


def _model(rows: np.ndarray, t: int, k: int, f: int, fused: bool) -> bytes:
    if fused:
        nodes = [helper.make_node("GgufMatMul", ["X", "W"], ["Y"], domain="ai.amber", ggml_type=t, K=k, N=2 * f,
                                  epilogue=1)]
        inits = [numpy_helper.from_array(rows, "W")]
    else:
        nodes = [helper.make_node("GgufMatMul", ["X", "W"], ["gu"], domain="ai.amber", ggml_type=t, K=k, N=2 * f),
                 helper.make_node("Split", ["gu", "s"], ["g", "u"], axis=-1),
                 helper.make_node("Sigmoid", ["g"], ["sg"]), helper.make_node("Mul", ["g", "sg"], ["si"]),
                 helper.make_node("Mul", ["si", "u"], ["Y"])]
        inits = [numpy_helper.from_array(rows, "W"), numpy_helper.from_array(np.array([f, f], np.int64), "s")]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["m", k])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, ir_version=IR_VERSION,
                              opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.amber", 1)])
    return bytes(model.SerializeToString())


def main(threads: int = 2, rounds: int = 20) -> None:
    rng = np.random.default_rng(0)
    for label, t, k, f, m, reps, sets in SHAPES:
        weights = [random_rows(t, 2 * f, k, rng) for _ in range(sets)]
        sess: dict[bool, list[ort.InferenceSession]] = {}
        for fused in (False, True):
            so = ort.SessionOptions()
            so.intra_op_num_threads = threads
            if not native.register(so):
                raise SystemExit("the native library is not built (python -m engine.native.build)")
            sess[fused] = [ort.InferenceSession(_model(w, t, k, f, fused), so, providers=["CPUExecutionProvider"])
                           for w in weights]
        x = rng.standard_normal((m, k)).astype(np.float32)
        best = {False: float("inf"), True: float("inf")}
        ratios = []
        for rnd in range(rounds):
            block: dict[bool, float] = {}
            for fused in ((False, True) if rnd % 2 == 0 else (True, False)):
                times = []
                for _ in range(reps):
                    t0 = time.perf_counter()
                    for s in sess[fused]:
                        s.run(None, {"X": x})
                    times.append((time.perf_counter() - t0) / sets)
                block[fused] = statistics.median(times)
                best[fused] = min(best[fused], min(times))
            ratios.append(block[False] / block[True])
        print(f"{label}: split best {best[False] * 1e6:.0f} us, fused best {best[True] * 1e6:.0f} us, "
              f"split/fused best {best[False] / best[True]:.3f}, median per-round {statistics.median(ratios):.3f} "
              f"(threads {threads}, load {os.getloadavg()[0]:.2f})")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
