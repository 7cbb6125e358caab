"""The native kernels built for Windows x64 (MinGW-w64, `build.py --target windows-x86_64`), run
under wine on this CPU: tests/native_harness/harness.c, linked against the DLL, runs the kernels on
inputs made here, and every result must be the bits this machine's Linux library gives with the
same instruction set forced on both (the same C code for the same CPU; wine runs the x86 code
natively, so each SIMD path this CPU has is exercised).

Without MinGW-w64 or wine the tests skip, saying what is missing; with
AMBER_WINDOWS_TESTS=required (`make test`) they fail instead.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from engine.native import build as native_build
from tests.engine.native.q32_lib import Lib
from tests.native_harness import windows
from tests.native_harness.client import Batch, HarnessError
from tests.support.native_op import random_rows

REQUIRED = os.environ.get("AMBER_WINDOWS_TESTS", "") == "required"
X86_ISAS = ("scalar", "avx2", "avxvnni", "avx512vnni")
SILU_PATHS = ("generic", "fma3", "avx512f")
TYPES = {"Q4_0": 2, "Q4_1": 3, "Q5_0": 6, "Q5_1": 7, "Q8_0": 8, "Q4_K": 12, "Q5_K": 13, "Q6_K": 14}
NS = (1, 7, 33)
MS = (1, 3, 8, 13)
API = ("RegisterCustomOps", "amber_act_bytes", "amber_gemm_rows", "amber_isa", "amber_quantize_act",
       "amber_row_bytes", "amber_set_isa", "amber_set_silu_path", "amber_silu_mul", "amber_silu_path")


def unavailable(why: str) -> None:
    if REQUIRED:
        pytest.fail(f"AMBER_WINDOWS_TESTS=required: {why}")
    pytest.skip(why)


@pytest.fixture(scope="module")
def harness(tmp_path_factory) -> Path:
    missing = windows.missing_tools()
    if missing:
        unavailable(f"the Windows kernel tests need {', '.join(missing)} "
                    "(packaging/linux/install-sysdeps.sh windows installs them)")
    try:
        return windows.build_harness(tmp_path_factory.mktemp("windows"))
    except HarnessError as exc:
        pytest.fail(f"the Windows harness does not build: {exc}")


@pytest.fixture(scope="module")
def linux() -> Lib:
    path = native_build.build()
    if path is None:
        unavailable("no C compiler for this machine's library (the expected results)")
    lib = Lib(path)
    silu = lib.c.amber_silu_path()
    yield lib
    lib.set_isa(lib.best)
    lib.c.amber_set_silu_path(silu)


def _pe_machine(data: bytes) -> int:
    assert data[:2] == b"MZ"
    pe = int.from_bytes(data[0x3C:0x40], "little")
    assert data[pe:pe + 4] == b"PE\0\0"
    return int.from_bytes(data[pe + 4:pe + 6], "little")


def test_build_makes_a_windows_dll_that_exports_the_api_and_needs_only_system_dlls(harness):
    dll = windows.kernels_dll()
    assert dll.parent == native_build.BUILD_DIR / "windows-x86_64"
    assert dll.name == native_build.library_name(target="windows-x86_64") and dll.suffix == ".dll"
    assert _pe_machine(dll.read_bytes()) == 0x8664   # IMAGE_FILE_MACHINE_AMD64
    objdump = shutil.which("x86_64-w64-mingw32-objdump")
    if objdump is None:
        return
    info = subprocess.run([objdump, "-p", str(dll)], capture_output=True, text=True, check=True).stdout
    imports = {line.split(":", 1)[1].strip().lower() for line in info.splitlines() if "DLL Name:" in line}
    assert imports == {"kernel32.dll", "msvcrt.dll"}   # no libgcc / winpthread DLL to ship
    table = info[info.index("[Ordinal/Name Pointer] Table"):]
    exported = {line.split("]")[1].strip() for line in table.splitlines()[1:] if line.strip().startswith("[")}
    assert exported == set(API)
    # No aligned vector move to or from the stack: Windows aligns it to 16 bytes only, so one on a
    # ymm/zmm spill would fault on some calls (build.py's WINDOWS_FLAGS).
    code = subprocess.run([objdump, "-d", "--no-show-raw-insn", str(dll)], capture_output=True, text=True,
                          check=True).stdout
    aligned = re.compile(r"\tvmov(aps|apd|dqa|dqa32|dqa64)\s.*%[yz]mm.*\(%r[sb]p\)|"
                         r"\tvmov(aps|apd|dqa|dqa32|dqa64)\s.*\(%r[sb]p\).*%[yz]mm")
    assert not [line for line in code.splitlines() if aligned.search(line)]


def test_the_dll_picks_this_cpus_isa_and_allows_what_linux_allows(harness, linux):
    b = Batch()
    best, silu = b.isa(), b.silu_path()
    tries = {name: b.set_isa(name) for name in X86_ISAS}
    replies = windows.run_batch(b, harness)
    assert replies[best].text() == linux.best
    assert replies[silu].text() == linux.c.amber_silu_path().decode()
    for name, i in tries.items():
        assert replies[i].rc == linux.set_isa(name), name
    linux.set_isa(linux.best)


@pytest.mark.parametrize("name", list(TYPES))
def test_quantize_and_matmul_give_the_linux_librarys_bits_on_each_isa(harness, linux, name):
    qtype = TYPES[name]
    isas = linux.available_isas()
    rng = np.random.default_rng(qtype)
    ks = (256, 768) if qtype >= 12 else (32, 96, 32 * 131)
    b, cases = Batch(), []
    for isa in isas:
        b.set_isa(isa)
        linux.set_isa(isa)
        for k in ks:
            for n in NS:
                for m in MS:
                    w = random_rows(qtype, n, k, rng)
                    x = (rng.standard_normal((m, k)) * rng.uniform(0.1, 3.0, size=(m, 1))).astype(np.float32)
                    act = linux.quantize(qtype, x)
                    want = linux.matmul(qtype, act, w, k, n)
                    h = n // 2
                    calls = (b.quantize(qtype, x),
                             b.gemm(qtype, act, m, w, k, 0, n, np.zeros((m, n), np.float32), n),
                             b.gemm(qtype, act, m, w, k, h, n, np.full((m, n), -7.0, np.float32), n),
                             b.gemm(qtype, act[m - 1:], 1, w, k, 0, n, np.zeros(n, np.float32), 0))
                    cases.append((f"{isa} {name} k={k} n={n} m={m}", m, n, act, want, calls))
    linux.set_isa(linux.best)
    replies = windows.run_batch(b, harness)
    for where, m, n, act, want, (q_i, full_i, part_i, row_i) in cases:
        assert all(replies[i].rc == 0 for i in (q_i, full_i, part_i, row_i)), where
        np.testing.assert_array_equal(replies[q_i].array(0, np.uint8).reshape(m, -1), act, err_msg=where)
        y = replies[full_i].array(0, np.float32).reshape(m, n)
        np.testing.assert_array_equal(y, want, err_msg=where)
        part = replies[part_i].array(0, np.float32).reshape(m, n)
        np.testing.assert_array_equal(part[:, n // 2:], want[:, n // 2:], err_msg=where)
        assert (part[:, :n // 2] == -7.0).all(), where
        np.testing.assert_array_equal(replies[row_i].array(0, np.float32), want[m - 1], err_msg=where)
    print(f"windows {name}: {len(cases)} cases on {'/'.join(isas)}, bit-exact with the Linux library")


def test_silu_mul_gives_the_linux_librarys_bits_on_each_path(harness, linux):
    rng = np.random.default_rng(9)
    g = np.concatenate([rng.standard_normal(4000) * 6, np.linspace(-20, 20, 999),
                        [np.nan, np.inf, -np.inf, 0.0, -0.0, 18.0, -18.0]]).astype(np.float32)
    u = rng.standard_normal(g.size).astype(np.float32)
    b, runs = Batch(), []
    for path in SILU_PATHS:
        if linux.c.amber_set_silu_path(path.encode()) != 0:
            continue
        want = np.zeros_like(g)
        linux.c.amber_silu_mul(g.ctypes.data, u.ctypes.data, want.ctypes.data, g.size)
        runs.append((path, b.set_silu_path(path), b.silu_mul(g, u), want))
    assert runs, "no SiLU path at all"
    replies = windows.run_batch(b, harness)
    for path, set_i, got_i, want in runs:
        assert replies[set_i].rc == 0, path
        np.testing.assert_array_equal(replies[got_i].array(0, np.float32), want, err_msg=path)


# ---- the Windows onnxruntime.dll (the pinned release's win_amd64 wheel) with the kernels DLL ----

THREADS = 2


@pytest.fixture(scope="module")
def ort_session(harness, tmp_path_factory) -> Path:
    fetch = windows.ort_fetcher()
    if not fetch.installed():
        unavailable(f"no Windows onnxruntime.dll in {fetch.DEST.relative_to(windows.ROOT)} "
                    "(`make ort-windows` downloads it)")
    try:
        return windows.build_ort_session(tmp_path_factory.mktemp("ort-windows"), fetch.dll_path())
    except HarnessError as exc:
        pytest.fail(f"ort_session.exe does not build: {exc}")


def linux_session(model: Path):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = THREADS
    so.register_custom_ops_library(str(native_build.build()))
    return ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("name", [*TYPES, "Q4_0+SwiGLU"])
def test_the_op_in_windows_onnxruntime_gives_the_linux_bits(ort_session, linux, tmp_path, name):
    """One ai.amber GgufMatMul node (and one with the SwiGLU epilogue): registered through
    OrtApi::RegisterCustomOpsLibrary in the Windows onnxruntime.dll, the same bits as Linux ORT."""
    from tests.support.native_op import gguf_matmul_model

    qtype = TYPES[name.split("+")[0]]
    swiglu = name.endswith("SwiGLU")
    k, n = (512, 66) if qtype >= 12 else (96, 66)
    rng = np.random.default_rng(qtype + 100 * swiglu)
    w = random_rows(qtype, n, k, rng)
    model = tmp_path / "op.onnx"
    model.write_bytes(gguf_matmul_model(w, ggml_type=qtype, k=k, n=n, attrs={"epilogue": 1} if swiglu else None))
    x = rng.standard_normal((2, 37, k)).astype(np.float32)
    want = linux_session(model).run(["Y"], {"X": x})[0]
    got = windows.run_session(ort_session, model, {"X": x}, ["Y"], THREADS)["Y"]
    assert want.shape == (2, 37, n // 2 if swiglu else n)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("wtype", ["Q4_1", "Q4_K"])
def test_a_converted_model_gives_the_linux_logits_in_windows_onnxruntime(ort_session, linux, tmp_path, wtype):
    """A tiny GGUF converted with kernels="native" (GgufMatMul and Amber's Attention over a float16
    KV buffer, ORT's own norms and element-wise ops): a prompt and two decode steps give the same
    logits and KV buffers, bit for bit, in the Windows onnxruntime.dll as in Linux ORT."""
    import onnx

    from engine.convert import FAST, convert_gguf
    from tests.support.tiny_gguf import TinyConfig, variant, write_tiny_gguf

    cfg = variant(TinyConfig(), wtype=wtype, n_embd=256, n_head=4, head_dim=64, n_ff=512)
    write_tiny_gguf(tmp_path / "tiny.gguf", cfg)
    folder = convert_gguf(tmp_path / "tiny.gguf", tmp_path / "model", accuracy_level=FAST, kernels="native")
    model = folder / "model.onnx"
    ops = {f"{n.domain}:{n.op_type}" for n in onnx.load(str(model), load_external_data=False).graph.node}
    assert {"ai.amber:GgufMatMul", "ai.amber:Attention"} <= ops
    session = linux_session(model)
    names = [o.name for o in session.get_outputs()]
    capacity = 16
    feeds: dict[str, np.ndarray] = {
        i.name: np.zeros((1, i.shape[1], capacity, i.shape[3]), np.float16)
        for i in session.get_inputs() if i.name.startswith("past_key_values.")}
    tokens, total = [1, 5, 9, 33, 2, 7, 100], 0
    for step in range(3):
        feeds.update(input_ids=np.array([tokens], np.int64),
                     position_ids=np.arange(total, total + len(tokens), dtype=np.int64)[None],
                     attention_mask=np.ones((1, total + len(tokens)), np.int64))
        want = dict(zip(names, session.run(names, feeds), strict=True))
        got = windows.run_session(ort_session, model, feeds, names, THREADS)
        for name in names:
            np.testing.assert_array_equal(got[name], want[name], err_msg=f"step {step} {name}")
        total += len(tokens)
        tokens = [int(want["logits"][0, -1].argmax())]
        feeds.update({f"past_key_values.{name[len('present.'):]}": v for name, v in want.items()
                      if name.startswith("present.")})
