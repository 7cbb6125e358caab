"""Rendering a model's chat template into the prompt text, as Hugging Face does.

Models ship a Jinja2 chat template (`chat_template.jinja`, or `chat_template` in
`tokenizer_config.json`). `ChatTemplate.render` reproduces `tokenizer.apply_chat_template(...,
tokenize=False)`: the same sandboxed Jinja2 environment (`ImmutableSandboxedEnvironment` with
`trim_blocks`, `lstrip_blocks` and the `loopcontrols` extension), the same helpers
(`raise_exception`, `strftime_now`, a `tojson` filter that does not HTML-escape, the
`{% generation %}` block used by training templates), and the same variables: `messages`,
`add_generation_prompt`, `tools` / `documents` (None), the special-token strings
(`bos_token`, `eos_token`, ...) and any extra keyword arguments.

A template that fails to compile or render raises `ChatTemplateError`, whose message names the
model and the cause (including a message passed to `raise_exception` by the template).

The messages reach the template as transformers 5 passes them (`_normalize_chat_messages` and
`_alias_reasoning_fields` of `transformers.utils.chat_template_utils`): keys whose value is None are
dropped (an assistant turn holding only tool calls has no `content`), and reasoning given as
`reasoning_content`, `thinking` or `reasoning` is under both `reasoning_content` and `thinking`.
Nothing else is rewritten: an assistant turn's `<think>…</think>` goes to the template as written,
and the template decides what of it to show. transformers 4.57 passes messages untouched, so the
two releases agree exactly when the caller already sends the normalized form; `normalized_messages`
is that form (tests/engine/text/test_template_sweep.py renders both releases over real templates).
"""
from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any, Mapping, Sequence

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

from engine.api import ChatMessage

# Special-token entries of tokenizer_config.json that HF passes to the template.
_SPECIAL_TOKEN_KEYS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                       "cls_token", "mask_token")


class ChatTemplateError(Exception):
    """A chat template could not be found, compiled or rendered; the message names the model."""


class NoChatTemplate(ChatTemplateError):
    """The model ships no chat template (a base model): it continues text, it does not chat."""

    def __init__(self, model_name: str):
        super().__init__(f"{model_name} has no chat template; use /v1/completions")
        self.model_name = model_name


class _TemplateRaised(jinja2.TemplateError):
    """What `raise_exception(message)` raises inside a template."""


def _raise_exception(message: Any) -> None:
    raise _TemplateRaised(str(message))


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    # Jinja's own `tojson` HTML-escapes (<, >, &, ') and sorts keys; HF's does neither.
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


class _GenerationBlock(Extension):
    """`{% generation %}...{% endgeneration %}` marks assistant text for training masks in HF
    (`return_assistant_tokens_mask`). For rendering it is transparent."""
    tags = {"generation"}

    def parse(self, parser: Any) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_body", []), [], [], body).set_lineno(lineno)

    def _body(self, caller: Any) -> str:
        body: str = caller()
        return body


