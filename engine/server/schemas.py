"""Request bodies of the OpenAI endpoints, validated strictly (wrong types are a 400, not coerced)."""
from __future__ import annotations

import json

from typing import Annotated, Any, Literal

from pydantic import (BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, field_validator,
                      model_validator)
from pydantic_core import PydanticCustomError

from engine.api import ChatMessage, OverflowPolicy, SamplingParams
from .errors import ApiError
from .tools import ToolRequest, tool_request

MAX_MESSAGES = 4096
MAX_STOP = 16           # OpenAI allows 4; clients (agent frameworks) send more
MAX_STOP_CHARS = 256
MAX_SALT_CHARS = 256
MAX_ID_CHARS = 128
MAX_CHOICES = 8         # n: choices decoded together for one request
MAX_TOP_LOGPROBS = 20   # OpenAI's bound for top_logprobs (and for completions' logprobs here)
MAX_LOGIT_BIAS = 1024   # entries in one logit_bias map
MAX_NAME_CHARS = 64     # a function's name (OpenAI's bound)
MAX_TOOL_CALLS = 128    # tool calls in one assistant message

Number = StrictFloat | StrictInt
Penalty = Annotated[Number, Field(ge=-2.0, le=2.0)]


class _Body(BaseModel):
    # Unknown fields are ignored (clients send many); known ones are checked strictly.
    model_config = ConfigDict(extra="allow", strict=True)


def _lone_surrogate(body: Any) -> tuple[str, str] | None:
    """The first string (or key) in a parsed JSON body holding a lone surrogate, a `"\\ud800"`
    escape that is no Unicode text: (its path, the surrogate as an escape). A loop, not recursion:
    the body may be nested as deep as the JSON parser allows."""
    stack: list[tuple[str, Any]] = [("", body)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, dict):
            items = list(value.items())
            keys = [(path, k) for k, _ in items]
            stack.extend((f"{path}.{k}" if path else str(k), v) for k, v in reversed(items))
            stack.extend(reversed(keys))
        elif isinstance(value, list):
            stack.extend((f"{path}.{i}" if path else str(i), v) for i, v in reversed(list(enumerate(value))))
        elif isinstance(value, str) and not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:     # only a surrogate cannot be encoded
                return path, f"\\u{ord(value[exc.start]):04x}"
    return None


class _Request(_Body):
    """A request body: its text must be Unicode. A JSON string may carry a lone surrogate (an
    escape such as `"\\ud800"`), which no tokenizer takes and no UTF-8 answer can echo: refused
    (400, naming the field), never replaced, as the CLI refuses arguments that are not UTF-8."""

    @model_validator(mode="before")
    @classmethod
    def _unicode(cls, data: Any) -> Any:
        found = _lone_surrogate(data)
        if found is not None:
            path, escape = found
            where = f"'{path}'" if path else "the body"
            raise PydanticCustomError("invalid_unicode", "{where} is not valid Unicode text (a lone surrogate "
                                      "{escape}): send UTF-8 text", {"where": where, "escape": escape,
                                                                      "param": path or None})
        return data


class StreamOptions(_Body):
    include_usage: StrictBool = False


class _Sampling(_Request):
    model: StrictStr
    temperature: Annotated[Number, Field(ge=0.0, le=2.0)] | None = None
    top_p: Annotated[Number, Field(ge=0.0, le=1.0)] | None = None
    seed: StrictInt | None = None
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    stream: StrictBool = False
    cache_salt: Annotated[StrictStr, Field(min_length=1, max_length=MAX_SALT_CHARS)] | None = None

    def sampling(self, max_new_tokens: int, stop: list[str], choice: int = 0) -> SamplingParams:
        """The engine's parameters for choice number `choice` (each choice of `n` draws with a seed
        of its own: the request's seed plus its index, or fresh entropy without one)."""
        top_p = None if self.top_p is None else float(self.top_p)
        # OpenAI allows top_p = 0 (only the most likely token); the engine's nucleus needs > 0.
        greedy = top_p == 0.0
        seed = None if self.seed is None else (self.seed + choice) % (1 << 63)   # OpenAI allows negative seeds
        return SamplingParams(temperature=None if self.temperature is None else float(self.temperature),
                              top_p=None if greedy else top_p, seed=seed, greedy=greedy,
                              presence_penalty=None if self.presence_penalty is None else float(self.presence_penalty),
                              frequency_penalty=None if self.frequency_penalty is None
                              else float(self.frequency_penalty),
                              max_new_tokens=max_new_tokens, stop=stop,
                              logit_bias=self.bias(), logprobs=self.top_logprobs_wanted(),
                              # an API caller is told the prompt is too long (400), never silently cut
                              overflow=OverflowPolicy.STOP.value)

    def bias(self) -> dict[int, float] | None:
        """`logit_bias` by token id (endpoints without one: None)."""
        return None

    def top_logprobs_wanted(self) -> int | None:
        """How many alternatives each token's log-probability comes with (None: no logprobs)."""
        return None


