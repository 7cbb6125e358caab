"""POST /v1/chat/completions and POST /v1/completions (stateless: the prefix cache carries reuse)."""
from __future__ import annotations

import functools
import json
import threading
import time
import uuid
from typing import Any, AsyncIterator, Callable, Iterator, Sequence

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from engine.api import ChatMessage, GenerationResult, OutputConstraint, TextChunk, TokenLogprob
from engine.text.tool_calls import ToolFormat
from .errors import ApiError, sse_error
from .formats import chat_constraint, check_engine
from .logprobs import LegacyLogprobs, chat_logprobs
from .schemas import ChatCompletionRequest, CompletionRequest
from .choices import Choices, computed_once
from . import tools
from .tools import constrained, name_tool_results
from .service import Service, amber_figures, chat_usage, finish_reason

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def sse(obj: Any) -> bytes:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n".encode()


def stream_sse(choices: Choices, chunk: Callable[[int, TextChunk | None, str | None], list[dict[str, Any]]],
               usage_chunk: Callable[[list[GenerationResult]], dict[str, Any]] | None,
               first: Sequence[dict[str, Any]] = ()) -> StreamingResponse:
    """Server-sent events: `first` (if any), the chunks of each text piece of each choice (none
    while a tool call's start is held back), each choice's finishing chunks, the usage chunk if
    asked, then `data: [DONE]`. Leaving early (client gone) cancels the generations."""

    async def body() -> AsyncIterator[bytes]:
        results: dict[int, GenerationResult] = {}
        try:
            for item in first:
                yield sse(item)
            async for index, event in choices.events():
                if isinstance(event, TextChunk):
                    if event.text or event.logprobs:
                        for item in chunk(index, event, None):
                            yield sse(item)
                else:
                    results[index] = event
                    for item in chunk(index, None, finish_reason(event.figures.finish_reason)):
                        yield sse(item)
                    if usage_chunk is not None and len(results) == choices.n:
                        yield sse(usage_chunk([results[i] for i in range(len(results))]))
        except ApiError as exc:
            yield sse_error(exc)
        finally:
            choices.cancel()       # no-op when finished; stops the generations if the client left
        yield b"data: [DONE]\n\n"

    return StreamingResponse(body(), media_type="text/event-stream", headers=SSE_HEADERS)


def usage(results: Sequence[GenerationResult]) -> dict[str, Any]:
    """The usage of a request's choices: the prompt once, every choice's tokens."""
    out = chat_usage(results[0])
    completion = sum(r.figures.generated_tokens for r in results)
    out["completion_tokens"] = completion
    out["total_tokens"] = out["prompt_tokens"] + completion
    return out


