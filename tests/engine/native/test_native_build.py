"""python -m engine.native.build: a hashed library rebuilt only when the sources change, a note
and exit 0 without a compiler, the compiler's message and exit 2 on a compile error; the loader's
AMBER_KERNELS switch."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import engine.native as native
from engine.native import build

REPO = Path(__file__).resolve().parents[3]


def _cli(*args: str, env_extra: dict[str, str] | None = None, path: str | None = None):
    env = {**os.environ, "PYTHONPATH": str(REPO), **(env_extra or {})}
    if path is not None:
        env["PATH"] = path
    return subprocess.run([sys.executable, "-m", "engine.native.build", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600, check=False)


@pytest.fixture
def src_copy(tmp_path) -> Path:
    dst = tmp_path / "src"
    shutil.copytree(build.SRC_DIR, dst)
    return dst


def test_rebuilds_only_when_sources_change(native_lib, src_copy, tmp_path):
    out = tmp_path / "out"
    first = build.build(out, src_dir=src_copy)
    assert first is not None and first.is_file()
    assert first.name == build.library_name(src_copy) == build.library_name()   # same sources, same name
    stamp = first.stat().st_mtime_ns
    # Nothing changed: no compiler is even looked at (a missing one would fail).
    again = build.build(out, src_dir=src_copy, compiler="/nonexistent/cc")
    assert again == first and first.stat().st_mtime_ns == stamp
    proc = _cli("--out", str(out), "--src", str(src_copy))
    assert proc.returncode == 0 and "up to date" in proc.stdout
    # A changed source: a new name, and the stale library is gone.
    dispatch = src_copy / "generic" / "dispatch.c"
    dispatch.write_text(dispatch.read_text() + "\n/* changed */\n")
    second = build.build(out, src_dir=src_copy)
    assert second is not None and second != first and second.is_file()
    assert not first.exists()
    assert sorted(p.name for p in out.iterdir()) == [second.name]   # no temp files left


def test_no_compiler_is_a_note_and_exit_0(tmp_path):
    bare = tmp_path / "bin"   # a PATH with python's folder only: no cc, gcc or clang
    bare.mkdir()
    out = tmp_path / "out"
    proc = _cli("--out", str(out), env_extra={"CC": "/nonexistent/amber-cc"}, path=str(bare))
    assert proc.returncode == 0, proc.stderr
    assert "no C compiler" in proc.stdout
    assert not out.exists() or not any(out.iterdir())


def test_compile_error_prints_the_compiler_message_and_exits_2(native_lib, src_copy, tmp_path):
    (src_copy / "broken.c").write_text("int amber_broken(void) { return undeclared_name; }\n")
    proc = _cli("--out", str(tmp_path / "out"), "--src", str(src_copy))
    assert proc.returncode == 2
    assert "undeclared_name" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    with pytest.raises(build.BuildError, match="undeclared_name"):
        build.build(tmp_path / "out2", src_dir=src_copy)


def test_amber_kernels_switch(native_lib, monkeypatch):
    monkeypatch.setenv("AMBER_KERNELS", "ort")
    assert not native.available() and not native.supports(8)
    import onnxruntime as ort
    assert native.register(ort.SessionOptions()) is False
    monkeypatch.setenv("AMBER_KERNELS", "native")
    assert native.available() and native.supports(8)
    monkeypatch.setenv("AMBER_KERNELS", "auto")
    assert native.available()
    assert native.supports(8) == (native.isa() != "scalar")
    assert not native.supports(1) and not native.supports(99)   # F16, unknown: never the op
    assert native.isa() in {"avx512vnni", "avxvnni", "avx2", "scalar"}


def test_a_broken_library_is_reported_unavailable(tmp_path, monkeypatch, caplog):
    """A file with the right name that is not a library: logged, unavailable, no exception."""
    monkeypatch.delenv("AMBER_KERNELS", raising=False)
    fake_dir = tmp_path / "_build"
    fake_dir.mkdir()
    (fake_dir / build.library_name()).write_bytes(b"not an ELF file")
    monkeypatch.setattr(build, "BUILD_DIR", fake_dir)
    assert native.library_path() == fake_dir / build.library_name()
    assert native.kernels() is None and not native.available() and native.isa() == ""
    assert native.register(__import__("onnxruntime").SessionOptions()) is False
    assert "does not load" in caplog.text


def test_a_stale_library_is_never_used(tmp_path, monkeypatch):
    """Only the name of the current sources counts: a library of other sources is ignored."""
    fake_dir = tmp_path / "_build"
    fake_dir.mkdir()
    (fake_dir / f"{build.LIB_STEM}-0123456789abcdef{build.lib_suffix()}").write_bytes(b"old")
    monkeypatch.setattr(build, "BUILD_DIR", fake_dir)
    assert native.library_path() is None and not native.available()


def test_a_bundle_without_sources_uses_its_one_shipped_library(native_lib, tmp_path, monkeypatch):
    """The packaged app ships _build/ but no src/: the one library there is used, and it works."""
    monkeypatch.delenv("AMBER_KERNELS", raising=False)
    shipped = tmp_path / "_build"
    shipped.mkdir()
    lib = shutil.copy(native.library_path(), shipped / f"{build.LIB_STEM}-feedfacefeedface{build.lib_suffix()}")
    monkeypatch.setattr(build, "SRC_DIR", tmp_path / "no-src")
    monkeypatch.setattr(build, "BUILD_DIR", shipped)
    assert native.library_path() == Path(lib)
    assert native.available() and native.isa() in {"avx512vnni", "avxvnni", "avx2", "scalar"}
    import onnxruntime as ort
    assert native.register(ort.SessionOptions())
    # two libraries and no sources: which one is current is unknowable, so none is used
    shutil.copy(lib, shipped / f"{build.LIB_STEM}-0000000000000000{build.lib_suffix()}")
    assert native.library_path() is None


def test_the_one_loader_binds_what_the_engine_tests_and_benches_call(native_lib, tmp_path):
    lib = native.build_and_open(tmp_path / "out")
    assert lib is not None
    # Declared types: the 64-bit sizes and the status ints come back as Python ints, not truncated.
    assert lib.amber_row_bytes(2, 1 << 33) == (1 << 33) // 32 * 18   # > 2^32: needs int64 restype
    assert lib.amber_row_bytes(12, 256) == 144 and lib.amber_act_bytes(12, 256) == 292
    assert lib.amber_set_isa(b"no-such-isa") != 0 and lib.amber_isa().decode() in (
        "scalar", "avx2", "avxvnni", "avx512vnni")
    assert native.open_library(Path(lib._name))._name == lib._name
    bogus = tmp_path / "not-a-library.so"
    bogus.write_bytes(b"\x7fELF but not really")
    with pytest.raises(OSError):
        native.open_library(bogus)


def test_sources_are_laid_out_by_architecture_with_one_dispatch_table():
    """Every source sits in generic/, x86/, arm/ or ort/; only the dispatch table (generic/dispatch.c,
    with arm/cpu_arm.c's probe) asks the CPU what it has and which ISA is current, and each op picks
    its kernel through the table, never through a switch of its own."""
    src = build.SRC_DIR
    files = {p.relative_to(src).as_posix(): p.read_text() for p in build.sources()}
    assert {f.split("/")[0] for f in files} == {"generic", "x86", "arm", "ort"}
    assert all(f.count("/") == 1 for f in files), sorted(files)
    assert {"generic/dispatch.c", "generic/kernel_table.h", "ort/ort_abi.h", "ort/ort_op.c"} <= set(files)
    probes = {f for f, text in files.items() if "__builtin_cpu_supports" in text or "getauxval" in text}
    assert probes == {"generic/dispatch.c", "arm/cpu_arm.c"}
    isa_callers = {f for f, text in files.items() if f.endswith(".c") and "amber_current_isa(" in text}
    assert isa_callers == {"generic/dispatch.c"}
    intrinsics = {f for f, text in files.items() if "immintrin.h" in text or "arm_neon.h" in text}
    assert intrinsics and all(f.startswith(("x86/", "arm/")) for f in intrinsics), sorted(intrinsics)
    for family in ("generic/q32.c", "generic/qk.c", "generic/attn.c", "generic/swiglu.c"):
        text = files[family]
        assert "amber_kernels_now()" in text or "amber_silu_kernel()" in text, family
        assert "ISA_AVX2" not in text and "ISA_NEON" not in text, family
