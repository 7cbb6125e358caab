"""Fuzzing the model library's readers of what the Hub (or a damaged disk) says: the model-info
JSON (huggingface_hub's `ModelInfo` parser, then engine.hub's grouping), file names, and the
partial-download sidecar.

Property: a `RepoFiles` whose every file name is a safe relative path with a non-negative size,
or one `HubError` line; the sidecar check answers True/False; nothing else, bounded.
"""
from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from tests.support.bounded import run_bounded
from engine.hub import HubError, HubFile, quant_of
from engine.hub.download import is_complete
from engine.hub.search import listing_from_json, safe_path

NAMES = st.one_of(st.text(max_size=60), st.sampled_from(
    ["model-Q4_K_M.gguf", "../x.gguf", "/abs.gguf", "a/../b.gguf", "onnx/model.onnx", "onnx/model.onnx_data",
     "config.json", "x-00001-of-00002.gguf", "mmproj-f16.gguf", "C:/w.gguf", "a\\b.gguf", "q8_0.GGUF"]))
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
                    st.text(max_size=20))
SIBLING = st.one_of(
    st.fixed_dictionaries({"rfilename": NAMES},
                          optional={"size": SCALARS, "blobId": SCALARS,
                                    "lfs": st.one_of(SCALARS, st.fixed_dictionaries(
                                        {}, optional={"size": SCALARS, "sha256": st.one_of(SCALARS, st.just("a" * 64)),
                                                      "pointerSize": SCALARS}))}),
    st.dictionaries(st.text(max_size=8), SCALARS, max_size=3), SCALARS)
INFO = st.one_of(
    st.fixed_dictionaries({"id": st.just("o/r")},
                          optional={"sha": st.one_of(SCALARS, st.just("ab" * 20)), "gated": SCALARS,
                                    "siblings": st.one_of(SCALARS, st.lists(SIBLING, max_size=8)),
                                    "gguf": st.one_of(SCALARS, st.dictionaries(st.just("architecture"), SCALARS))}),
    st.dictionaries(st.text(max_size=8), SCALARS, max_size=4), st.lists(SCALARS, max_size=3), SCALARS)


@given(INFO)
def test_model_info_answers(data):
    def read():
        try:
            listing = listing_from_json("o/r", data)
        except HubError as exc:
            assert "\n" not in str(exc)
            return
        for v in listing.variants:
            for f in v.files:
                assert safe_path(f.path) and isinstance(f.size, int) and f.size >= 0
    run_bounded(read, seconds=20, max_mb=64)


@given(st.text(max_size=200))
def test_file_names(name):
    q = quant_of(name)
    assert isinstance(q, str) and len(q) <= len(name)


@given(st.binary(max_size=2000))
def test_partial_download_sidecar(tmp_path_factory, raw):
    root = tmp_path_factory.mktemp("side")
    dest = Path(root) / "m.gguf"
    dest.write_bytes(b"x" * 10)
    (Path(root) / "m.gguf.json").write_bytes(raw)
    assert is_complete(dest, HubFile("m.gguf", 10, "a" * 64), "c" * 40) in (True, False)
