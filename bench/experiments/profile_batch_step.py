"""`python -m bench.experiments.profile_batch_step MODEL_DIR [--ctx 100] [--steps 40] [--threads 2]`:
where a batch-4 decode step's time goes, against a batch-1 step.

By hand, not part of `make bench`. ONNX Runtime's own profiler over bare decode steps at batch 1
and batch 4 (each row at context `--ctx`, KV bound in place as engine.runtime.batcher binds it),
in alternating blocks of one profiled session: µs per op type per step for each batch, and the
step's wall time (the `model_run` span) beside the sum of its nodes (the rest: ORT's own
scheduling between nodes). The Python around a step (binding, logits copy, sampling, the
batcher's rendezvous) is what the engine's aggregate ms per token adds on top (bench.suites.choices).
"""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any


from bench.harness.common import decode_binding
from bench.experiments.profile_step import _op_table_runs, _profiled_model, _runs
from engine.runtime.model import load_model


def profile(model_dir: Path, ctx: int, steps: int, threads: int) -> dict[str, Any]:
    model = load_model(model_dir, "cpu", threads)
    with tempfile.TemporaryDirectory(prefix="amber-profile-batch-") as tmp:
        pm = _profiled_model(model, threads, None, str(Path(tmp) / "ort_profile"))
        keep: list[Any] = []
        binds = {1: decode_binding(pm, 1, ctx, keep), 4: decode_binding(pm, 4, ctx, keep)}
        order: list[int] = []
        for b in (1, 4):            # warm-up, not counted
            pm.session.run_with_iobinding(binds[b])
            order.append(0)
        block = 5
        for _ in range(max(1, steps // block)):
            for b in (1, 4):
                for _ in range(block):
                    pm.session.run_with_iobinding(binds[b])
                    order.append(b)
        events = json.loads(Path(pm.session.end_profiling()).read_text())
    runs = _runs(events)
    assert len(runs) == len(order), (len(runs), len(order))
    out: dict[str, Any] = {"ctx": ctx, "threads": threads, "model": model_dir.name}
    for b in (1, 4):
        table = _op_table_runs(events, [r for r, o in zip(runs, order, strict=True) if o == b])
        table["nodes_us"] = sum(op["us"] for op in table["ops"].values())
        out[f"batch_{b}"] = table
    return out


def report(res: dict[str, Any]) -> str:
    b1, b4 = res["batch_1"], res["batch_4"]
    lines = [f"{res['model']}, context {res['ctx']}, {res['threads']} threads: step {b1['run_us']:.0f} µs at "
             f"batch 1, {b4['run_us']:.0f} µs at batch 4 ({b4['run_us'] / b1['run_us']:.2f}×); "
             f"nodes {b1['nodes_us']:.0f} / {b4['nodes_us']:.0f} µs",
             "", "| Op type | batch 1: µs/step | batch 4: µs/step | 4 ÷ 1 | share of the batch-4 step |",
             "|---|---|---|---|---|"]
    for op in sorted(set(b1["ops"]) | set(b4["ops"]), key=lambda k: -b4["ops"].get(k, {"us": 0})["us"]):
        u1, u4 = b1["ops"].get(op, {"us": 0.0})["us"], b4["ops"].get(op, {"us": 0.0})["us"]
        lines.append(f"| {op} | {u1:.0f} | {u4:.0f} | {u4 / u1 if u1 else float('nan'):.2f}× | "
                     f"{100 * u4 / b4['run_us']:.0f}% |")
    gap1, gap4 = b1["run_us"] - b1["nodes_us"], b4["run_us"] - b4["nodes_us"]
    lines.append(f"| (between nodes) | {gap1:.0f} | {gap4:.0f} | {gap4 / gap1 if gap1 else float('nan'):.2f}× | "
                 f"{100 * gap4 / b4['run_us']:.0f}% |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.experiments.profile_batch_step")
    ap.add_argument("model_dir", type=Path)
    ap.add_argument("--ctx", type=int, default=100)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args(argv)
    res = profile(args.model_dir, args.ctx, args.steps, args.threads)
    print(report(res))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
