"""Tool calls in a model's own format: which format its chat template teaches, reading the calls
out of its reply (whole or streamed), and a grammar that makes it write one.

API (pure: no server, no engine state):

- `detect_format(template) -> ToolFormat | None`: from a `ChatTemplate` (its `tool_use` template
  when it ships one) or a template's source. `HERMES` (Hermes, Qwen2.5, Qwen3:
  `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`), `LLAMA3` (Llama 3.1/3.2: a bare
  `{"name": ..., "parameters": {...}}` reply, `<|python_tag|>` optional), `MISTRAL` (v3/v7:
  `[TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]`, the marker optional, as a detokenizer
  that skips special tokens leaves it out) or `MISTRAL_ARGS` (v11: `[TOOL_CALLS]name[ARGS]{...}`);
  None when the template shows the model no tools.
- `ToolFormat.parse(text) -> ParsedOutput(content, tool_calls)`: a finished reply. Each `ToolCall`
  has an `id` (new, in the form the format's templates accept), `name` and `arguments` (the JSON
  object's text as the model wrote it).
- `ToolFormat.stream() -> ToolCallStream`: `feed(text)` and `finish()` return `ContentDelta`s and
  `ToolCallDelta`s (a call's first delta carries its index, id and name; the next ones fragments
  of its arguments). Text that may be the start of a call is held back until it is known not to
  be. Whatever way a reply is cut into pieces, the deltas add up to what `parse` returns;
  `collect(deltas) -> ParsedOutput` adds them up.
- `ToolFormat.grammar(tools, parallel) -> str`: a Lark grammar (llguidance's dialect, with
  `%json` for the arguments' JSON schemas) whose sentences are one call (several if `parallel`)
  to one of `tools` (OpenAI function definitions), each with arguments valid for its schema.
- `check_tools(tools)`: OpenAI function tools from an untrusted request, bounded and checked
  (names, sizes, JSON schemas): `ToolDefinitionError` naming the first bad one.
"""
from __future__ import annotations

import json
import re
import secrets
import string
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from engine.api import ChatTemplateSource
from engine.base.json_shape import json_depth

MAX_TOOLS = 128
MAX_TOOL_JSON_CHARS = 64 << 10        # one tool definition, as JSON text
MAX_DESCRIPTION_CHARS = 8 << 10
MAX_SCHEMA_DEPTH = 32
NAME_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")      # OpenAI's rule for function names
_ARGUMENT_KEYS = ("arguments", "parameters")
_ARGS_MARKER = "[ARGS]"          # Mistral v11: [TOOL_CALLS]name[ARGS]{...}


class ToolDefinitionError(ValueError):
    """A tool definition is unusable; the message names the tool and the cause."""


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str        # a JSON object's text ("{}" when the model gave none)


@dataclass(frozen=True)
class ParsedOutput:
    content: str
    tool_calls: list[ToolCall]


@dataclass(frozen=True)
class ContentDelta:
    text: str


@dataclass(frozen=True)
class ToolCallDelta:
    """A call's first delta has `id` and `name` (and `arguments` ""); later ones only fragments."""
    index: int
    arguments: str
    id: str | None = None
    name: str | None = None


Delta = ContentDelta | ToolCallDelta


