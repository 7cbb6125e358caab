"""One turn of a chat as a plain generator: a `TurnRequest` in, `TurnEvent`s out, then a
`TurnOutcome` (the generator's return value).

`run_turn(request, store, engine, cancel)` writes the user message (send / edit), asks the engine
for the reply, stores what came back (a partial reply when cancelled, the error when it failed)
and reads the chat's new state back. It runs on a worker thread (the GUI drives it through
`GeneratorWorker`); it knows nothing of Qt or of what is on screen.
"""
from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass
from typing import Any, Callable, Generator, Iterator, Literal, Sequence

from engine.api import (CancelToken, ChatEngine, ChatMessage, GenerationResult, PrefillProgress, SamplingParams,
                        SessionKind, SessionNotOpen, StreamEvent, TextChunk)
from engine.text.chat_template import NoChatTemplate
from engine.text.tool_calls import ContentDelta

from ..tools.history import Message, chat_messages, round_messages
from ..tools.toolbox import CANCELLED, DENIED, MAX_TOOL_ROUNDS, Approval, Decision, Toolbox, denied_text

from . import completion_mode
from .kv import chat_salt, kv_state_of
from .overflow import overflow_policy

Mode = Literal["send", "edit", "regenerate"]


@dataclass(frozen=True)
class TurnRequest:
    """What to do: `send` adds `text` at the end, `edit` adds it as a sibling of the edited
    message (under `parent_id`), `regenerate` writes a new reply under `parent_id`."""

    chat_id: str
    mode: Mode
    settings: Any                   # app.gui.settings.Settings (a copy: the worker owns it)
    text: str = ""
    parent_id: Any = None
    kind: SessionKind = SessionKind.REGULAR
    create: bool = False            # make the conversation first (a draft's first message)
    open_session: bool = False      # the engine has not opened this chat with this kind yet
    temporary: bool = False         # a memory-only chat: no stored salt, no stored KV state
    model_name: str | None = None   # recorded with the reply
    model_choice: str | None = None  # what the window loaded to run it: the chat goes on with it
    tools: Toolbox | None = None    # MCP tools offered to the model (its template has a tool format)


@dataclass(frozen=True)
class UserSaved:
    """The user message is stored (`row` is None for a regenerate)."""

    row: Any


@dataclass(frozen=True)
class Chunk:
    text: str
    tokens: int


@dataclass(frozen=True)
class Prefill:
    done: int
    total: int


@dataclass(frozen=True)
class ToolAsked:
    """The model called a tool: the user decides (`approval.decide`) while the turn waits."""

    approval: Approval


@dataclass(frozen=True)
class ToolRan:
    """A call ended (run, denied, failed): `record` as it is stored with the reply."""

    record: dict[str, Any]


TurnEvent = UserSaved | Chunk | Prefill | ToolAsked | ToolRan


@dataclass
class TurnOutcome:
    """How the turn ended: the chat's active path after it, the stored reply (None when nothing
    came back), the reply's figures, the engine's word on the session, the generation error."""

    rows: list[Any]
    assistant: Any
    figures: dict[str, Any] | None
    info: Any
    error: BaseException | None
    detail: Any
    text: str = ""
    note: str = ""      # a word on how the reply was written (completion mode), for the status line


