"""Amber's graphs and ops on the Intel-Mac ONNX Runtime (pyproject.toml's macOS x86_64 pin) against
this interpreter's: packaging/check_ort_compat.py without the real default model, in the venv that
`make install-ort-compat` creates (build/ort-compat/venv-<version>; no network here). `make test`
sets AMBER_ORT_COMPAT=required, so there a missing venv fails instead of skipping."""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

import engine.native as native

REPO = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("check_ort_compat", REPO / "packaging" / "check_ort_compat.py")
oc = importlib.util.module_from_spec(_spec)
sys.modules["check_ort_compat"] = oc
_spec.loader.exec_module(oc)


@pytest.fixture(scope="module")
def older_release() -> tuple[Path, str]:
    """(the python of the venv under test, its onnxruntime version)."""
    pyproject = REPO / "pyproject.toml"
    version = oc.ort_under_test(pyproject)
    python = oc.ready_venv(oc.default_venv(version), version, pyproject)
    if python is None:
        why = f"no venv with onnxruntime {version} at {oc.default_venv(version)} (make install-ort-compat)"
        if os.environ.get("AMBER_ORT_COMPAT") == "required":
            pytest.fail(why)
        pytest.skip(why)
    if not native.available():
        pytest.fail("Amber's op library is not built (python -m engine.native.build)")
    return python, version


def test_amber_ops_give_the_same_bits_on_both_releases(older_release, tmp_path, capsys):
    python, version = older_release
    failed = oc.check_ops(python, tmp_path)
    out = capsys.readouterr().out
    assert failed == 0, out
    assert "the same bits on both releases" in out


def test_converted_models_agree_on_both_releases(older_release, tmp_path, capsys, monkeypatch):
    python, version = older_release
    # the native form whatever this machine would pick (a CUDA device makes auto convert ORT's form)
    monkeypatch.setenv("AMBER_KERNELS", "native")
    runs = oc.tiny_models(tmp_path / "models")
    names = [m.name for m, _ in runs]
    # the native form (int8 activations, Amber's ops) is held to its float32 twin; the rest to the bits
    assert {"tiny-llama-q4_1", "tiny-llama-q4_1-exact", "tiny-plain-attention"} <= set(names)
    assert "ai.amber:GgufMatMul" in oc.graph_ops(tmp_path / "models" / "tiny-llama-q4_1")
    failed = oc.check_models(python, runs, tmp_path, version)
    out = capsys.readouterr().out
    assert failed == 0, out
    assert out.count(f"onnxruntime {version} vs") == len(runs)