# ---- one call object, scanned as it arrives ---------------------------------------------------
class _CallObject:
    """`{"name": "...", "arguments": {...}, ...}` read one character at a time: the name once
    whole, the arguments' text as it comes (a string holding JSON is decoded at its end).

    Top-level members are followed; nested values only for their brackets and strings."""

    def __init__(self, args_only: bool = False) -> None:
        # states: start, key_or_end, key, colon, value_start, value, member_end, key_after_comma,
        # done, bad. `args_only`: the text is the arguments object alone (Mistral's name[ARGS]{...}).
        self.args_only = args_only
        self.state = "value_start" if args_only else "start"
        self.key: list[str] = []
        self.current_key = "arguments" if args_only else ""
        self.value_kind = ""        # "{", "[", '"', "atom"
        self.depth = 0
        self.in_string = False
        self.escape = False
        self.value: list[str] = []
        self.name: str | None = None
        self.args_streamed: list[str] = []   # raw argument text given out so far
        self.args_pending: list[str] = []    # raw argument text not yet given out
        self.args_final: str | None = None   # the whole argument text, once its value ended

    @property
    def done(self) -> bool:
        return self.state == "done"

    @property
    def bad(self) -> bool:
        return self.state == "bad"

    def feed_char(self, ch: str) -> None:
        st = self.state
        if st == "start":
            if ch == "{":
                self.state = "key_or_end"
            elif not ch.isspace():
                self.state = "bad"
        elif st == "key_or_end":
            if ch == '"':
                self.state, self.key, self.escape = "key", [], False
            elif ch == "}":
                self.state = "done"
            elif not ch.isspace():
                self.state = "bad"
        elif st == "key":
            if self.escape:
                self.escape = False
                self.key.append(ch)
            elif ch == "\\":
                self.escape = True
                self.key.append(ch)
            elif ch == '"':
                try:
                    self.current_key = json.loads('"' + "".join(self.key) + '"')
                except ValueError:
                    self.state = "bad"
                    return
                self.state = "colon"
            else:
                self.key.append(ch)
        elif st == "colon":
            if ch == ":":
                self.state = "value_start"
            elif not ch.isspace():
                self.state = "bad"
        elif st == "value_start":
            if ch.isspace():
                return
            self.value, self.depth, self.in_string, self.escape = [], 0, False, False
            self.value_kind = ch if ch in '{["' else "atom"
            self.state = "value"
            self._value_char(ch)
        elif st == "value":
            self._value_char(ch)
        elif st == "member_end":
            if ch == ",":
                self.state = "key_after_comma"
            elif ch == "}":
                self.state = "done"
            elif not ch.isspace():
                self.state = "bad"
        elif st == "key_after_comma":
            if ch == '"':
                self.state, self.key, self.escape = "key", [], False
            elif not ch.isspace():
                self.state = "bad"

    def _value_char(self, ch: str) -> None:
        kind = self.value_kind
        if kind == "atom":
            if ch in ",}" or ch.isspace():
                self._end_value()
                self.feed_char(ch)     # the character belongs to what follows the value
                return
            self.value.append(ch)
            return
        self._keep(ch)
        if self.in_string:
            if self.escape:
                self.escape = False
            elif ch == "\\":
                self.escape = True
            elif ch == '"':
                self.in_string = False
                if self.depth == 0:
                    self._end_value()
            return
        if ch == '"':
            self.in_string = True
        elif ch in "{[":
            self.depth += 1
        elif ch in "}]":
            self.depth -= 1
            if self.depth == 0:
                self._end_value()

    def _keep(self, ch: str) -> None:
        if self.current_key in _ARGUMENT_KEYS and self.value_kind in "{[" and self.args_final is None:
            self.args_pending.append(ch)
        self.value.append(ch)

    def _end_value(self) -> None:
        self.state = "done" if self.args_only else "member_end"
        text = "".join(self.value)
        key = self.current_key
        if key == "name" and self.name is None:
            try:
                name = json.loads(text)
            except ValueError:
                name = None
            if isinstance(name, str):
                self.name = name
            else:
                self.state = "bad"
        elif key in _ARGUMENT_KEYS and self.args_final is None:
            if self.value_kind == '"':         # {"arguments": "{\"x\": 1}"}: the string's content
                try:
                    decoded = json.loads(text)
                except ValueError:
                    decoded = text
                self.args_pending = [decoded if isinstance(decoded, str) else text]
            elif self.value_kind == "atom":    # null and the like: no arguments
                self.args_pending = ["{}"] if text == "null" else [text]
            self.args_final = "".join(self.args_streamed + self.args_pending)

    def take_arguments(self) -> str:
        """The argument text not given out yet."""
        out = "".join(self.args_pending)
        self.args_streamed.append(out)
        self.args_pending = []
        return out