def run_turn(req: TurnRequest, store: Any, engine: ChatEngine,
             cancel: CancelToken | threading.Event) -> Generator[TurnEvent, None, TurnOutcome]:
    """Run one turn; see the module docstring. Store errors propagate; engine errors end up in
    `TurnOutcome.error` with whatever text had streamed stored as the reply."""
    chat_id, settings = req.chat_id, req.settings
    if req.create and not req.temporary:
        store.create_conversation(id=chat_id, system_prompt=settings.system_prompt,
                                  model_id=engine.model_name, model_choice=req.model_choice)
    detail = store.get_conversation(chat_id)
    if req.model_choice is not None and detail.model_choice != req.model_choice:
        store.set_model(chat_id, engine.model_name, req.model_choice)   # it goes on with this model
    user = None
    if req.mode == "send":
        user = store.add_message(chat_id, "user", req.text)
    elif req.mode == "edit":
        user = store.add_message(chat_id, "user", req.text, parent_id=req.parent_id)
    path = store.active_path(chat_id)
    if req.mode == "regenerate":
        ids = [m.id for m in path]
        path = path[: ids.index(req.parent_id) + 1] if req.parent_id in ids else path
    yield UserSaved(user)
    def open_session() -> None:
        engine.open(chat_id, req.kind, chat_salt(engine, store, chat_id, detail, req.temporary))

    if req.open_session:
        open_session()
    overrides = dict(getattr(detail, "settings", None) or {})
    system = getattr(detail, "system_prompt", "") or settings.system_prompt
    messages: list[Message] = [ChatMessage("system", system)] if system else []
    messages += chat_messages(path, with_tools=req.tools is not None)
    sampling = settings.sampling.to_params(overrides.get("sampling"))
    sampling.overflow = overflow_policy(overrides, settings)
    steps: list[dict[str, Any]] = []
    shown = _Shown()
    for round_no in range(MAX_TOOL_ROUNDS + 1):     # model -> tool calls -> model ... -> its answer
        offered = req.tools if round_no < MAX_TOOL_ROUNDS else None
        reply, result, error = yield from _generate_round(
            engine, chat_id, messages, sampling, cancel, open_session, offered, shown)
        if offered is None or error is not None or cancel.is_set():
            break
        parsed = offered.fmt.parse(reply)
        if not parsed.tool_calls:
            reply = parsed.content
            break
        records = yield from _run_calls(offered, parsed.tool_calls, cancel)
        steps.append({"text": parsed.content, "calls": records})
        reply = ""
        if any(r["status"] == CANCELLED for r in records):
            break
        messages += round_messages(parsed.content, records)
    figures = result.figures.to_dict() if result is not None else None
    if figures is not None and cancel.is_set():
        figures["finish_reason"] = "cancelled"
    assistant = None
    if reply or result is not None or steps:
        assistant = store.add_message(chat_id, "assistant", reply,
                                      parent_id=user.id if user else req.parent_id,
                                      figures=figures, model_name=req.model_name, tool_steps=steps or None)
    rows = store.active_path(chat_id)
    try:
        info = engine.info(chat_id)
    except Exception:  # noqa: BLE001 - a session the engine no longer has: nothing to show
        info = None
    if info is not None and not req.temporary:
        store.set_kv_state(chat_id, *kv_state_of(info))
    return TurnOutcome(rows=rows, assistant=assistant, figures=figures, info=info, error=error,
                       detail=store.get_conversation(chat_id), text=reply, note=shown.note)


class _CompletionMode:
    """Yielded by `_reply` before a reply written in completion mode."""


def _content(deltas: Sequence[Any]) -> str:
    return "".join(d.text for d in deltas if isinstance(d, ContentDelta))


@dataclass
class _Shown:
    """What the window was sent of the reply: a round after tool calls starts a new paragraph."""

    text: str = ""
    round_started: bool = False
    note: str = ""     # a line for the status bar (completion mode)

    def chunk(self, text: str, tokens: int) -> Chunk:
        if self.text and not self.round_started:
            text = "\n\n" + text
        self.text, self.round_started = self.text + text, True
        return Chunk(text, tokens)