def router(service: Service) -> APIRouter:
    r = APIRouter()

    def starts(body: ChatCompletionRequest | CompletionRequest, salt: str, encode: Callable[[], list[int] | None],
               wanted: int | None, stop: list[str], messages: Sequence[ChatMessage] | None = None,
               fmt: ToolFormat | None = None,
               constraint: OutputConstraint | None = None,
               output: OutputConstraint | None = None) -> list[Callable[[threading.Event], Iterator[Any]]]:
        """`constraint`: a forced tool call's (it wins); `output`: response_format's. One start for
        all `body.n` choices where the engine takes token prompts, one each otherwise."""
        service.check_options(body.top_logprobs_wanted(), body.bias())
        check_engine(service, output, "response_format")
        encode = computed_once(encode)
        samplings = [constrained(functools.partial(body.sampling, stop=stop, choice=i, constraint=output),
                                 fmt, constraint) for i in range(body.n)]
        if body.n > 1 and service.tokens is not None:      # one generation: the prompt prefilled once
            return [service.stateless_choices(salt, encode, wanted, samplings)]
        return [service.stateless(salt, encode, wanted, sampling, messages) for sampling in samplings]

    @r.post("/v1/chat/completions")
    async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
        caller = service.caller(request)
        service.check_model(body.model)
        body.check()
        stop = body.stop_list()
        tooling = body.tool_settings()
        fmt = service.tool_format(tooling)
        messages = [m.to_chat() for m in body.messages]
        output = await chat_constraint(body.response_format)
        encode = service.encode_chat(name_tool_results([m.to_template() for m in body.messages]), tooling.offered)
        choices = await Choices.submit(service, caller, starts(body, caller.salt(body.cache_salt), encode,
                                                               body.wanted_tokens(), stop, messages, fmt,
                                                               tools.constraint(fmt, tooling), output), request,
                                       body.n)
        rid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        token_bytes = service.token_bytes if body.top_logprobs_wanted() is not None else None

        def logprobs(entries: Sequence[TokenLogprob]) -> dict[str, Any] | None:
            return None if token_bytes is None else chat_logprobs(token_bytes, entries)

        if not body.stream:
            results = await choices.collect()
            replies = [tools.chat_message(result.text, fmt, tooling.parallel) for result in results]
            return JSONResponse({
                "id": rid, "object": "chat.completion", "created": created, "model": service.model_id,
                "system_fingerprint": service.system_fingerprint,
                "choices": [{"index": i, "message": message,
                             "logprobs": logprobs(result.logprobs),
                             "finish_reason": tools.finish_reason(finish_reason(result.figures.finish_reason), calls)}
                            for i, (result, (message, calls)) in enumerate(zip(results, replies, strict=True))],
                "usage": usage(results), "amber": amber_figures(results[0], choices.queue_ms)})

        base = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": service.model_id,
                "system_fingerprint": service.system_fingerprint}
        readers = [tools.ChatDeltas(fmt, tooling.parallel) for _ in range(body.n)]

        def chunk(index: int, event: TextChunk | None, finish: str | None) -> list[dict[str, Any]]:
            def one(delta: dict[str, Any], lp: dict[str, Any] | None, reason: str | None) -> dict[str, Any]:
                return {**base, "choices": [{"index": index, "delta": delta, "logprobs": lp, "finish_reason": reason}]}
            reader = readers[index]
            if event is not None:
                delta = reader.feed(event.text)
                lp = logprobs(event.logprobs)
                return [] if delta is None and lp is None else [one(delta or {}, lp, None)]
            rest = reader.finish()
            return ([] if rest is None else [one(rest, None, None)]) + \
                [one({}, None, tools.finish_reason(finish or "stop", reader.calls))]

        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        usage_chunk = (lambda res: {**base, "choices": [], "usage": usage(res),
                                    "amber": amber_figures(res[0], choices.queue_ms)}) if include_usage else None
        first = [{**base, "choices": [{"index": i, "delta": {"role": "assistant", "content": ""},
                                       "logprobs": None, "finish_reason": None}]} for i in range(body.n)]
        return stream_sse(choices, chunk, usage_chunk, first)

    @r.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request) -> Response:
        caller = service.caller(request)
        service.check_model(body.model)
        body.check()
        stop = body.stop_list()
        prompt = body.prompt[0] if isinstance(body.prompt, list) and isinstance(body.prompt[0], str) else body.prompt
        choices = await Choices.submit(service, caller, starts(body, caller.salt(body.cache_salt),
                                                               service.encode_text(prompt), body.max_tokens, stop),
                                       request, body.n)
        rid, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())
        token_bytes = service.token_bytes if body.top_logprobs_wanted() is not None else None
        shapes = [None if token_bytes is None else LegacyLogprobs(token_bytes) for _ in range(body.n)]

        def logprobs(index: int, entries: Sequence[TokenLogprob]) -> dict[str, Any] | None:
            shape = shapes[index]
            return None if shape is None else shape.shape(entries)

        base = {"id": rid, "object": "text_completion", "created": created, "model": service.model_id,
                "system_fingerprint": service.system_fingerprint}
        if not body.stream:
            results = await choices.collect()
            return JSONResponse({**base, "choices": [{"index": i, "text": result.text,
                                                      "logprobs": logprobs(i, result.logprobs),
                                                      "finish_reason": finish_reason(result.figures.finish_reason)}
                                                     for i, result in enumerate(results)],
                                 "usage": usage(results), "amber": amber_figures(results[0], choices.queue_ms)})

        def chunk(index: int, event: TextChunk | None, finish: str | None) -> list[dict[str, Any]]:
            return [{**base, "choices": [{"index": index, "text": "" if event is None else event.text,
                                          "logprobs": None if event is None else logprobs(index, event.logprobs),
                                          "finish_reason": finish}]}]

        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        usage_chunk = (lambda res: {**base, "choices": [], "usage": usage(res),
                                    "amber": amber_figures(res[0], choices.queue_ms)}) if include_usage else None
        return stream_sse(choices, chunk, usage_chunk)

    return r
