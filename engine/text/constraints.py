"""Constrained decoding: the reply must match a JSON schema, any JSON object, or a Lark grammar.

Built on llguidance (picked by measurement over outlines_core: docs/benchmarks/constrained-decoding.md).
Three steps, each with one job:

    json_schema(schema) | json_object() | lark(text)  -> OutputConstraint   (plain data, checked here;
                                                          put it in SamplingParams.constraint)
    ConstraintCompiler(tokenizer, eos_token_ids)      -> one per model: the library's view of the
                                                          vocabulary (~0.6 s to build at 49k tokens)
    compiler.matcher(constraint)                      -> ConstraintMatcher, one per generation:
        matcher.mask(logits)   logits with every token the grammar forbids now at -inf; an EOS
                               token stays only once the reply is complete
        matcher.advance(token) after each sampled token
        matcher.done           complete, and nothing but EOS may follow: end the reply now

The engine's generation loop (engine.generation.generate.Generator.stream) does all of this for
any `SamplingParams.constraint`, so every caller (sessions, the batcher, the server's choices,
streaming or not, with logprobs and logit_bias) gets it from one place.

Lark grammars (llguidance's dialect) may embed a JSON schema with `%json { ... }` and name a
special token unquoted as `<name>`; e.g. a tool call in a model's format (an embedded schema allows
free JSON whitespace unless it says `"x-guidance": {"whitespace_flexible": false}`, as the
`json_schema` constraints here do):

    start: "<tool_call>" call "</tool_call>"        (quoted: the text; <tool_call>: the special token)
    call: %json {"type": "object", "properties": {"name": {"const": "f"}, "arguments": {...}},
                 "required": ["name", "arguments"], "additionalProperties": false}

Schemas and grammars come from API clients, so they are bounded before the library sees them
(size, nesting) and compiled under the library's fuel limits: a bad or too costly one is a
`ConstraintError` (a ValueError: the server answers 400 with its message), never a hang.
"""
from __future__ import annotations

import collections
import json
import threading
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import llguidance
import numpy as np
from llguidance.numpy import allocate_token_bitmask, fill_next_token_bitmask
from tokenizers import Tokenizer

from engine.api import OutputConstraint
from engine.base.json_shape import json_depth

if TYPE_CHECKING:      # a TypedDict of the library's stubs only
    from llguidance._lib import JsonCompileOptions

JSON_SCHEMA, JSON_OBJECT, LARK = "json_schema", "json_object", "lark"
KINDS = (JSON_SCHEMA, JSON_OBJECT, LARK)

MAX_SOURCE_CHARS = 64 * 1024   # a schema (as JSON text) or a grammar: far beyond any real response format
MAX_SCHEMA_DEPTH = 32          # nesting of objects and arrays in the schema document itself
MAX_COMPILED = 16              # compiled constraints kept per model (n choices compile once)
_ERROR_CHARS = 300             # the library's messages can quote the grammar: keep the answer short


# Replies are written as Python's json.dumps writes them ({"a": 1, "b": [2, 3]}): natural for models,
# and no room for endless whitespace, which a free whitespace rule would give a weak model.
_JSON_OPTIONS: JsonCompileOptions = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


class ConstraintError(ValueError):
    """A response format that cannot be enforced (invalid, unsupported, over the limits), or a
    token outside it; the message names the cause in one line."""


def _limits() -> llguidance.LLParserLimits:
    """Fuel for building the lexer and the grammar (llguidance counts work, not time, so the bound
    is the same on any machine: ~20 ms of work at most); the per-token limits stay the library's."""
    return llguidance.LLParserLimits(initial_lexer_fuel=1_000_000, max_grammar_size=200_000,
                                     max_lexer_states=50_000, verbose_errors=False)


def _short(message: str) -> str:
    line = " ".join(str(message).split())
    return line if len(line) <= _ERROR_CHARS else line[:_ERROR_CHARS] + "..."


