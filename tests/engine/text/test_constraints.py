"""Constrained decoding (engine.text.constraints and its hook in Generator.stream) on the tiny
model's real tokenizer and graph: the mask allows exactly what can continue the format, EOS only
once the reply is complete, every constrained reply validates against its schema (alone, through
the batcher, with logit_bias and logprobs), and untrusted schemas fail fast with a named cause."""
from __future__ import annotations

import json
import re
import threading

import jsonschema
import numpy as np
import pytest

from engine.api import ChatMessage, SamplingParams
from engine.generation.generate import Generator, collect
from engine.runtime import batcher as batcher_mod
from engine.runtime.runner import Runner
from engine.text import constraints
from engine.text.constraints import ConstraintCompiler, ConstraintError
from tests.support.json_schemas import PET

# Strings and arrays are bounded: a random-weight model draws string characters almost uniformly
# from the vocabulary, so an unbounded string would run to the length limit.
NESTED = {"type": "object", "properties": {
    "owner": {"type": "object", "properties": {"first": {"type": "string", "maxLength": 5},
                                               "vip": {"type": "boolean"}},
              "required": ["first", "vip"], "additionalProperties": False},
    "scores": {"type": "array", "items": {"type": "number"}, "minItems": 1, "maxItems": 4},
    "status": {"enum": ["open", "closed"]}},
    "required": ["owner", "scores", "status"], "additionalProperties": False}
CHOICE = {"anyOf": [{"type": "object", "properties": {"yes": {"const": True}}, "required": ["yes"],
                     "additionalProperties": False},
                    {"type": "array", "items": {"type": "integer"}, "maxItems": 2}]}
SCHEMAS = [PET, NESTED, CHOICE]


@pytest.fixture(scope="module")
def compiler(tiny_model) -> ConstraintCompiler:
    return ConstraintCompiler(tiny_model.tokenizer, tiny_model.eos_token_ids)


def text_of(tiny_model, ids) -> str:
    return tiny_model.tokenizer.decode(list(ids), skip_special_tokens=False)


def random_walk(compiler, constraint, eos: list[int], seed: int, steps: int = 400) -> tuple[list[int], bool]:
    """Draws uniformly among the tokens the mask allows until the grammar is done (or EOS is
    drawn); checks at every step that EOS is allowed exactly when the reply is complete."""
    rng = np.random.default_rng(seed)
    m = compiler.matcher(constraint)
    out: list[int] = []
    for _ in range(steps):
        allowed = m.allowed()
        assert all(bool(allowed[e]) == m.complete for e in eos)
        token = int(rng.choice(np.flatnonzero(allowed)))
        m.advance(token)
        if token in eos:
            return out, True
        out.append(token)
        if m.done:
            return out, True
    return out, False


# ---- the constraint object ------------------------------------------------------------------
@pytest.mark.parametrize("schema", SCHEMAS, ids=["flat", "nested", "anyof"])
def test_random_walks_over_the_mask_give_valid_json(tiny_model, compiler, schema):
    constraint = constraints.json_schema(schema)
    finished = 0
    for seed in range(6):
        ids, ended = random_walk(compiler, constraint, tiny_model.eos_token_ids, seed)
        if ended:
            finished += 1
            jsonschema.validate(json.loads(text_of(tiny_model, ids)), schema)
    assert finished >= 3     # bounded strings and arrays: most walks end well within 400 tokens


def test_json_object_walks_give_objects(tiny_model, compiler):
    # Any JSON object: nothing bounds it, so a walk that ends must be one object, and one always starts as one.
    constraint = constraints.json_object()
    for seed in range(4):
        ids, ended = random_walk(compiler, constraint, tiny_model.eos_token_ids, seed)
        text = text_of(tiny_model, ids)
        assert text.startswith("{")
        if ended:
            assert isinstance(json.loads(text), dict)


def test_the_mask_allows_exactly_the_continuations_of_an_enum(tiny_model, compiler):
    tok = tiny_model.tokenizer
    m = compiler.matcher(constraints.json_schema(PET))
    prefix = '{"name": "ab", "age": 3, "kind": "'
    for t in tok.encode(prefix, add_special_tokens=False).ids:
        m.advance(t)
    allowed = m.allowed()
    for t in range(compiler.vocab_size):
        piece = text_of(tiny_model, [t])
        # a token fits iff its text starts one of the enum's remaining texts (cat", dog", fish")
        fits = bool(piece) and t not in tiny_model.eos_token_ids and any(
            w.startswith(piece) or piece.startswith(w) and piece == w for w in ('cat"', 'dog"', 'fish"'))
        assert bool(allowed[t]) == fits, (t, piece)
    assert not m.complete


