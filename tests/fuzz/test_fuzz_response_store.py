"""Fuzzing the server's stored response records (engine.server.response_store): generated
structures and mutated real files. The property: the owner's record with every field of its type
(and answerable as UTF-8 JSON), or one OpenAI-shaped error of one line; a damaged record can still
be deleted by its owner; never another exception, never a hang. Example counts come from the
Hypothesis profile (tests/fuzz/conftest.py)."""
from __future__ import annotations

import json
import tempfile
from dataclasses import asdict
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from fuzz_util import byte_mutations, mutate

from engine.server.errors import ApiError, error_body
from engine.server.response_store import ROLES, RecordError, ResponseRecord, ResponseStore, validate

RID = "resp_" + "ab" * 24
OWNER = "f" * 64
SID = "3f2c1a9e-7b4d-4c55-9a0e-2d3b4c5d6e7f"
FIELDS = ["id", "owner", "session_id", "messages", "created_at", "model", "previous_response_id", "body", "extra"]
FUZZ = settings(deadline=None)       # examples and health checks: the profile (tests/fuzz/conftest.py)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2 ** 70), 2 ** 70) | st.floats(allow_nan=False)
    | st.text(max_size=50),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=10), inner, max_size=6),
    max_leaves=30)


def real_record(turns: int = 2) -> ResponseRecord:
    messages = [{"role": r, "content": f"message {i} é ✓"} for i in range(turns) for r in ("user", "assistant")]
    return ResponseRecord(RID, OWNER, SID, messages, 1_700_000_000, "tiny-chat", None,
                          {"id": RID, "object": "response", "output": [{"type": "message", "content": []}]})


def check_valid(r: ResponseRecord) -> None:
    assert r.id == RID and isinstance(r.owner, str) and r.session_id == SID
    assert all(m["role"] in ROLES and isinstance(m["content"], str) for m in r.messages)
    assert isinstance(r.created_at, int) and isinstance(r.model, str) and isinstance(r.body, dict)
    json.dumps(r.body, ensure_ascii=False).encode("utf-8")      # what GET answers


def check_error(exc: ApiError) -> None:
    body = json.dumps(error_body(exc.status, exc.message, exc.param, exc.code)).encode()
    message = json.loads(body)["error"]["message"]
    assert exc.status == 404 and message and "\n" not in message


@FUZZ
@given(json_values)
def test_any_json_value_is_a_record_or_one_clear_error(value):
    try:
        check_valid(validate(value, RID))
    except RecordError as exc:
        assert str(exc)


@FUZZ
@given(st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=6))
def test_a_real_record_with_fields_replaced(changes):
    data = asdict(real_record())
    data.update(changes)
    try:
        check_valid(validate(data, RID))
    except RecordError as exc:
        assert str(exc)


@FUZZ
@given(byte_mutations(max_size=8), st.integers(0, 3))
def test_mutated_real_record_files(ops, turns):
    with tempfile.TemporaryDirectory() as tmp:
        store = ResponseStore(Path(tmp) / "responses")
        store.save(real_record(turns))
        path = store.root / f"{RID}.json"
        path.write_bytes(mutate(path.read_bytes(), ops))
        try:
            check_valid(store.get(RID, OWNER))
        except ApiError as exc:
            check_error(exc)
        try:
            store.delete(RID, OWNER)
        except ApiError as exc:       # the mutation changed the owner: another key's record
            check_error(exc)
            assert exc.code == "response_not_found"
        else:
            assert not path.exists()
        store.session_in_use(SID)
