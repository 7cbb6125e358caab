"""Fuzzing the session manifest reader (engine.sessions.manifest): generated structures and mutated real
files. The property: one clear error (ManifestError, or a Loaded with its reason) or a manifest
whose every field has its type and every file name its form; never another exception, never a
hang. Example counts come from the Hypothesis profile (tests/fuzz/conftest.py: "default",
"campaign" via HYPOTHESIS_PROFILE)."""
from __future__ import annotations

import json
import tempfile
import uuid
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from fuzz_util import byte_mutations, mutate

from engine.sessions.manifest import (KINDS, Manifest, ManifestDir, ManifestError, encode, is_block_key, is_tail_name,
                             seal, validate)

SID = "3f2c1a9e-7b4d-4c55-9a0e-2d3b4c5d6e7f"
FIELDS = ["version", "session_id", "kind", "fingerprint", "cache_salt", "block_tokens", "tokens", "blocks",
          "tail", "transcript", "updated", "checksum"]
FUZZ = settings(deadline=None)       # examples and health checks: the profile (tests/fuzz/conftest.py)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2 ** 70), 2 ** 70) | st.floats(allow_nan=False)
    | st.text(max_size=50),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=10), inner, max_size=6),
    max_leaves=30)


def real_manifest(n_blocks: int = 3, turns: int = 2) -> Manifest:
    keys = [uuid.UUID(int=i + 1).hex + "0" * 8 for i in range(n_blocks)]
    transcript = [{"role": r, "content": f"message {i} é ✓"} for i in range(turns) for r in ("user", "assistant")]
    return Manifest(SID, "pinned", "fp:abc/kv-float16", "salt", 16, list(range(3, 3 + 16 * n_blocks + 5)),
                    keys, f"{SID}.0badcafe.kvt", transcript, 1.0e9)


def check_valid(m: Manifest) -> None:
    assert m.session_id == SID and m.kind in KINDS
    assert all(is_block_key(k) for k in m.blocks)
    assert m.tail is None or is_tail_name(m.tail, SID)
    assert all(isinstance(t, int) and t >= 0 for t in m.tokens)
    assert all(isinstance(t["content"], str) for t in m.transcript)


@FUZZ
@given(json_values)
def test_any_json_value_is_a_manifest_or_one_clear_error(value):
    try:
        check_valid(validate(value, SID))
    except ManifestError as exc:
        assert str(exc)


@FUZZ
@given(st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=6), st.booleans())
def test_a_real_manifest_with_fields_replaced(changes, sealed):
    data = json.loads(encode(real_manifest()))
    data.update(changes)
    if sealed:              # an attacker can compute the checksum: the schema alone must hold
        data = seal(data)
    try:
        check_valid(validate(data, SID))
    except ManifestError as exc:
        assert str(exc)


mutations = byte_mutations(max_size=8)


@FUZZ
@given(mutations, st.integers(0, 4), st.integers(0, 3), st.booleans())
def test_mutated_real_manifest_files(ops, n_blocks, turns, with_prev):
    with tempfile.TemporaryDirectory() as tmp:
        folder = ManifestDir(Path(tmp) / "sessions")
        good = real_manifest(n_blocks, turns)
        if with_prev:
            folder.write(good)
            folder.write(good)      # the first one becomes the previous version
        raw = encode(good)
        folder.path(SID).parent.mkdir(parents=True, exist_ok=True)
        damaged = mutate(raw, ops)
        folder.path(SID).write_bytes(damaged)
        loaded = folder.load(SID)
        if loaded.error is None:
            assert loaded.manifest is not None
            check_valid(loaded.manifest)
        else:
            assert loaded.error.startswith(SID)
            # Moved aside, never overwritten; the previous version used when there is one.
            aside = list((Path(tmp) / "sessions" / "damaged").glob("*.json"))
            assert [p.read_bytes() for p in aside] == [damaged]
            if with_prev:
                assert loaded.manifest == good
            else:
                assert loaded.manifest is None