def test_eos_is_allowed_only_when_the_reply_is_complete(tiny_model, compiler):
    tok = tiny_model.tokenizer
    eos = tiny_model.eos_token_ids
    m = compiler.matcher(constraints.json_schema({"type": "array", "items": {"type": "integer"}}))
    for t in tok.encode("[1, 2", add_special_tokens=False).ids:
        m.advance(t)
    assert not any(m.allowed()[e] for e in eos) and not m.complete
    with pytest.raises(ConstraintError, match="outside the response format"):
        m.advance(eos[0])
    m = compiler.matcher(constraints.json_schema({"type": "array", "items": {"type": "integer"}}))
    for t in tok.encode("[1, 2]", add_special_tokens=False).ids:
        m.advance(t)
    assert m.complete and m.done and all(m.allowed()[e] for e in eos)


def test_mask_copies_the_logits_and_forbids_the_rest(compiler):
    m = compiler.matcher(constraints.json_object())
    logits = np.linspace(-3, 3, compiler.vocab_size + 5).astype(np.float32)    # a padded vocabulary
    before = logits.copy()
    masked = m.mask(logits)
    allowed = np.flatnonzero(m.allowed())
    assert np.array_equal(logits, before)
    assert np.array_equal(masked[allowed], logits[allowed])
    others = np.setdiff1d(np.arange(logits.shape[0]), allowed)
    assert np.all(np.isneginf(masked[others])) and others.max() == logits.shape[0] - 1


def test_a_forbidden_token_is_refused(tiny_model, compiler):
    m = compiler.matcher(constraints.json_object())
    a = tiny_model.tokenizer.encode("a", add_special_tokens=False).ids[0]
    with pytest.raises(ConstraintError, match=f"token {a} is outside"):
        m.advance(a)


def test_lark_grammar_with_an_embedded_schema(tiny_model, compiler):
    grammar = ('start: "<call>" body "</call>"\n'
               'body: %json {"type": "object", "properties": {"name": {"const": "f"}}, '
               '"required": ["name"], "additionalProperties": false}')
    for seed in range(3):
        ids, ended = random_walk(compiler, constraints.lark(grammar), tiny_model.eos_token_ids, seed)
        text = text_of(tiny_model, ids)
        assert ended and text.startswith("<call>") and text.endswith("</call>")
        assert json.loads(text[len("<call>"):-len("</call>")]) == {"name": "f"}


def test_compiled_once_and_matchers_are_independent(compiler):
    c = constraints.json_schema(PET)
    a, b = compiler.matcher(c), compiler.matcher(c)
    start = a.allowed().copy()
    a.advance(int(np.flatnonzero(start)[0]))
    assert np.array_equal(b.allowed(), start) and not np.array_equal(a.allowed(), start)


# ---- untrusted schemas: a named cause, bounded work ------------------------------------------
@pytest.mark.parametrize(("schema", "cause"), [
    ("{not json", "not JSON"),
    ([1, 2], "is an object"),
    ({"type": "strin"}, "strin"),
    ({"type": "object", "properties": {"a": {"$ref": "#/defs/missing"}}}, "missing"),
    ({"type": "string", "format": "no-such-format"}, "no-such-format"),
    ({"type": "string", "pattern": "(("}, "unsupported json schema"),
    ({"description": "x" * (constraints.MAX_SOURCE_CHARS + 1)}, "characters"),
])
def test_invalid_schemas_name_the_cause(schema, cause):
    with pytest.raises(ConstraintError, match=re.escape(cause)):
        constraints.json_schema(schema)


def test_deep_schemas_are_refused_before_the_library_sees_them():
    deep: dict = {"type": "integer"}
    for _ in range(constraints.MAX_SCHEMA_DEPTH):
        deep = {"type": "array", "items": deep}
    with pytest.raises(ConstraintError, match="nests deeper"):
        constraints.json_schema(deep)
    # as JSON text too, and nested far past Python's recursion limit
    with pytest.raises(ConstraintError, match="nests deeper|not JSON"):
        constraints.json_schema('{"a": ' * 5000 + "1" + "}" * 5000)


def wide_schema(properties: int) -> dict:
    return {"type": "object", "properties": {f"k{i}": {"type": "object", "properties": {
        f"j{j}": {"type": "integer"} for j in range(30)}} for i in range(properties)}}


def test_the_size_limit_bounds_the_grammar(compiler):
    # The biggest schemas accepted compile (the library's grammar stays far under its limits) ...
    near = wide_schema(60)
    assert len(json.dumps(near)) < constraints.MAX_SOURCE_CHARS < len(json.dumps(wide_schema(80)))
    compiler.matcher(constraints.json_schema(near)).allowed()
    with pytest.raises(ConstraintError, match="at most 65536"):
        constraints.json_schema(wide_schema(80))


def test_over_the_librarys_limits_is_a_named_error(compiler, monkeypatch):
    # ... and one over the library's counted-work limits (made small here) is refused, not run.
    import llguidance
    monkeypatch.setattr(constraints, "_limits", lambda: llguidance.LLParserLimits(max_grammar_size=500))
    with pytest.raises(ConstraintError, match="grammar size"):
        constraints.json_schema(wide_schema(10))