def _stop_list(stop: str | list[str] | None) -> list[str]:
    if stop is None:
        return []
    items = [stop] if isinstance(stop, str) else list(stop)
    if len(items) > MAX_STOP:
        raise ApiError(400, f"'stop' takes at most {MAX_STOP} strings, got {len(items)}", "stop")
    for s in items:
        if not s or len(s) > MAX_STOP_CHARS:
            raise ApiError(400, f"each stop string must have 1 to {MAX_STOP_CHARS} characters", "stop")
    return items


class TextPart(_Body):
    type: Literal["text", "input_text", "output_text"]
    text: StrictStr


class FunctionCall(_Body):
    name: Annotated[StrictStr, Field(min_length=1, max_length=MAX_NAME_CHARS)]
    arguments: StrictStr = "{}"


class MessageToolCall(_Body):
    """A tool call of an earlier assistant message (chat completions' history)."""
    id: Annotated[StrictStr, Field(min_length=1, max_length=MAX_ID_CHARS)]
    type: Literal["function"] = "function"
    function: FunctionCall


class Message(_Body):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: StrictStr | list[TextPart] | None = None
    type: Literal["message"] | None = None
    tool_calls: Annotated[list[MessageToolCall], Field(max_length=MAX_TOOL_CALLS)] | None = None
    tool_call_id: Annotated[StrictStr, Field(min_length=1, max_length=MAX_ID_CHARS)] | None = None

    @model_validator(mode="after")
    def _tool_fields(self) -> "Message":
        if self.role == "tool" and self.tool_call_id is None:
            raise PydanticCustomError("tool_call_id", "a message of role 'tool' needs the 'tool_call_id' "
                                      "of the call it answers", {})
        if self.tool_calls and self.role != "assistant":
            raise PydanticCustomError("tool_calls", "only assistant messages carry 'tool_calls'", {})
        return self

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content)

    def to_chat(self) -> ChatMessage:
        # The chat templates know system, user and assistant; OpenAI's developer role is the system's.
        return ChatMessage("system" if self.role == "developer" else self.role, self.text())

    def to_template(self) -> dict[str, Any]:
        """The message as transformers' chat templates take it (tool calls and results included)."""
        out: dict[str, Any] = self.to_chat().to_dict()
        if self.tool_calls:
            out["tool_calls"] = [template_call(c.id, c.function.name, c.function.arguments)
                                 for c in self.tool_calls]
            if self.content is None:
                out["content"] = None
        if self.role == "tool":
            out["tool_call_id"] = self.tool_call_id
        return out


def template_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    """A tool call as chat templates take it: `arguments` as an object (templates write it with
    `tojson`), the text itself when it is no JSON object."""
    try:
        parsed = json.loads(arguments)
    except (ValueError, RecursionError):     # not JSON, or nested past the parser's depth
        parsed = None
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": parsed if isinstance(parsed, dict) else arguments}}


class FunctionCallItem(_Body):
    """A Responses input item: a function call the model made."""
    type: Literal["function_call"]
    call_id: Annotated[StrictStr, Field(min_length=1, max_length=MAX_ID_CHARS)]
    name: Annotated[StrictStr, Field(min_length=1, max_length=MAX_NAME_CHARS)]
    arguments: StrictStr
    id: Annotated[StrictStr, Field(max_length=MAX_ID_CHARS)] | None = None
    status: StrictStr | None = None


class FunctionCallOutputItem(_Body):
    """A Responses input item: a function call's result."""
    type: Literal["function_call_output"]
    call_id: Annotated[StrictStr, Field(min_length=1, max_length=MAX_ID_CHARS)]
    output: StrictStr | list[TextPart]
    id: Annotated[StrictStr, Field(max_length=MAX_ID_CHARS)] | None = None
    status: StrictStr | None = None

    def text(self) -> str:
        return self.output if isinstance(self.output, str) else "".join(p.text for p in self.output)


def _unsupported(body: BaseModel, *names: str) -> None:
    """Features Amber does not serve: a clear 400, not a silently different answer."""
    extra = body.model_extra or {}
    for name in names:
        value = extra.get(name)
        if value not in (None, False, [], {}, "none", "auto", 0):
            raise ApiError(400, f"'{name}' is not supported by Amber's server", name)


