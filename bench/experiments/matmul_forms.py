"""`python -m bench.experiments.matmul_forms ...`: the by-hand experiments behind docs/benchmarks/decode.md "Decode and
prefill profile". Not part of `make bench`; they write model folders where they are told.

* `matmul K N M[,M..]`: one `MatMulNBits` (4/8-bit, accuracy level 0/4, integer or float zero points),
  fp32 `MatMul` and `DynamicQuantizeMatMul` on the same shape, single thread, CPU time (robust on a
  shared machine), interleaved; GFLOP/s per CPU-second. `BLK=128` changes the block size.
* `int8 SRC DST [--rowwise]`: a copy of a converted folder whose every `MatMulNBits` is replaced by
  MLAS's int8 QGEMM on per-column int8 weights: `DynamicQuantizeMatMul` (activations per tensor) or,
  with --rowwise, `MatMulInteger` with per-row activation scales. Lossy: an experiment only.
* `nocorr SRC DST`: a copy whose zero-point correction branches are removed (wrong numerics: the
  ceiling of what removing them could give).
* `decode DIR,DIR.. [CTX BLOCKS STEPS]`: CPU time (and wall) per decode step of model folders loaded
  side by side, blocks interleaved, through engine.runtime.Runner; paired ratios against the first.
* `prefill DIR,DIR.. [N ROUNDS [CHUNK,CHUNK..]]`: CPU time of an N-token prefill, interleaved (per
  model, or per PREFILL_CHUNK for the first model with a chunk list).
* `kl REF,DIR.. [PREFIX TOKENS]`: teacher-forced over docs/DESIGN.md after a PREFIX-token prefill:
  mean KL, top-1 agreement and NLL of each model against the first.
"""
from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

MS = "com.microsoft"


def _model(nodes: list[Any], k: int, n: int, inits: list[Any], opsets: int = 2) -> bytes:
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("A", TensorProto.FLOAT, ["M", k])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["M", n])], inits)
    ops = [helper.make_opsetid("", 21), helper.make_opsetid(MS, 1)][:opsets]
    return helper.make_model(g, opset_imports=ops, ir_version=10).SerializeToString()