def test_invalid_grammars_name_the_cause():
    with pytest.raises(ConstraintError, match="lark"):
        constraints.lark("start: undefined_rule")
    with pytest.raises(ConstraintError, match="non-empty"):
        constraints.lark("  ")


# ---- the generation loop ----------------------------------------------------------------------
def prompt_ids(gen: Generator) -> list[int]:
    return gen.encode_chat([ChatMessage("user", "Describe a pet as JSON.")])


def test_greedy_constrained_stream_is_argmax_over_the_masked_logits(tiny_model, compiler):
    """The hook masks every step: a hand loop (runner + matcher + argmax) gives the same tokens."""
    gen = Generator(tiny_model)
    ids = prompt_ids(gen)
    constraint = constraints.json_schema(PET)
    result = collect(gen.stream(gen.new_cache(), ids, SamplingParams(greedy=True, max_new_tokens=200,
                                                                       constraint=constraint)))
    runner = Runner(tiny_model)
    cache = runner.new_cache()
    logits = runner.forward(cache, ids)
    m = compiler.matcher(constraint)
    want: list[int] = []
    while len(want) < 200:
        token = int(np.argmax(m.mask(logits)))
        m.advance(token)
        if token in tiny_model.eos_token_ids:
            break
        want.append(token)
        if m.done:
            break
        logits = runner.forward(cache, [token])
    assert result.token_ids == want
    if result.figures.finish_reason == "eos":
        jsonschema.validate(json.loads(result.text), PET)


@pytest.mark.parametrize("schema", SCHEMAS, ids=["flat", "nested", "anyof"])
def test_sampled_replies_validate_and_end_on_their_own(tiny_model, schema):
    gen = Generator(tiny_model)
    ids = prompt_ids(gen)
    ended = 0
    for seed in range(4):
        params = SamplingParams(temperature=1.0, seed=seed, max_new_tokens=300, logprobs=2,
                                constraint=constraints.json_schema(schema))
        result = collect(gen.stream(gen.new_cache(), ids, params))
        if result.figures.finish_reason == "eos":
            ended += 1
            jsonschema.validate(json.loads(result.text), schema)
        assert len(result.logprobs) == len(result.token_ids)    # logprobs ride along unchanged
    assert ended >= 2


def test_logit_bias_steers_within_the_format(tiny_model):
    """A bias toward the closing quote makes every string empty; the grammar still decides."""
    gen = Generator(tiny_model)
    quote = tiny_model.tokenizer.token_to_id('"')
    params = SamplingParams(greedy=True, max_new_tokens=200, logit_bias={quote: 100.0},
                            constraint=constraints.json_schema(PET))
    result = collect(gen.stream(gen.new_cache(), prompt_ids(gen), params))
    assert result.figures.finish_reason == "eos"
    reply = json.loads(result.text)
    jsonschema.validate(reply, PET)
    assert reply["name"] == "" and all(t == "" for t in reply["tags"])


def test_a_logit_bias_that_bans_every_allowed_token_is_an_error(tiny_model):
    gen = Generator(tiny_model)
    opening = [t for t in range(tiny_model.tokenizer.get_vocab_size())
               if text_of(tiny_model, [t]).startswith("{")]
    params = SamplingParams(greedy=True, max_new_tokens=20, logit_bias={t: -100.0 for t in opening},
                            constraint=constraints.json_object())
    with pytest.raises(ConstraintError, match="logit_bias"):
        collect(gen.stream(gen.new_cache(), prompt_ids(gen), params))


def test_concurrent_constrained_streams_through_the_batcher(tiny_model, monkeypatch):
    """Four sessions at once (their decode steps batched): each reply equals its run alone."""
    monkeypatch.setattr(batcher_mod, "GATHER_WAIT_S", 60.0)
    solo = Generator(tiny_model)
    solo.runner.batch_decode = False
    ids = prompt_ids(solo)
    schemas = [PET, NESTED, CHOICE, PET]

    def params(i: int) -> SamplingParams:
        return SamplingParams(temperature=1.0, seed=10 + i, max_new_tokens=120,
                              constraint=constraints.json_schema(schemas[i]))
    want = [collect(solo.stream(solo.new_cache(), ids, params(i))).token_ids for i in range(4)]
    gen = Generator(tiny_model)
    caches = [gen.new_cache() for _ in range(4)]
    held = [gen.runner.decoding(c) for c in caches]      # the first steps wait for all four
    for h in held:
        h.__enter__()
    got: list[list[int] | None] = [None] * 4
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            got[i] = collect(gen.stream(caches[i], ids, params(i))).token_ids
        except BaseException as exc:   # noqa: BLE001 - reported by the test
            errors.append(exc)
        finally:
            held[i].__exit__(None, None, None)
    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
        assert not t.is_alive(), "a generation hung"
    assert not errors and got == want
    assert gen.runner.batcher is not None and gen.runner.batcher.batched_steps > 0