class _Choices(_Sampling):
    """`n`, `logit_bias` and `stream_options`, shared by chat completions and completions."""
    n: StrictInt = 1
    logit_bias: dict[StrictStr, Number] | None = None
    stream_options: StreamOptions | None = None

    @field_validator("n")
    @classmethod
    def _choices(cls, n: int) -> int:
        if not 1 <= n <= MAX_CHOICES:
            raise ValueError(f"n is the number of choices, 1 to {MAX_CHOICES} here; got {n}")
        return n

    @field_validator("logit_bias")
    @classmethod
    def _bias(cls, bias: dict[str, float | int] | None) -> dict[str, float | int] | None:
        if bias is None:
            return None
        if len(bias) > MAX_LOGIT_BIAS:
            raise ValueError(f"takes at most {MAX_LOGIT_BIAS} token ids, got {len(bias)}")
        for key, value in bias.items():
            if not (key.isascii() and key.isdigit() and len(key) <= 10):
                raise ValueError(f"maps token ids (whole numbers >= 0, as strings) to biases; got the key "
                                 f"{key[:20]!r}")
            if not -100 <= value <= 100:
                raise ValueError(f"biases are in [-100, 100]; token {key} has {value}")
        return bias

    def bias(self) -> dict[int, float] | None:
        return None if not self.logit_bias else {int(k): float(v) for k, v in self.logit_bias.items()}


class _ToolFields(_Request):
    """`tools`, `tool_choice` and `parallel_tool_calls` (checked by `tool_settings`)."""
    tools: list[Any] | None = None
    tool_choice: StrictStr | dict[str, Any] | None = None
    parallel_tool_calls: StrictBool | None = None

    def tool_settings(self) -> ToolRequest:
        return tool_request(self.tools, self.tool_choice, self.parallel_tool_calls)


class ChatCompletionRequest(_Choices, _ToolFields):
    messages: Annotated[list[Message], Field(min_length=1, max_length=MAX_MESSAGES)]
    max_tokens: Annotated[StrictInt, Field(ge=1)] | None = None
    max_completion_tokens: Annotated[StrictInt, Field(ge=1)] | None = None
    stop: StrictStr | list[StrictStr] | None = None
    logprobs: StrictBool | None = None
    top_logprobs: Annotated[StrictInt, Field(ge=0, le=MAX_TOP_LOGPROBS)] | None = None

    def check(self) -> None:
        _unsupported(self, "functions", "audio")
        if self.top_logprobs is not None and not self.logprobs:
            raise ApiError(400, "'top_logprobs' needs 'logprobs': true", "top_logprobs")

    def top_logprobs_wanted(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None

    def wanted_tokens(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

    def stop_list(self) -> list[str]:
        return _stop_list(self.stop)


class CompletionRequest(_Choices):
    prompt: StrictStr | Annotated[list[StrictInt], Field(min_length=1)] | Annotated[
        list[StrictStr], Field(min_length=1, max_length=1)]
    max_tokens: Annotated[StrictInt, Field(ge=1)] | None = 16      # OpenAI's default for completions
    stop: StrictStr | list[StrictStr] | None = None
    logprobs: Annotated[StrictInt, Field(ge=0, le=MAX_TOP_LOGPROBS)] | None = None

    def check(self) -> None:
        _unsupported(self, "echo", "suffix")
        extra = self.model_extra or {}
        if extra.get("best_of") not in (None, 1):
            raise ApiError(400, "only best_of=1 is supported", "best_of")

    def top_logprobs_wanted(self) -> int | None:
        return self.logprobs

    def stop_list(self) -> list[str]:
        return _stop_list(self.stop)


InputItem = Annotated[Message | FunctionCallItem | FunctionCallOutputItem, Field(union_mode="left_to_right")]


class ResponseRequest(_Sampling, _ToolFields):
    input: StrictStr | Annotated[list[InputItem], Field(min_length=1, max_length=MAX_MESSAGES)]
    instructions: StrictStr | None = None
    previous_response_id: Annotated[StrictStr, Field(min_length=1, max_length=MAX_ID_CHARS)] | None = None
    store: StrictBool = True
    max_output_tokens: Annotated[StrictInt, Field(ge=1)] | None = None

    def check(self) -> None:
        _unsupported(self, "reasoning", "background", "conversation")

    def messages(self) -> list[dict[str, Any]]:
        """The input as template messages: function calls join the assistant message before them
        (or make one), their outputs are messages of role "tool"."""
        if isinstance(self.input, str):
            return [ChatMessage("user", self.input).to_dict()]
        out: list[dict[str, Any]] = []
        for item in self.input:
            if isinstance(item, FunctionCallItem):
                last = out[-1] if out else None
                if last is None or last["role"] != "assistant":
                    last = {"role": "assistant", "content": None}
                    out.append(last)
                last.setdefault("tool_calls", []).append(template_call(item.call_id, item.name, item.arguments))
            elif isinstance(item, FunctionCallOutputItem):
                out.append({"role": "tool", "content": item.text(), "tool_call_id": item.call_id})
            else:
                out.append(item.to_template())
        return out


def dump(obj: Any) -> Any:
    """JSON-ready copy of a model (or a plain value)."""
    return obj.model_dump() if isinstance(obj, BaseModel) else obj