# ---- formats ----------------------------------------------------------------------------------
_ID_ALPHABET = string.ascii_letters + string.digits
# Calls are written as json.dumps writes JSON (as the templates' `tojson` shows them to the model):
# no room for the endless whitespace a free layout gives a weak model.
_JSON_LAYOUT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


@dataclass(frozen=True)
class ToolFormat:
    """One way models write tool calls (see the module's docstring for the four)."""
    name: str
    opens: tuple[str, ...]            # markers that start tool calls
    close: str = ""                   # what ends each call (Hermes' </tool_call>)
    array: bool = False               # the calls are one JSON array after the marker (Mistral)
    # A reply opening with these brackets and then "name" (or "type") is a call without its marker:
    # Llama 3 writes bare JSON, and a marker that is a special token is left out of the decoded text
    # (Mistral's [TOOL_CALLS], Llama's <|python_tag|>).
    bare_start: str = ""
    separators: tuple[str, ...] = ()  # between calls after one marker (Llama 3: ";")
    name_then_args: bool = False      # name[ARGS]{...} after the marker (Mistral v11)
    id_length: int = 0                # ids of this length from letters and digits (Mistral's 9)
    argument_key: str = "arguments"
    grammar_open: str = ""
    grammar_close: str = ""
    grammar_joint: str = ""

    @property
    def markers(self) -> tuple[str, ...]:
        """The format's marker strings (often special tokens, whose text the reply must keep)."""
        return self.opens + ((_ARGS_MARKER,) if self.name_then_args else ())

    def new_id(self) -> str:
        if self.id_length:
            return "".join(secrets.choice(_ID_ALPHABET) for _ in range(self.id_length))
        return "call_" + secrets.token_hex(12)

    def stream(self) -> "ToolCallStream":
        return ToolCallStream(self)

    def parse(self, text: str) -> ParsedOutput:
        """A finished reply's content and tool calls (as the stream of it adds up to)."""
        s = self.stream()
        return collect(s.feed(text) + s.finish())

    def grammar(self, tools: Sequence[Mapping[str, Any]], parallel: bool = False) -> str:
        """A Lark grammar (llguidance) for a call to one of `tools` (OpenAI function tools, as
        `check_tools` returns them), or several calls when `parallel`."""
        if not tools:
            raise ToolDefinitionError("a tool-call grammar needs at least one tool")
        lines = []
        rules = []
        for i, tool in enumerate(tools):
            fn = tool.get("function", tool)
            params = fn.get("parameters") or {"type": "object", "properties": {}}
            if self.name_then_args:
                schema = {**params, "x-guidance": _JSON_LAYOUT}
                lines.append(f"call_{i}: {json.dumps(fn['name'])} \"[ARGS]\" %json {json.dumps(schema)}")
            else:
                schema = {"type": "object",
                          "properties": {"name": {"const": fn["name"]}, self.argument_key: params},
                          "required": ["name", self.argument_key], "additionalProperties": False,
                          "x-guidance": _JSON_LAYOUT}
                lines.append(f"call_{i}: %json {json.dumps(schema)}")
            rules.append(f"call_{i}")
        lines.append("call: " + " | ".join(rules))
        one = f"{json.dumps(self.grammar_open)} call {json.dumps(self.grammar_close)}" if self.grammar_close \
            else "call"
        if self.array:
            body = 'call ("," " "? call)*' if parallel else "call"
            start = f"start: {json.dumps(self.grammar_open)} \"[\" {body} \"]\""
        elif self.name_then_args:
            start = (f"start: {json.dumps(self.grammar_open)} call"
                     + (f" ({json.dumps(self.grammar_open)} call)*" if parallel else ""))
        elif self.grammar_close:
            start = "start: one (\"\\n\" one)*" if parallel else "start: one"
            lines.append(f"one: {one}")
        else:
            joint = json.dumps(self.grammar_joint or ";")
            start = f"start: call ({joint} call)*" if parallel else "start: call"
        return "\n".join([start, *lines]) + "\n"


