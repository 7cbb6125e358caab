"""POST /v1/chat/completions and POST /v1/completions (stateless: the prefix cache carries reuse)."""
from __future__ import annotations

import json
import time
import uuid
from typing import Any, AsyncIterator, Callable

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse

from engine.api import GenerationResult, TextChunk
from .errors import ApiError, sse_error
from .schemas import ChatCompletionRequest, CompletionRequest
from .service import Run, Service, amber_figures, chat_usage, finish_reason

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def sse(obj: Any) -> bytes:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n".encode()


def stream_sse(run: Run, chunk: Callable[[str | None, str | None], dict[str, Any]],
               usage_chunk: Callable[[GenerationResult], dict[str, Any]] | None,
               first: dict[str, Any] | None = None) -> StreamingResponse:
    """Server-sent events: `first` (if any), a chunk per text piece, the finishing chunk, the usage
    chunk if asked, then `data: [DONE]`. Leaving early (client gone) cancels the generation."""

    async def body() -> AsyncIterator[bytes]:
        try:
            if first is not None:
                yield sse(first)
            async for event in run.events():
                if isinstance(event, TextChunk):
                    if event.text:
                        yield sse(chunk(event.text, None))
                else:
                    yield sse(chunk(None, finish_reason(event.figures.finish_reason)))
                    if usage_chunk is not None:
                        yield sse(usage_chunk(event))
        except ApiError as exc:
            yield sse_error(exc)
        finally:
            run.cancel()       # no-op when finished; stops the generation if the client left
        yield b"data: [DONE]\n\n"

    return StreamingResponse(body(), media_type="text/event-stream", headers=SSE_HEADERS)


def router(service: Service) -> APIRouter:
    r = APIRouter()

    @r.post("/v1/chat/completions")
    async def chat_completions(body: ChatCompletionRequest, request: Request):
        caller = service.caller(request)
        service.check_model(body.model)
        body.check()
        stop = body.stop_list()
        messages = [m.to_chat() for m in body.messages]
        start = service.stateless(caller.salt(body.cache_salt), service.encode_chat(messages), body.wanted_tokens(),
                                  lambda n: body.sampling(n, stop), messages)
        run = await service.submit(caller, start, request)
        rid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        try:
            await run.first()
        except BaseException:
            run.cancel()
            raise
        if not body.stream:
            try:
                result = await run.collect()
            finally:
                run.cancel()
            return JSONResponse({
                "id": rid, "object": "chat.completion", "created": created, "model": service.model_id,
                "system_fingerprint": None,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": result.text, "refusal": None},
                             "logprobs": None, "finish_reason": finish_reason(result.figures.finish_reason)}],
                "usage": chat_usage(result), "amber": amber_figures(result, run.queue_ms)})

        base = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": service.model_id,
                "system_fingerprint": None}

        def chunk(text: str | None, finish: str | None) -> dict[str, Any]:
            delta = {} if text is None else {"content": text}
            return {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        usage = (lambda res: {**base, "choices": [], "usage": chat_usage(res),
                              "amber": amber_figures(res, run.queue_ms)}) if include_usage else None
        first = {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                      "logprobs": None, "finish_reason": None}]}
        return stream_sse(run, chunk, usage, first)

    @r.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request):
        caller = service.caller(request)
        service.check_model(body.model)
        body.check()
        stop = body.stop_list()
        prompt = body.prompt[0] if isinstance(body.prompt, list) and isinstance(body.prompt[0], str) else body.prompt
        start = service.stateless(caller.salt(body.cache_salt), service.encode_text(prompt), body.max_tokens,
                                  lambda n: body.sampling(n, stop))
        run = await service.submit(caller, start, request)
        rid, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())
        try:
            await run.first()
        except BaseException:
            run.cancel()
            raise
        base = {"id": rid, "object": "text_completion", "created": created, "model": service.model_id,
                "system_fingerprint": None}
        if not body.stream:
            try:
                result = await run.collect()
            finally:
                run.cancel()
            return JSONResponse({**base, "choices": [{"index": 0, "text": result.text, "logprobs": None,
                                                      "finish_reason": finish_reason(result.figures.finish_reason)}],
                                 "usage": chat_usage(result), "amber": amber_figures(result, run.queue_ms)})

        def chunk(text: str | None, finish: str | None) -> dict[str, Any]:
            return {**base, "choices": [{"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}]}

        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        usage = (lambda res: {**base, "choices": [], "usage": chat_usage(res),
                              "amber": amber_figures(res, run.queue_ms)}) if include_usage else None
        return stream_sse(run, chunk, usage)

    return r