def _check_depth(value: Any) -> None:
    """Raises unless `value` nests at most MAX_SCHEMA_DEPTH objects/arrays."""
    if json_depth(value) > MAX_SCHEMA_DEPTH + 1:     # + 1: json_depth counts the scalars' level too
        raise ConstraintError(f"the schema nests deeper than {MAX_SCHEMA_DEPTH} levels")


def _grammar(constraint: OutputConstraint) -> str:
    """The llguidance grammar of a constraint (no tokenizer needed); ConstraintError if it has none."""
    if constraint.kind not in KINDS:
        raise ConstraintError(f"unknown constraint kind {constraint.kind!r} (one of {', '.join(KINDS)})")
    if len(constraint.source) > MAX_SOURCE_CHARS:
        raise ConstraintError(f"the {constraint.kind.replace('_', ' ')} has {len(constraint.source)} characters; "
                              f"at most {MAX_SOURCE_CHARS} are accepted")
    try:
        if constraint.kind == LARK:
            return str(llguidance.LLMatcher.grammar_from_lark(constraint.source))
        source = '{"type": "object"}' if constraint.kind == JSON_OBJECT else constraint.source
        return str(llguidance.LLMatcher.grammar_from_json_schema(source, overrides=_JSON_OPTIONS))
    except (ValueError, TypeError) as exc:
        raise ConstraintError(f"invalid {constraint.kind.replace('_', ' ')}: {_short(str(exc))}") from None


def _check(constraint: OutputConstraint) -> OutputConstraint:
    """Compiles the constraint once without a tokenizer, so a bad one fails when it is made."""
    error = llguidance.LLMatcher.validate_grammar(_grammar(constraint), None, limits=_limits())
    if error:
        raise ConstraintError(f"unsupported {constraint.kind.replace('_', ' ')}: {_short(error)}")
    return constraint


def json_schema(schema: Mapping[str, Any] | bool | str) -> OutputConstraint:
    """The reply is JSON valid under `schema` (a dict, a boolean schema, or its JSON text).
    Raises ConstraintError for one that is not JSON, too big or deep, invalid or unsupported."""
    if isinstance(schema, str):
        if len(schema) > MAX_SOURCE_CHARS:
            raise ConstraintError(f"the json schema has {len(schema)} characters; at most {MAX_SOURCE_CHARS} "
                                  "are accepted")
        try:
            schema = json.loads(schema)
        except RecursionError:
            raise ConstraintError(f"the schema nests deeper than {MAX_SCHEMA_DEPTH} levels") from None
        except ValueError as exc:
            raise ConstraintError(f"the json schema is not JSON: {_short(str(exc))}") from None
    if not isinstance(schema, (dict, bool)):
        raise ConstraintError(f"a json schema is an object (or a boolean), not {type(schema).__name__}")
    _check_depth(schema)
    try:
        text = json.dumps(schema, ensure_ascii=False, allow_nan=False)
    except (ValueError, TypeError) as exc:
        raise ConstraintError(f"the json schema is not JSON: {_short(str(exc))}") from None
    return _check(OutputConstraint(JSON_SCHEMA, text))     # key order kept: replies follow it


def json_object() -> OutputConstraint:
    """The reply is one JSON object, any keys and values (OpenAI's `json_object` format)."""
    return _check(OutputConstraint(JSON_OBJECT))


def lark(grammar: str) -> OutputConstraint:
    """The reply matches a Lark grammar in llguidance's dialect (see the module's docstring)."""
    if not isinstance(grammar, str) or not grammar.strip():
        raise ConstraintError("a lark grammar is a non-empty string")
    return _check(OutputConstraint(LARK, grammar))