HERMES = ToolFormat("hermes", opens=("<tool_call>",), close="</tool_call>",
                    grammar_open="<tool_call>\n", grammar_close="\n</tool_call>")
LLAMA3 = ToolFormat("llama3", opens=("<|python_tag|>",), bare_start="{", separators=(";",),
                    argument_key="parameters", grammar_joint="; ")
MISTRAL = ToolFormat("mistral", opens=("[TOOL_CALLS]",), array=True, bare_start="[{", id_length=9,
                     grammar_open="[TOOL_CALLS]")
MISTRAL_ARGS = ToolFormat("mistral_args", opens=("[TOOL_CALLS]",), name_then_args=True, id_length=9,
                          grammar_open="[TOOL_CALLS]")
FORMATS = (HERMES, LLAMA3, MISTRAL, MISTRAL_ARGS)


def detect_format(template: ChatTemplateSource | str) -> ToolFormat | None:
    """The tool-call format a chat template teaches (a `ChatTemplate`, whose `tool_use` template
    counts when it ships one, or a template's source); None when it shows the model no tools."""
    if isinstance(template, str):
        source = template
    else:
        source = template.named_sources.get("tool_use", template.source)
    if "tools" not in source:
        return None
    if "<tool_call>" in source:
        return HERMES
    if "[TOOL_CALLS]" in source:
        return MISTRAL_ARGS if "[ARGS]" in source else MISTRAL
    if "<|python_tag|>" in source or ('"parameters"' in source and "<|start_header_id|>" in source):
        return LLAMA3
    return None


# ---- the streaming parser ---------------------------------------------------------------------
def _held_suffix(text: str, markers: Iterable[str]) -> int:
    """How many characters at the end of `text` may be the start of a marker."""
    best = 0
    for marker in markers:
        for n in range(min(len(marker) - 1, len(text)), best, -1):
            if marker.startswith(text[-n:]):
                best = n
                break
    return best