def nbits_model(k: int, n: int, bits: int, level: int, blk: int, zero_points: str = "none") -> bytes:
    rng = np.random.default_rng(0)
    nb = k // blk
    inits = [numpy_helper.from_array(rng.integers(0, 256, (n, nb, blk * bits // 8), dtype=np.uint8), "B"),
             numpy_helper.from_array(rng.random(n * nb, dtype=np.float32) * 0.01 + 0.001, "S")]
    ins = ["A", "B", "S"]
    if zero_points == "int":
        inits.append(numpy_helper.from_array(rng.integers(0, 256, (n * -(-nb * bits // 8),), dtype=np.uint8), "Z"))
        ins.append("Z")
    elif zero_points == "float":
        inits.append(numpy_helper.from_array(rng.random(n * nb, dtype=np.float32) * 15, "Z"))
        ins.append("Z")
    node = helper.make_node("MatMulNBits", ins, ["Y"], domain=MS, K=k, N=n, bits=bits, block_size=blk,
                            accuracy_level=level)
    return _model([node], k, n, inits)


def dense_model(k: int, n: int) -> bytes:
    w = np.random.default_rng(0).standard_normal((k, n)).astype(np.float32)
    return _model([helper.make_node("MatMul", ["A", "W"], ["Y"])], k, n, [numpy_helper.from_array(w, "W")], 1)


def qgemm_model(k: int, n: int) -> bytes:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.integers(-127, 128, (k, n), dtype=np.int8), "B"),
             numpy_helper.from_array(rng.random(n, dtype=np.float32) * 0.01 + 0.001, "S")]
    return _model([helper.make_node("DynamicQuantizeMatMul", ["A", "B", "S"], ["Y"], domain=MS)], k, n, inits)


def matmul_forms(k: int, n: int, ms: list[int], blk: int = 32, rounds: int = 7) -> None:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    forms = [("fp32 MatMul", dense_model(k, n))]
    forms += [(f"{b}-bit L{lv}", nbits_model(k, n, b, lv, blk)) for b in (4, 8) for lv in (0, 4)]
    forms += [("4-bit L4 int zp", nbits_model(k, n, 4, 4, blk, "int")),
              ("4-bit L4 float zp", nbits_model(k, n, 4, 4, blk, "float")),
              ("DynamicQuantizeMatMul", qgemm_model(k, n))]
    sessions = [(name, ort.InferenceSession(m, so, providers=["CPUExecutionProvider"])) for name, m in forms]
    print(f"ORT {ort.__version__}  K={k} N={n} block {blk}  load {os.getloadavg()[0]:.1f}")
    for m in ms:
        a = np.random.default_rng(1).standard_normal((m, k)).astype(np.float32)
        best = {name: float("inf") for name, _ in sessions}
        reps = max(1, 64 // m) * 4
        for _ in range(rounds):
            for name, s in sessions:
                start = time.process_time()
                for _ in range(reps):
                    s.run(None, {"A": a})
                best[name] = min(best[name], (time.process_time() - start) / reps)
        for name, t in best.items():
            print(f"M={m:5d} {name:22s} {t * 1e3:9.3f} ms  {2 * m * k * n / t / 1e9:7.1f} GFLOP/s per CPU-second")


def _copy_folder(src: Path, dst: Path, skip: tuple[str, ...]) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file() and f.name not in skip:
            shutil.copy(f, dst / f.name)


def _folded(src: Path, tmp: Path) -> onnx.ModelProto:
    """The graph with ONNX Runtime's basic optimizations (constant folding) applied: every
    MatMulNBits input is then an initializer."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.optimized_model_filepath = str(tmp)
    so.add_session_config_entry("session.optimized_model_external_initializers_file_name", tmp.name + ".data")
    so.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")
    ort.InferenceSession(str(src / "model.onnx"), so, providers=["CPUExecutionProvider"])
    model = onnx.load(str(tmp))
    tmp.unlink()
    (tmp.parent / (tmp.name + ".data")).unlink()
    return model


def _dequantized(node: Any, arr: Any) -> np.ndarray:
    """float32 [N, K] of a MatMulNBits node's weight."""
    a = {x.name: helper.get_attribute_value(x) for x in node.attribute}
    k, n, bits, blk = a["K"], a["N"], a["bits"], a["block_size"]
    nb = -(-k // blk)
    b = arr(node.input[1]).reshape(n, nb, -1)
    q = (np.stack([b & 15, b >> 4], axis=-1) if bits == 4 else b).reshape(n, nb, blk).astype(np.float32)
    s = arr(node.input[2]).reshape(n, nb, 1).astype(np.float32)
    z: Any = np.float32(1 << (bits - 1))
    if len(node.input) > 3 and node.input[3]:
        zp = arr(node.input[3]).reshape(n, -1)
        if bits == 4:
            zp = np.stack([zp & 15, zp >> 4], axis=-1).reshape(n, -1)[:, :nb]
        z = zp.reshape(n, nb, 1).astype(np.float32)
    out: np.ndarray = (s * (q - z)).reshape(n, k)
    return out


def int8_variant(src: Path, dst: Path, rowwise: bool) -> int:
    _copy_folder(src, dst, ("model.onnx", "model.onnx.data"))
    model = _folded(src, dst / "folded.onnx")
    inits = {t.name: t for t in model.graph.initializer}

    def arr(name: str) -> np.ndarray:
        return numpy_helper.to_array(inits[name])
    nodes: list[Any] = []
    new_inits: list[Any] = []

    def node(op: str, ins: list[str], out: str, **kw: Any) -> str:
        nodes.append(helper.make_node(op, ins, [out], name=out, **kw))
        return out

    def const(name: str, value: Any, dtype: Any) -> str:
        new_inits.append(numpy_helper.from_array(np.array(value, dtype), name))
        return name
    replaced = 0
    for nd in model.graph.node:
        if nd.op_type != "MatMulNBits":
            nodes.append(nd)
            continue
        w = _dequantized(nd, arr)
        sc = (np.abs(w).max(axis=1) / 127).astype(np.float32)
        sc[sc == 0] = 1
        wq = np.clip(np.rint(w / sc[:, None]), -127, 127).astype(np.int8).T.copy()     # [K, N]
        bn, sn = const(nd.input[1] + "_s8", wq, np.int8), const(nd.input[1] + "_s8scale", sc, np.float32)
        x, p = nd.input[0], nd.name + "_rw"
        if rowwise:
            # u8 activations with zero point 128, one scale per row (token): MatMulInteger's QGEMM.
            sa = node("Max", [node("Mul", [node("ReduceMax", [node("Abs", [x], p + "_abs"),
                                                               const(p + "_ax", [-1], np.int64)], p + "_max",
                                                              keepdims=1),
                                           const(p + "_inv127", 1 / 127, np.float32)], p + "_sa0"),
                              const(p + "_eps", 1e-12, np.float32)], p + "_sa")
            xq = node("Add", [node("Round", [node("Div", [x, sa], p + "_xs")], p + "_xr"),
                              const(p + "_128", 128, np.float32)], p + "_xo")
            xq = node("Clip", [xq, const(p + "_0", 0, np.float32), const(p + "_255", 255, np.float32)], p + "_xc")
            xq = node("Cast", [xq], p + "_xq", to=TensorProto.UINT8)
            acc = node("Cast", [node("MatMulInteger", [xq, bn, const(p + "_zp", 128, np.uint8)], p + "_acc")],
                       p + "_accf", to=TensorProto.FLOAT)
            nodes.append(helper.make_node("Mul", [node("Mul", [acc, sa], p + "_y1"), sn], list(nd.output),
                                          name=p + "_out"))
        else:
            nodes.append(helper.make_node("DynamicQuantizeMatMul", [x, bn, sn], list(nd.output),
                                          name=nd.name + "_dq", domain=MS))
        replaced += 1
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    used = {i for nd in model.graph.node for i in nd.input}
    kept = [t for t in model.graph.initializer if t.name in used]
    del model.graph.initializer[:]
    model.graph.initializer.extend(kept + new_inits)
    onnx.save(model, str(dst / "model.onnx"), save_as_external_data=True, location="model.onnx.data",
              size_threshold=1024)
    return replaced


def strip_corrections(src: Path, dst: Path) -> int:
    _copy_folder(src, dst, ("model.onnx",))
    model = onnx.load(str(src / "model.onnx"), load_external_data=False)
    producer = {o: nd for nd in model.graph.node for o in nd.output}
    rename: dict[str, str] = {}
    for nd in model.graph.node:
        if nd.op_type == "Add" and len(nd.input) == 2:
            mm = producer.get(nd.input[1])
            sums = producer.get(mm.input[0]) if mm is not None and mm.op_type == "MatMul" else None
            if sums is not None and sums.op_type == "ReduceSum":
                rename[nd.output[0]] = nd.input[0]
    kept = [nd for nd in model.graph.node if nd.output[0] not in rename]
    for nd in kept:
        for i, name in enumerate(nd.input):
            while name in rename:
                name = rename[name]
            nd.input[i] = name
    outputs = {o.name for o in model.graph.output}
    while True:     # drop what nothing uses any more
        used = {i for nd in kept for i in nd.input} | outputs
        alive = [nd for nd in kept if any(o in used for o in nd.output)]
        if len(alive) == len(kept):
            break
        kept = alive
    del model.graph.node[:]
    model.graph.node.extend(kept)
    used = {i for nd in kept for i in nd.input}
    inits = [t for t in model.graph.initializer if t.name in used]
    del model.graph.initializer[:]
    model.graph.initializer.extend(inits)
    onnx.save(model, str(dst / "model.onnx"))
    return len(rename)


def _no_spin(folder: str) -> Any:
    """A model whose session does not spin (CPU time then counts work), through Amber's loader."""
    import dataclasses

    from engine.runtime.model import load_model
    from engine.runtime.providers import session_options
    m = load_model(folder, provider="cpu", threads=2)
    so = session_options(2)
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return dataclasses.replace(m, session=ort.InferenceSession(str(m.graph), so, providers=["CPUExecutionProvider"]))


def decode_ab(dirs: list[str], ctx: int = 100, blocks: int = 16, steps: int = 12) -> None:
    from engine.runtime.runner import Runner
    models = [_no_spin(d) for d in dirs]
    runners = [Runner(m) for m in models]
    rng = np.random.default_rng(0)
    caches = []
    for m, r in zip(models, runners, strict=True):
        c = r.new_cache()
        c.reserve(ctx + steps + 8)
        r.forward(c, [int(t) for t in rng.integers(10, m.config["vocab_size"] - 10, ctx)])
        caches.append(c)
    wall: list[list[float]] = [[] for _ in dirs]
    cpu: list[list[float]] = [[] for _ in dirs]
    for _ in range(blocks):
        for i, (r, c) in enumerate(zip(runners, caches, strict=True)):
            c.truncate(ctx)
            t, p = time.perf_counter(), time.process_time()
            for _ in range(steps):
                r.forward(c, [int(rng.integers(10, 1000))])
            wall[i].append((time.perf_counter() - t) / steps * 1e3)
            cpu[i].append((time.process_time() - p) / steps * 1e3)
    print(f"decode at context {ctx}, {blocks} blocks of {steps} steps, load {os.getloadavg()[0]:.1f}")
    for d, w, c in zip(dirs, wall, cpu, strict=True):
        ratio = np.median(np.array(c) / np.array(cpu[0]))
        print(f"{d}: CPU {np.median(c):.3f} ms/step (min {min(c):.3f}), wall {np.median(w):.3f} ms/step; "
              f"paired CPU ratio {ratio:.3f}")


def prefill_ab(dirs: list[str], n: int = 2048, rounds: int = 2, chunks: list[int] | None = None) -> None:
    from engine.runtime import runner as runner_mod
    models = [_no_spin(d) for d in dirs]
    cases = [(d, m, None) for d, m in zip(dirs, models, strict=True)] if not chunks else \
        [(f"{dirs[0]} chunk {c}", models[0], c) for c in chunks]
    ids = [int(t) for t in np.random.default_rng(0).integers(10, models[0].config["vocab_size"] - 10, n)]
    cpu: dict[str, list[float]] = {label: [] for label, _, _ in cases}
    default_chunk = runner_mod.PREFILL_CHUNK
    try:
        for rnd in range(rounds + 1):
            for label, m, chunk in cases:
                runner_mod.PREFILL_CHUNK = chunk or default_chunk
                r = runner_mod.Runner(m)
                cache = r.new_cache()
                cache.reserve(n + 8)
                p = time.process_time()
                r.forward(cache, ids)
                if rnd:
                    cpu[label].append(time.process_time() - p)
    finally:
        runner_mod.PREFILL_CHUNK = default_chunk
    print(f"prefill of {n} tokens, load {os.getloadavg()[0]:.1f}")
    for label, v in cpu.items():
        print(f"{label}: CPU {min(v):.2f} s (min of {rounds})")


def kl_check(dirs: list[str], prefix: int = 1024, tokens: int = 64) -> None:
    from engine.runtime.model import load_model
    from engine.runtime.runner import Runner
    models = [load_model(d, provider="cpu", threads=2) for d in dirs]
    repo = Path(__file__).resolve().parents[2]
    text = (repo / "docs" / "DESIGN.md").read_text() + (repo / "README.md").read_text()
    ids = models[0].tokenizer.encode(text).ids[:prefix + tokens]
    outs = []
    for m in models:
        r = Runner(m)
        c = r.new_cache()
        c.reserve(len(ids) + 4)
        steps = [r.forward(c, ids[:prefix])] + [r.forward(c, [t]) for t in ids[prefix:prefix + tokens - 1]]
        outs.append(np.array(steps, np.float64))

    def log_softmax(x: np.ndarray) -> np.ndarray:
        x = x - x.max(-1, keepdims=True)
        out: np.ndarray = x - np.log(np.exp(x).sum(-1, keepdims=True))
        return out
    ref = log_softmax(outs[0])
    target = np.array(ids[prefix:prefix + tokens])
    for d, o in zip(dirs[1:], outs[1:], strict=True):
        q = log_softmax(o)
        kl = (np.exp(ref) * (ref - q)).sum(-1)
        top1 = float((o.argmax(-1) == outs[0].argmax(-1)).mean())
        nll, nll0 = -q[np.arange(tokens), target].mean(), -ref[np.arange(tokens), target].mean()
        print(f"{d}: mean KL {kl.mean():.4f} (max {kl.max():.3f}), top-1 agreement {100 * top1:.1f} %, "
              f"NLL {nll:.3f} vs {nll0:.3f}")


def main(argv: list[str]) -> int:
    if len(argv) >= 3 and argv[0] == "matmul":
        matmul_forms(int(argv[1]), int(argv[2]), [int(m) for m in argv[3].split(",")] if len(argv) > 3 else [1, 128],
                     blk=int(os.environ.get("BLK", "32")))
    elif len(argv) >= 3 and argv[0] == "int8":
        print("replaced", int8_variant(Path(argv[1]), Path(argv[2]), "--rowwise" in argv), "MatMulNBits")
    elif len(argv) >= 2 and argv[0] == "decode":
        decode_ab(argv[1].split(","), *[int(a) for a in argv[2:5]])
    elif len(argv) >= 2 and argv[0] == "prefill":
        nums = [int(a) for a in argv[2:4]]
        prefill_ab(argv[1].split(","), *nums, chunks=[int(c) for c in argv[4].split(",")] if len(argv) > 4 else None)
    elif len(argv) >= 2 and argv[0] == "kl":
        kl_check(argv[1].split(","), *[int(a) for a in argv[2:4]])
    elif len(argv) == 3 and argv[0] == "nocorr":
        print("removed", strip_corrections(Path(argv[1]), Path(argv[2])), "correction branches")
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