class ConstraintMatcher:
    """One generation's place in its grammar: masks logits before each draw, advances on each token."""

    def __init__(self, matcher: llguidance.LLMatcher, vocab_size: int) -> None:
        self._matcher = matcher
        self._vocab = vocab_size
        self._bits = allocate_token_bitmask(1, vocab_size)     # int32 words, one bit per token id

    def allowed(self) -> np.ndarray:
        """A bool array over the tokenizer's vocabulary: True where the token may come next."""
        fill_next_token_bitmask(self._matcher, self._bits)
        if self._matcher.is_error():
            raise ConstraintError(f"the response format failed: {_short(self._matcher.get_error())}")
        return np.unpackbits(self._bits.view(np.uint8), count=self._vocab, bitorder="little").view(bool)

    def mask(self, logits: np.ndarray) -> np.ndarray:
        """A copy of `logits` with every token the grammar forbids now at -inf (ids beyond the
        tokenizer's vocabulary too). `logits` is never modified."""
        x = np.asarray(logits, dtype=np.float32)
        allowed = self.allowed()
        n = min(x.shape[0], allowed.shape[0])
        # np.where over the whole vector: ~4x faster than gathering the allowed ids (often ~all of them).
        masked = np.where(allowed[:n], x[:n], np.float32(-np.inf))
        if n == x.shape[0]:
            return masked
        return np.concatenate([masked, np.full(x.shape[0] - n, -np.inf, dtype=np.float32)])

    def advance(self, token: int) -> None:
        """Moves past a sampled token; ConstraintError if the grammar does not allow it here
        (a logit_bias that bans every allowed token makes the sampler pick one)."""
        if not self._matcher.consume_token(int(token)):
            raise ConstraintError(f"token {int(token)} is outside the response format (a logit_bias may ban "
                                  f"every token it allows): {_short(self._matcher.get_error())}")

    @property
    def done(self) -> bool:
        """Complete, and nothing but EOS may follow: the reply ends here."""
        return bool(self._matcher.is_stopped())

    @property
    def complete(self) -> bool:
        """The text so far is a whole reply (EOS is allowed), though it may go on."""
        return bool(self._matcher.is_accepting())


class ConstraintCompiler:
    """Constraints bound to one model's tokenizer: build it once per model (engine.generation
    keeps it on the Generator) and ask it for a matcher per generation. Thread-safe."""

    def __init__(self, tokenizer: Tokenizer, eos_token_ids: Sequence[int], vocab_size: int | None = None) -> None:
        eos = [int(t) for t in eos_token_ids]
        if not eos:
            raise ConstraintError("the model names no end-of-sequence token, so a constrained reply cannot end")
        try:
            self.tokenizer = llguidance.LLTokenizer(tokenizer.to_str(), n_vocab=vocab_size, eos_token=eos)
        except (ValueError, RuntimeError) as exc:
            raise ConstraintError(f"the model's tokenizer cannot drive constrained decoding: {_short(str(exc))}") \
                from None
        self.vocab_size = int(self.tokenizer.vocab_size)
        self._compiled: collections.OrderedDict[OutputConstraint, llguidance.LLMatcher] = collections.OrderedDict()
        self._lock = threading.Lock()

    def matcher(self, constraint: OutputConstraint) -> ConstraintMatcher:
        """A fresh matcher at the start of `constraint`; ConstraintError if it cannot be compiled
        for this tokenizer (an unknown special token in a grammar, or over the limits)."""
        with self._lock:
            template = self._compiled.get(constraint)
            if template is not None:
                self._compiled.move_to_end(constraint)
        if template is None:
            template = llguidance.LLMatcher(self.tokenizer, _grammar(constraint), log_level=0, limits=_limits())
            if template.is_error():
                raise ConstraintError(f"unsupported {constraint.kind.replace('_', ' ')}: "
                                      f"{_short(template.get_error())}")
            with self._lock:
                self._compiled[constraint] = template
                while len(self._compiled) > MAX_COMPILED:
                    self._compiled.popitem(last=False)
        return ConstraintMatcher(template.deep_copy(), self.vocab_size)