class ToolCallStream:
    """Reads a reply as it is generated: `feed(text)` and `finish()` give the deltas so far.

    Modes: "content" (looking for a marker), "open" (after a marker or a separator: the next call
    is expected), "call" (inside a call object), "after" (a call ended: a separator, the closing
    tag, or the end of the calls). Text after a marker that turns out to be no call is content."""

    def __init__(self, fmt: ToolFormat) -> None:
        self.fmt = fmt
        self.buffer = ""              # text not yet decided on
        self.mode = "content"
        self.started = False          # anything but whitespace seen (a bare JSON call must open the reply)
        self.pending_space = ""       # whitespace held until something but a call follows it
        self.in_array = False         # Mistral: inside [TOOL_CALLS] [ ... ]
        self.section_raw = ""         # text since the marker, given back as content if no call comes
        self.call: _CallObject | None = None
        self.announced = False
        self.calls = 0

    def feed(self, text: str) -> list[Delta]:
        out: list[Delta] = []
        self.buffer += text
        self._run(out, final=False)
        return _merge(out)

    def finish(self) -> list[Delta]:
        """The deltas held back, at the end of the reply (a call cut off is closed as it is)."""
        out: list[Delta] = []
        self._run(out, final=True)
        if self.mode == "call" and self.announced:
            self._close_call(out)
        elif self.mode in ("open", "call"):
            self._release(out, self.buffer)
        self.buffer = ""
        if self.pending_space and not self.calls:
            out.append(ContentDelta(self.pending_space))
        self.pending_space = ""
        return _merge(out)

    # -- helpers
    def _emit_content(self, out: list[Delta], text: str) -> None:
        body = text.rstrip()
        if body:
            out.append(ContentDelta(self.pending_space + body))
            self.pending_space = ""
            self.started = True
        self.pending_space += text[len(body):]

    def _release(self, out: list[Delta], rest: str) -> None:
        """What followed a marker was no call: it is content, as written."""
        text, self.section_raw = self.section_raw + rest, ""
        self.buffer, self.mode, self.in_array, self.call = "", "content", False, None
        if text:
            out.append(ContentDelta(self.pending_space + text))
            self.pending_space, self.started = "", True

    def _enter_section(self, raw: str) -> None:
        self.mode, self.section_raw = "open", raw
        self.started = True

    def _announce(self, out: list[Delta], name: str) -> None:
        out.append(ToolCallDelta(self.calls, "", self.fmt.new_id(), name))
        self.announced, self.section_raw, self.pending_space = True, "", ""

    def _close_call(self, out: list[Delta]) -> None:
        call = self.call
        assert call is not None
        rest = call.take_arguments()
        if not "".join(call.args_streamed).strip():
            rest = "{}"
        if rest:
            out.append(ToolCallDelta(self.calls, rest))
        self.calls += 1
        self.call, self.announced, self.mode = None, False, "after"

    def _skip_space(self) -> None:
        stripped = self.buffer.lstrip()
        if self.mode == "open":
            self.section_raw += self.buffer[:len(self.buffer) - len(stripped)]
        self.buffer = stripped

    def _run(self, out: list[Delta], final: bool) -> None:
        while self.buffer and getattr(self, "_" + self.mode)(out, final):
            pass

    # -- modes: each consumes what it can; False when it waits for more text
    def _content(self, out: list[Delta], final: bool) -> bool:
        fmt = self.fmt
        if fmt.bare_start and not self.started:
            verdict = self._bare_json(final)
            if verdict == "hold":
                return False
            if verdict == "call":
                self._enter_section("")
                return True
        found = [(self.buffer.find(m), m) for m in fmt.opens if m in self.buffer]
        if found:
            at, marker = min(found)
            self._emit_content(out, self.buffer[:at])
            self.buffer = self.buffer[at + len(marker):]
            self._enter_section(marker)
            return True
        hold = 0 if final else _held_suffix(self.buffer, fmt.opens)
        self._emit_content(out, self.buffer[:len(self.buffer) - hold])
        self.buffer = self.buffer[len(self.buffer) - hold:]
        if final and self.buffer:
            self._emit_content(out, self.buffer)
            self.buffer = ""
        return False

    def _bare_json(self, final: bool) -> str:
        """At the reply's start: "call" (the format's bare brackets, then "name" or "type"),
        "hold" (it may still be), or "no"."""
        rest = self.buffer.lstrip()
        for bracket in self.fmt.bare_start:
            if not rest:
                return "no" if final else "hold"
            if rest[0] != bracket:
                return "no"
            rest = rest[1:].lstrip()
        for key in ('"name"', '"type"'):
            if rest.startswith(key):
                return "call"
            if key.startswith(rest):
                return "no" if final else "hold"
        return "no"

    def _open(self, out: list[Delta], final: bool) -> bool:
        fmt = self.fmt
        self._skip_space()
        if not self.buffer:
            return False
        if fmt.array and not self.in_array:
            if self.buffer[0] != "[":
                self._release(out, self.buffer)
                return True
            self.in_array, self.section_raw, self.buffer = True, self.section_raw + "[", self.buffer[1:]
            return True
        if fmt.name_then_args:
            at = self.buffer.find(_ARGS_MARKER)
            head = self.buffer if at < 0 else self.buffer[:at]
            if at < 0:
                head = head[:len(head) - _held_suffix(head, (_ARGS_MARKER,))]
            if (at >= 0 or final or len(head) > 64) and not NAME_PATTERN.fullmatch(head) \
                    or head and not NAME_PATTERN.fullmatch(head):
                self._release(out, self.buffer)
                return True
            if at < 0:
                return False
            self.call = _CallObject(args_only=True)
            self.call.name = head
            self.section_raw += self.buffer[:at + len(_ARGS_MARKER)]
            self.buffer = self.buffer[at + len(_ARGS_MARKER):]
            self._announce(out, head)
            self.mode = "call"
            return True
        if self.buffer[0] != "{":
            self._release(out, self.buffer)
            return True
        self.call, self.mode = _CallObject(), "call"
        return True

    def _call(self, out: list[Delta], final: bool) -> bool:
        call = self.call
        assert call is not None
        used = 0
        for ch in self.buffer:
            call.feed_char(ch)
            used += 1
            if call.done or call.bad:
                break
            if not self.announced and call.name is not None:
                self._announce(out, call.name)
        consumed, self.buffer = self.buffer[:used], self.buffer[used:]
        if not self.announced:
            self.section_raw += consumed
        if call.bad:
            if self.announced:
                self._close_call(out)
                self.mode = "content"
                self.started = True
            else:
                self._release(out, self.buffer)
            return True
        if call.done:
            if call.name is None:
                self._release(out, self.buffer)
                return True
            if not self.announced:
                self._announce(out, call.name)
            self._close_call(out)
            return True
        if self.announced:
            piece = call.take_arguments()
            if piece:
                out.append(ToolCallDelta(self.calls, piece))
        return False

    def _after(self, out: list[Delta], final: bool) -> bool:
        fmt = self.fmt
        self._skip_space()
        if not self.buffer:
            return False
        nxt = None
        if fmt.close:
            if self.buffer.startswith(fmt.close):
                self.buffer, nxt = self.buffer[len(fmt.close):], "content"
            elif fmt.close.startswith(self.buffer) and not final:
                return False
        elif fmt.array:
            if self.buffer[0] == ",":
                self.buffer, nxt = self.buffer[1:], "open"
            elif self.buffer[0] == "]":
                self.buffer, nxt, self.in_array = self.buffer[1:], "content", False
        elif fmt.name_then_args:
            marker = fmt.opens[0]
            if self.buffer.startswith(marker):
                self.buffer, nxt = self.buffer[len(marker):], "open"
            elif marker.startswith(self.buffer) and not final:
                return False
        else:
            if self.buffer[0] in fmt.separators:
                self.buffer, nxt = self.buffer[1:], "open"
            elif self.buffer[0] == "{":
                nxt = "open"
        self.mode = nxt or "content"
        if self.mode == "content":
            self.in_array = False
            self.buffer = self.buffer.lstrip()
        self.section_raw = ""
        return True