def _generate_round(engine: ChatEngine, chat_id: str, messages: Sequence[Message], sampling: SamplingParams,
                    cancel: CancelToken, open_session: Callable[[], None], offered: Toolbox | None,
                    shown: _Shown) -> Generator[TurnEvent, None, tuple[str, GenerationResult | None,
                                                                       BaseException | None]]:
    """One generation: its text streams to the window (with tools offered, through the format's
    parser, so call markup never shows); returns the whole text, the result and the error."""
    parser = offered.fmt.stream() if offered is not None else None
    if offered is not None:     # its call markers may be special tokens: their text must reach the parser
        sampling = dataclasses.replace(sampling, keep_special=offered.fmt.markers)
    shown.round_started = False
    reply, result, error = "", None, None
    try:
        for ev in _reply(engine, chat_id, messages, sampling, cancel, open_session,
                         offered.schemas() if offered is not None else None):
            if isinstance(ev, _CompletionMode):
                shown.note = completion_mode.note(engine.model_name)
            elif isinstance(ev, TextChunk):
                reply += ev.text
                text = ev.text if parser is None else _content(parser.feed(ev.text))
                if text:
                    yield shown.chunk(text, len(ev.token_ids))
            elif isinstance(ev, PrefillProgress):
                yield Prefill(ev.done, ev.total)
            elif isinstance(ev, GenerationResult):
                result = ev
    except Exception as exc:  # noqa: BLE001 - reported with the (partial) reply
        error = exc
    if result is not None and result.text and len(result.text) >= len(reply):
        reply = result.text
    if parser is not None and error is None and not cancel.is_set():
        tail = _content(parser.finish())     # text held back in case it began a call
        if tail:
            yield shown.chunk(tail, 0)
    return reply, result, error


def _run_calls(toolbox: Toolbox, calls: Sequence[Any], cancel: CancelToken
               ) -> Generator[TurnEvent, None, list[dict[str, Any]]]:
    """Each call the model wrote: asked (unless approved for good), then run or denied."""
    records: list[dict[str, Any]] = []
    for raw in calls:
        call = toolbox.proposed(raw)
        decision: Decision | None = Decision.ONCE
        # nothing to approve where nothing can run: an unknown tool, arguments that are no object
        if call.server is not None and call.arguments is not None and not toolbox.allowed(call):
            approval = Approval(call)
            yield ToolAsked(approval)
            decision = approval.wait(cancel)
        if decision is None:
            record = call.record(CANCELLED, "The turn was stopped before the call was allowed.")
        elif decision is Decision.DENY:
            record = call.record(DENIED, denied_text(call))
        else:
            if decision is Decision.ALWAYS and call.server is not None:
                toolbox.always.add((call.server, call.name))
            record = call.record(*toolbox.run(call))
        records.append(record)
        yield ToolRan(record)
        if decision is None:
            break
    return records


def _reply(engine: ChatEngine, chat_id: str, messages: Sequence[Message], sampling: SamplingParams,
           cancel: CancelToken, open_session: Callable[[], None],
           tools: list[dict[str, Any]] | None = None) -> Iterator[StreamEvent | _CompletionMode]:
    """The engine's reply. A session the engine does not have open although the window thought
    so (closed meanwhile, say) is opened and asked once more: a stale record never makes every
    later message of the chat fail. A model without a chat template continues the chat's text
    (app.chat.completion_mode) where the engine takes text prompts; elsewhere its refusal stands."""
    def ask() -> tuple[Iterator[StreamEvent], bool]:
        try:
            if tools:
                return iter(engine.generate(chat_id, messages, sampling, cancel, tools=tools)), False
            return iter(engine.generate(chat_id, messages, sampling, cancel)), False
        except NoChatTemplate:
            if not engine.capabilities.token_prompts:
                raise
        tokens: Any = engine      # a TokenEngine (capabilities.token_prompts)
        prompt = tokens.encode_prompt(completion_mode.transcript(messages))
        return iter(tokens.generate_tokens(chat_id, prompt, sampling, cancel)), True

    first: StreamEvent | None
    try:      # an engine may raise at the call or at the first event
        events, completing = ask()
        first = next(events, None)
    except SessionNotOpen:
        open_session()
        events, completing = ask()
        first = next(events, None)
    if completing:
        yield _CompletionMode()
    if first is not None:
        yield first
    yield from events


def drain(gen: Generator[TurnEvent, None, TurnOutcome]) -> tuple[list[TurnEvent], TurnOutcome]:
    """Run a turn to the end (the CLI, tests): its events and its outcome."""
    events: list[TurnEvent] = []
    while True:
        try:
            events.append(next(gen))
        except StopIteration as stop:
            return events, stop.value
