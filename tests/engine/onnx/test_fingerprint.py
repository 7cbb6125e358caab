"""A model folder's fingerprint: written by the converter (so a first load reads no weight byte to
hash), checked against the files' stamps, and kept in Amber's data folder when the folder itself
cannot take the cache."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from engine.onnx import fingerprint
from engine.onnx.fingerprint import CACHE_FILE, cached_fingerprint, model_fingerprint


@pytest.fixture
def folder(tiny_dir: Path, tmp_path: Path) -> Path:
    """A private copy of the converted tiny model, its cache included (copy2 keeps the mtimes)."""
    return Path(shutil.copytree(tiny_dir, tmp_path / "model", ignore=shutil.ignore_patterns("gpu")))


def test_a_conversion_leaves_a_valid_cached_fingerprint(tiny_dir: Path, tmp_path: Path) -> None:
    graph = tiny_dir / "model.onnx"
    cached = cached_fingerprint(tiny_dir, graph)
    assert cached is not None, "convert_gguf should cache the fingerprint before renaming the folder"
    # The same value the files hash to now (no stale cache): hashed again from a copy without it.
    copy = Path(shutil.copytree(tiny_dir, tmp_path / "fresh", ignore=shutil.ignore_patterns("gpu", CACHE_FILE)))
    assert cached_fingerprint(copy, copy / "model.onnx") is None
    assert model_fingerprint(copy, copy / "model.onnx") == cached
    assert json.loads((copy / CACHE_FILE).read_text())["fingerprint"] == cached


def test_changed_weights_change_the_fingerprint(folder: Path) -> None:
    graph = folder / "model.onnx"
    before = model_fingerprint(folder, graph)
    data = folder / "model.onnx.data"
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0xFF          # same size: only the content (and the mtime) differ
    data.write_bytes(bytes(raw))
    st = data.stat()
    os.utime(data, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert cached_fingerprint(folder, graph) is None
    after = model_fingerprint(folder, graph)
    assert after != before and cached_fingerprint(folder, graph) == after


def test_a_folder_that_cannot_take_the_cache_uses_the_data_folder(folder: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("AMBER_HOME", str(home))
    graph = folder / "model.onnx"
    (folder / CACHE_FILE).unlink()
    (folder / CACHE_FILE).mkdir()       # the cache's name is taken: writing beside the model fails
    fp = model_fingerprint(folder, graph)
    spare = list((home / fingerprint.SPARE_DIR).iterdir())
    assert len(spare) == 1 and json.loads(spare[0].read_text())["fingerprint"] == fp
    # Found again without hashing the weights again.
    monkeypatch.setattr(fingerprint, "_hash", lambda *_: pytest.fail("hashed again"))
    assert model_fingerprint(folder, graph) == fp