def collect(deltas: Iterable[Delta]) -> ParsedOutput:
    """The content and calls a sequence of deltas adds up to."""
    content: list[str] = []
    calls: dict[int, list[str]] = {}
    heads: dict[int, tuple[str, str]] = {}
    for d in deltas:
        if isinstance(d, ContentDelta):
            content.append(d.text)
        else:
            if d.id is not None and d.name is not None:
                heads[d.index] = (d.id, d.name)
            calls.setdefault(d.index, []).append(d.arguments)
    return ParsedOutput("".join(content), [ToolCall(heads[i][0], heads[i][1], "".join(calls[i]) or "{}")
                                           for i in sorted(calls)])


def _merge(deltas: list[Delta]) -> list[Delta]:
    """Adjacent content deltas joined, and argument fragments of the same call joined."""
    out: list[Delta] = []
    for d in deltas:
        prev = out[-1] if out else None
        if isinstance(d, ContentDelta) and isinstance(prev, ContentDelta):
            out[-1] = ContentDelta(prev.text + d.text)
        elif (isinstance(d, ToolCallDelta) and isinstance(prev, ToolCallDelta) and d.index == prev.index
              and d.id is None):
            out[-1] = ToolCallDelta(prev.index, prev.arguments + d.arguments, prev.id, prev.name)
        elif isinstance(d, ContentDelta) and not d.text:
            continue
        else:
            out.append(d)
    return out