class _TemplateDict:
    """The `dict` a template may call: construction only, no attribute to reach Python's type."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict.fromkeys(*args, **kwargs)


class _TemplateNamespace(jinja2.utils.Namespace):
    """`namespace(...)` refusing underscore names, which could reach CPython internals."""

    def __init__(*args: Any, **kwargs: Any) -> None:   # Jinja's signature: `namespace(self=...)` works
        self, rest = args[0], args[1:]
        for name in dict(*rest, **kwargs):
            _TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__init__(self, *rest, **kwargs)

    def __setitem__(self, name: str, value: Any) -> None:
        _TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check_name(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(
                f"a chat template may not store underscore-prefixed attributes on a namespace ({name!r})")


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[_GenerationBlock, loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["dict"] = _TemplateDict()
    env.globals["namespace"] = _TemplateNamespace
    return env


# The names a message's reasoning comes under; templates read `reasoning_content` (Qwen3, R1 and
# most others) or `thinking` (gpt-oss).
_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


def _message_dict(message: ChatMessage | Mapping[str, Any]) -> dict[str, Any]:
    """One message as transformers 5 hands it to the template (see the module's docstring)."""
    if isinstance(message, ChatMessage):
        message = message.to_dict()
    if not isinstance(message, Mapping):
        raise TypeError(f"a chat message must be a ChatMessage or a mapping, got {type(message)!r}")
    out = {key: value for key, value in message.items() if value is not None}
    reasoning = next((out[key] for key in _REASONING_FIELDS if key in out), None)
    if reasoning is not None:
        out = {"thinking": reasoning, **out, "reasoning_content": reasoning}
    return out


def normalized_messages(messages: Sequence[ChatMessage | Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The messages as the template sees them: the form both transformers 4.57 and 5 render alike."""
    return [_message_dict(m) for m in messages]


class ChatTemplate:
    """One compiled chat template, bound to a model's special tokens."""

    def __init__(self, template_source: str, *, bos_token: str = "", eos_token: str = "",
                 model_name: str = "model", special_tokens: Mapping[str, Any] | None = None,
                 origin: str = "given", named: Mapping[str, str] | None = None):
        self.source = template_source
        # Other named templates the model ships (e.g. "tool_use"): rendered instead of the default
        # when tools are given and one is named "tool_use", as transformers' get_chat_template does.
        self.named_sources = {name: text for name, text in (named or {}).items() if name != "default"}
        self.named = {name: self._compile(text, model_name, name) for name, text in self.named_sources.items()}
        self.model_name = model_name
        self.origin = origin  # where the template came from (for diagnostics)
        # Template variables: any special tokens (unk_token, pad_token, ...), then bos/eos.
        self.variables: dict[str, Any] = dict(special_tokens or {})
        self.variables["bos_token"] = bos_token
        self.variables["eos_token"] = eos_token
        self._template = self._compile(template_source, model_name, "")

    @staticmethod
    def _compile(source: str, model_name: str, name: str) -> jinja2.Template:
        try:
            return _environment().from_string(source)
        except jinja2.TemplateSyntaxError as exc:
            which = f" '{name}'" if name else ""
            raise ChatTemplateError(
                f"The chat template{which} of {model_name} is not valid Jinja (line {exc.lineno}): "
                f"{exc.message}") from exc

    @property
    def bos_token(self) -> str:
        token: str = self.variables["bos_token"]
        return token

    @property
    def eos_token(self) -> str:
        token: str = self.variables["eos_token"]
        return token

    def render(self, messages: Sequence[ChatMessage | Mapping[str, Any]],
               add_generation_prompt: bool = True, **extra: Any) -> str:
        """The prompt text for `messages`, as HF's `apply_chat_template(tokenize=False)`.

        `extra` become template variables too (e.g. `tools=[...]`, `date_string=...`,
        `enable_thinking=False`) and override the special-token variables of the same name.
        """
        context: dict[str, Any] = {"tools": None, "documents": None}
        context.update(self.variables)
        context.update(extra)
        template = self._template
        if context.get("tools") is not None and "tool_use" in self.named:
            template = self.named["tool_use"]
        context["messages"] = normalized_messages(messages)
        context["add_generation_prompt"] = add_generation_prompt
        try:
            return template.render(**context)
        except _TemplateRaised as exc:
            raise ChatTemplateError(
                f"The chat template of {self.model_name} refused these messages: "
                f"{exc.message}") from exc
        except jinja2.TemplateError as exc:   # UndefinedError, SecurityError, ...
            raise ChatTemplateError(
                f"The chat template of {self.model_name} failed to render: "
                f"{type(exc).__name__}: {exc}") from exc
        except Exception as exc:  # a template can raise anything (TypeError, ZeroDivision...)
            raise ChatTemplateError(
                f"The chat template of {self.model_name} failed to render: "
                f"{type(exc).__name__}: {exc}") from exc


def token_string(value: Any) -> str | None:
    """A special token as tokenizer_config.json stores it: a string or {"content": ...}."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        content: str = value["content"]
        return content
    return None


def _named_templates(value: Any) -> dict[str, str]:
    """The {name: template} of a list of {name, template} (other entries ignored)."""
    if not isinstance(value, list):
        return {}
    return {item["name"]: item["template"] for item in value if isinstance(item, Mapping)
            and isinstance(item.get("name"), str) and isinstance(item.get("template"), str)}


MAX_EXTRA_TEMPLATES = 32          # additional_chat_templates/*.jinja read at most
MAX_TEMPLATE_BYTES = 1 << 20


def _additional_templates(model_dir: Path, model_name: str) -> dict[str, str]:
    """`additional_chat_templates/<name>.jinja` (transformers 5's layout for named templates)."""
    folder = model_dir / "additional_chat_templates"
    if not folder.is_dir():
        return {}
    out: dict[str, str] = {}
    for path in sorted(folder.glob("*.jinja"))[:MAX_EXTRA_TEMPLATES]:
        try:
            if not path.is_file() or path.stat().st_size > MAX_TEMPLATE_BYTES:
                raise ChatTemplateError(f"additional_chat_templates/{path.name} of {model_name} "
                                        f"is not a regular file of at most {MAX_TEMPLATE_BYTES} bytes")
            out[path.stem] = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ChatTemplateError(f"Could not read additional_chat_templates/{path.name} of "
                                    f"{model_name}: {exc}") from exc
    return out


def _pick_template(value: Any, model_name: str) -> str | None:
    """`chat_template` of tokenizer_config.json: a string, or a list of {name, template}."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list):
        named = {item.get("name"): item.get("template") for item in value
                 if isinstance(item, Mapping)}
        if isinstance(named.get("default"), str):
            return named["default"]
        raise ChatTemplateError(
            f"{model_name} has several chat templates ({', '.join(map(str, named))}) "
            f"but none named 'default'")
    raise ChatTemplateError(f"{model_name}'s chat_template has an unexpected type "
                            f"({type(value).__name__})")


def load_chat_template(model_dir: Path, model_name: str) -> ChatTemplate:
    """The chat template of the model in `model_dir`.

    Looks for `chat_template.jinja`, then `chat_template.json` ({"chat_template": ...}), then
    `chat_template` in `tokenizer_config.json` (a string, or a list of named templates of which
    "default" is used). Other named templates (the list's, or `additional_chat_templates/*.jinja`)
    are kept: `tool_use` renders instead when tools are given. Special-token strings come from
    `tokenizer_config.json`. A model with no template at all (a base model) raises `NoChatTemplate`:
    it can only continue text, and a made-up chat format would only make it ramble.
    """
    model_dir = Path(model_dir)

    def read_json(name: str) -> dict[str, Any]:
        path = model_dir / name
        if not path.is_file():
            return {}
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ChatTemplateError(f"Could not read {name} of {model_name}: {exc}") from exc
        if not isinstance(data, dict):
            raise ChatTemplateError(f"{name} of {model_name} is not a JSON object")
        return data

    config = read_json("tokenizer_config.json")
    special: dict[str, Any] = {key: tok for key in _SPECIAL_TOKEN_KEYS
               if (tok := token_string(config.get(key))) is not None}
    extra_specials = config.get("additional_special_tokens")
    if isinstance(extra_specials, list):
        special["additional_special_tokens"] = [
            t for t in map(token_string, extra_specials) if t is not None]

    source: str | None = None
    origin = ""
    named = _additional_templates(model_dir, model_name)
    jinja_path = model_dir / "chat_template.jinja"
    if jinja_path.is_file():
        try:
            source = jinja_path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ChatTemplateError(
                f"Could not read chat_template.jinja of {model_name}: {exc}") from exc
        origin = "chat_template.jinja"
    if source is None:
        value = read_json("chat_template.json").get("chat_template")
        source = _pick_template(value, model_name)
        origin = "chat_template.json" if source is not None else origin
        named = {**_named_templates(value), **named}
    if source is None:
        source = _pick_template(config.get("chat_template"), model_name)
        origin = "tokenizer_config.json" if source is not None else origin
        named = {**_named_templates(config.get("chat_template")), **named}
    if source is None:
        raise NoChatTemplate(model_name)

    return ChatTemplate(source, bos_token=special.pop("bos_token", ""),
                        eos_token=special.pop("eos_token", ""), model_name=model_name,
                        special_tokens=special, origin=origin, named=named)
