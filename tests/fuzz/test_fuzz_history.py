"""Fuzzing the saved token-history reader (engine.generation.history.TokenHistory.from_json, the manifest's
"history" field): generated structures and mutated real histories. The property: a TokenHistory
whose ids lie in the vocabulary and whose marks start at (0, 0), increase and stay in range — or
one HistoryFormatError; never another exception. A history that passes also plans a prompt
without error. Example counts come from the Hypothesis profile (tests/fuzz/conftest.py)."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.generation.history import HistoryFormatError, TokenHistory, plan_prompt

VOCAB = 420
FUZZ = settings(deadline=None)       # examples and health checks: the profile (tests/fuzz/conftest.py)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2 ** 70), 2 ** 70) | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=30)


def check(h: TokenHistory) -> None:
    assert all(0 <= t < VOCAB for t in h.ids)
    assert h.marks[0] == (0, 0)
    for (n0, c0), (n1, c1) in zip(h.marks, h.marks[1:]):
        assert n1 > n0 and c1 >= c0
    assert h.marks[-1][0] <= len(h.ids) and h.marks[-1][1] <= len(h.text)
    # It is usable: planning a prompt over it never fails.
    plan = plan_prompt(h, h.text + "next", lambda s: [3] * len(s), lambda ids: "x" * len(ids))
    assert all(isinstance(t, int) for t in plan.ids)


def load(data: object) -> None:
    try:
        h = TokenHistory.from_json(data, VOCAB)
    except HistoryFormatError as exc:
        assert str(exc)
        return
    check(h)


@FUZZ
@given(json_values)
def test_any_json_value_is_a_history_or_one_clear_error(data):
    load(data)


@FUZZ
@given(ids=st.lists(json_values | st.integers(-5, VOCAB + 5), max_size=12), text=json_values | st.text(max_size=12),
       marks=st.lists(st.lists(st.integers(-3, 15) | json_values, max_size=3), max_size=6))
def test_history_shaped_values(ids, text, marks):
    load({"ids": ids, "text": text, "marks": marks})


REAL = TokenHistory().extend((0, 0), [5, 6, 7, 8], "abcdé", [(1, 1), (2, 2), (3, 4)]).to_json()


@FUZZ
@given(field=st.sampled_from(["ids", "text", "marks"]), index=st.integers(0, 5), value=json_values)
def test_mutated_real_history(field, index, value):
    data = {"ids": list(REAL["ids"]), "text": REAL["text"], "marks": [list(m) for m in REAL["marks"]]}
    target = data[field]
    if isinstance(target, list) and target:
        target[index % len(target)] = value
    else:
        data[field] = value
    load(data)
