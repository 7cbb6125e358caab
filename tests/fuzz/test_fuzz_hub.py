"""Fuzzing the model library's readers of what the Hub (or a damaged disk) says: the Hub's JSON
answers as bytes (model info with its file listing, search results: arbitrary, mistyped, deeply
nested, mutated), the depth scan that guards the JSON parser, file names, and the partial-download
sidecar.

Property: a `RepoFiles` whose every file name is a safe relative path (no control characters)
with a non-negative size, search hits whose every field has its type, or one `HubError` line; the
sidecar check answers True/False; nothing else, bounded in time and memory.
"""
from __future__ import annotations

import json
import unicodedata
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.fuzz_util import byte_mutations, mutate
from tests.support.bounded import run_bounded
from engine.hub import HubError, HubFile, quant_of
from engine.hub.client import MAX_JSON_DEPTH, json_too_deep, parse_json
from engine.hub.download import is_complete
from engine.hub.search import _ARCH, _REPO_ID, hits_from_json, listing_from_json, safe_path

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


# Any JSON value, with the characters that trip a depth scan (brackets, quotes, backslashes) and
# terminal control sequences inside strings.
TEXT = st.one_of(st.text(max_size=20), st.sampled_from(
    ['[{"', '\\"]', "\\", "\x1b[2J\x07", "a\nb", "\u202e", "o/r", "model.onnx", "x-Q4_K_M.gguf"]))
JSON = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=False),
                              TEXT),
                    lambda inner: st.one_of(st.lists(inner, max_size=4),
                                            st.dictionaries(st.one_of(TEXT, st.sampled_from(
                                                ["id", "siblings", "rfilename", "size", "lfs", "sha256",
                                                 "downloads", "likes", "gated", "gguf", "architecture", "sha"])),
                                                inner, max_size=4)),
                    max_leaves=30)
FIELDS = {"id": st.one_of(JSON, st.sampled_from(["o/r", "o/\x1br", "../x", "a/b/c"])),
          "downloads": JSON, "likes": JSON, "gated": st.one_of(JSON, st.sampled_from(["auto", "manual"])),
          "gguf": st.one_of(JSON, st.fixed_dictionaries({"architecture": st.one_of(JSON, st.just("llama"))})),
          "sha": st.one_of(JSON, st.just("ab" * 20)),
          "siblings": st.one_of(JSON, st.lists(st.one_of(JSON, st.fixed_dictionaries(
              {"rfilename": st.one_of(NAMES, JSON)},
              optional={"size": JSON, "lfs": st.one_of(JSON, st.fixed_dictionaries({}, optional={
                  "size": JSON, "sha256": st.one_of(JSON, st.just("a" * 64))}))})), max_size=6))}
ANSWER = st.one_of(JSON, st.fixed_dictionaries({}, optional=FIELDS),
                   st.lists(st.fixed_dictionaries({}, optional=FIELDS), max_size=6))


def _depth(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    return 0


def _nest(raw: bytes, depth: int, where: int) -> bytes:
    """`raw` with a `depth`-deep array spliced in at a position derived from `where`."""
    cut = where % (len(raw) + 1)
    return raw[:cut] + b"[" * depth + b"]" * depth + raw[cut:]


def _printable(text: str) -> bool:
    return all(unicodedata.category(c) not in ("Cc", "Cf") for c in text)


@given(ANSWER, st.one_of(st.none(), st.integers(1, 200_000)), st.integers(0, 1 << 20),
       st.one_of(st.none(), byte_mutations(6)), st.sampled_from(["ascii", "utf-8", "utf-8-sig", "utf-16"]))
def test_hub_answers_as_bytes(value, depth, where, edits, encoding):
    """What `get_json` hands on, as the server could send it: parsed, then read as a model-info
    answer (its file listing included) and as a search answer."""
    raw = json.dumps(value, ensure_ascii=encoding == "ascii").encode("utf-8" if encoding == "ascii" else encoding,
                                                                      "surrogatepass")
    if depth is not None:
        raw = _nest(raw, depth, where)
    if edits is not None:
        raw = mutate(raw, edits)

    def read():
        try:
            data = parse_json(raw, "o/r")
        except HubError as exc:
            assert "\n" not in str(exc) and _printable(str(exc))
            return
        try:
            listing = listing_from_json("o/r", data)
        except HubError as exc:
            assert "\n" not in str(exc) and _printable(str(exc))
        else:
            assert _ARCH.match(listing.architecture) or listing.architecture == ""
            for v in listing.variants:
                assert _printable(v.quant)
                for f in v.files:
                    assert safe_path(f.path) and _printable(f.path) and isinstance(f.size, int) and f.size >= 0
        try:
            hits = hits_from_json(data, "gguf")
        except HubError as exc:
            assert "\n" not in str(exc) and _printable(str(exc))
        else:
            for h in hits:
                assert _REPO_ID.match(h.repo) and isinstance(h.gated, bool)
                assert type(h.downloads) is int and type(h.likes) is int and h.downloads >= 0 and h.likes >= 0
                assert _ARCH.match(h.architecture) or h.architecture == ""
    run_bounded(read, seconds=20, max_mb=96)


@given(JSON, st.integers(0, 12))
def test_json_depth_scan_matches_the_parser(value, limit):
    """The scan that runs before the parser agrees with the nesting of what the parser builds
    (strings full of brackets, quotes and backslashes included)."""
    raw = json.dumps(value, ensure_ascii=False).encode()
    assert json_too_deep(raw, limit) == (_depth(value) > limit)
    assert not json_too_deep(raw, MAX_JSON_DEPTH) or _depth(value) > MAX_JSON_DEPTH


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