# ---- tool definitions from a request ----------------------------------------------------------
def check_tools(tools: Any) -> list[dict[str, Any]]:
    """OpenAI function tools from an untrusted request, as `[{"type": "function", "function":
    {"name", "description"?, "parameters", "strict"?}}]`. Takes chat completions' nested form and
    the Responses API's flat one (`{"type": "function", "name": ...}`); `ToolDefinitionError`
    names the first tool that is too large, badly named, repeated, or whose parameters are no
    JSON schema of an object."""
    import jsonschema   # noqa: PLC0415 - only requests with tools pay for it

    if not isinstance(tools, list):
        raise ToolDefinitionError("'tools' is a list of function tools")
    if len(tools) > MAX_TOOLS:
        raise ToolDefinitionError(f"'tools' has {len(tools)} tools; at most {MAX_TOOLS} are accepted")
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(tool, dict) or tool.get("type") != "function":
            kind = tool.get("type") if isinstance(tool, dict) else None
            raise ToolDefinitionError(f"{where}: only tools of type 'function' are supported"
                                      + (f" (got '{str(kind)[:40]}')" if isinstance(kind, str) else ""))
        fn = tool.get("function", tool) if "function" in tool else tool
        if not isinstance(fn, dict):
            raise ToolDefinitionError(f"{where}.function is not an object")
        try:
            size = len(json.dumps(fn, ensure_ascii=False))
        except (TypeError, ValueError, RecursionError):
            raise ToolDefinitionError(f"{where} is not plain JSON") from None
        if size > MAX_TOOL_JSON_CHARS:
            raise ToolDefinitionError(f"{where} is {size} characters of JSON; at most {MAX_TOOL_JSON_CHARS}")
        name = fn.get("name")
        if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
            raise ToolDefinitionError(f"{where}: a function's name is 1 to 64 letters, digits, '_' or '-'"
                                      + (f" (got {name[:80]!r})" if isinstance(name, str) else ""))
        if name in seen:
            raise ToolDefinitionError(f"{where}: the function name '{name}' is given twice")
        seen.add(name)
        description = fn.get("description")
        if description is not None and (not isinstance(description, str)
                                        or len(description) > MAX_DESCRIPTION_CHARS):
            raise ToolDefinitionError(f"{where} ('{name}'): the description is text of at most "
                                      f"{MAX_DESCRIPTION_CHARS} characters")
        strict = fn.get("strict")
        if strict is not None and not isinstance(strict, bool):
            raise ToolDefinitionError(f"{where} ('{name}'): 'strict' is true or false")
        params = fn.get("parameters")
        if params is None:
            params = {"type": "object", "properties": {}}
        if not isinstance(params, dict):
            raise ToolDefinitionError(f"{where} ('{name}'): 'parameters' is a JSON schema object")
        if json_depth(params) > MAX_SCHEMA_DEPTH:
            raise ToolDefinitionError(f"{where} ('{name}'): 'parameters' nests deeper than {MAX_SCHEMA_DEPTH}")
        try:
            jsonschema.Draft202012Validator.check_schema(params)
        except jsonschema.SchemaError as exc:
            raise ToolDefinitionError(f"{where} ('{name}'): 'parameters' is not a valid JSON schema: "
                                      f"{' '.join(exc.message.split())[:200]}") from None
        if params.get("type", "object") != "object":
            raise ToolDefinitionError(f"{where} ('{name}'): 'parameters' must describe an object "
                                      f"(type 'object'), not {str(params.get('type'))[:40]!r}")
        clean: dict[str, Any] = {"name": name, "parameters": params}
        if description is not None:
            clean["description"] = description
        if strict is not None:
            clean["strict"] = strict
        out.append({"type": "function", "function": clean})
    return out
