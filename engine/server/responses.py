"""POST /v1/responses (and GET/DELETE /v1/responses/{id}): the Responses API's stateful form.

`store: true` (OpenAI's default) makes the response chain an Amber pinned session: the first
response opens one, each `previous_response_id` continues it, and since its KV is saved on disk
after every turn, a chain resumes after a server restart without prefilling its history.
`store: false` runs in a temporary session (nothing on disk, nothing to continue from).
"""
from __future__ import annotations

import asyncio
import collections
import copy
import hashlib
import json
import threading
import time
import uuid
from typing import Any, AsyncIterator, Iterator

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from engine.api import ChatMessage, GenerationResult, SessionKind, TextChunk
from .auth import Caller
from .chat import SSE_HEADERS, sse
from .errors import ApiError, error_body
from .formats import check_engine, text_constraint
from .response_store import ResponseRecord, ResponseStore, new_response_id
from . import tools
from .response_items import Event, ResponseOutput
from .schemas import ResponseRequest
from .tools import ToolRequest, constrained, name_tool_results
from .service import Service, amber_figures


DEFAULT_ITEMS = 20     # input items listed per page, unless `limit` says (OpenAI's default and bound)
MAX_ITEMS = 100


class Chains:
    """Which chain sessions are open in the engine (an LRU; the rest wait on disk)."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self._open: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._busy: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()

    def acquire(self, session_id: str, salt: str) -> None:
        """Opens the chain's session (engine thread) and closes the least recently used idle ones.
        A failed open (another salt, the chat held by another process) leaves nothing behind."""
        engine = self.service.engine
        with self._lock:
            self._busy[session_id] += 1
        try:
            # Even when the chain is open: the engine checks the salt (idempotent when it matches).
            engine.open(session_id, SessionKind.PINNED, cache_salt=salt)
        except BaseException:
            self.release(session_id)
            raise
        with self._lock:
            self._open[session_id] = None
            self._open.move_to_end(session_id)
            over = max(0, len(self._open) - self.service.config.max_open_chains)
            extra = [s for s in self._open if not self._busy[s]][:over]
            for s in extra:
                del self._open[s]
        for s in extra:
            engine.close(s)          # pinned: memory freed, KV stays on disk

    def release(self, session_id: str) -> None:
        with self._lock:
            self._busy[session_id] -= 1
            if self._busy[session_id] <= 0:
                del self._busy[session_id]


def _usage(result: GenerationResult | None, stored: bool) -> dict[str, Any]:
    """The spec's usage object (zeros while the response is in progress). A stored response's
    prompt tokens computed now are written to its chain's saved KV: `cache_write_tokens`."""
    if result is None:
        return {"input_tokens": 0, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                "output_tokens": 0, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 0}
    f = result.figures
    return {"input_tokens": f.prompt_tokens,
            "input_tokens_details": {"cached_tokens": f.reused_tokens,
                                     "cache_write_tokens": f.prefilled_tokens if stored else 0},
            "output_tokens": f.generated_tokens, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": f.prompt_tokens + f.generated_tokens}


def _input_items(record: ResponseRecord) -> list[dict[str, Any]]:
    """The items a stored response was made from, oldest first: its chain's conversation before
    its own output (instructions are no item). Ids are derived from the response's id and the
    item's place, so they stay the same from one listing to the next (for `after`)."""
    items = []
    for i, m in enumerate(record.messages[:-1]):
        def item_id(prefix: str, n: int = 0, i: int = i) -> str:
            return f"{prefix}_" + hashlib.sha256(f"{record.id}:{i}:{n}".encode() if n else
                                                 f"{record.id}:{i}".encode()).hexdigest()[:48]
        content = m.get("content")
        if m["role"] == "tool":
            items.append({"id": item_id("fco"), "type": "function_call_output", "call_id": m["tool_call_id"],
                          "output": content or "", "status": "completed"})
        elif m["role"] == "assistant":
            if content or not m.get("tool_calls"):
                items.append({"id": item_id("msg"), "type": "message", "role": "assistant", "status": "completed",
                              "content": [{"type": "output_text", "text": content or "", "annotations": [],
                                           "logprobs": []}]})
            for n, call in enumerate(m.get("tool_calls") or (), start=1):
                fn = call["function"]
                arguments = fn["arguments"]
                items.append({"id": item_id("fc", n), "type": "function_call", "call_id": call["id"],
                              "name": fn["name"], "status": "completed",
                              "arguments": arguments if isinstance(arguments, str)
                              else json.dumps(arguments, ensure_ascii=False)})
        else:
            items.append({"id": item_id("msg"), "type": "message", "role": m["role"], "status": "completed",
                          "content": [{"type": "input_text", "text": content or ""}]})
    return items


def _response(rid: str, created: int, body: ResponseRequest, model: str, output: list[dict[str, Any]],
              result: GenerationResult | None, amber: dict[str, Any] | None, tooling: ToolRequest) -> dict[str, Any]:
    done = result is not None
    incomplete = done and result.figures.finish_reason in ("length", "context_full")   # type: ignore[union-attr]
    return {"id": rid, "object": "response", "created_at": created,
            "status": "incomplete" if incomplete else "completed" if done else "in_progress",
            "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
            "error": None, "model": model, "output": output, "instructions": body.instructions,
            "previous_response_id": body.previous_response_id, "store": body.store,
            "temperature": body.temperature, "top_p": body.top_p, "max_output_tokens": body.max_output_tokens,
            "parallel_tool_calls": tooling.parallel, "tool_choice": _tool_choice(tooling),
            "tools": [_function_tool(t["function"]) for t in tooling.tools],
            "text": {"format": body.text.format.echo() if body.text and body.text.format else {"type": "text"}},
            "truncation": "disabled", "metadata": {},
            "usage": _usage(result, body.store), "amber": amber}


def _function_tool(function: dict[str, Any]) -> dict[str, Any]:
    """A tool as the Responses API echoes it (the spec's FunctionTool, flat): `description`,
    `parameters` and `strict` always present, null where the request did not give them."""
    return {"type": "function", "description": None, "parameters": None, "strict": None, **function}


def _tool_choice(tooling: ToolRequest) -> Any:
    return {"type": "function", "name": tooling.function} if tooling.choice == "function" else tooling.choice


def _chat_messages(messages: list[dict[str, Any]]) -> list[ChatMessage]:
    """Template messages as plain chat messages (engines that render no templates here)."""
    return [ChatMessage(m["role"], m.get("content") or "") for m in messages]


def router(service: Service) -> APIRouter:
    r = APIRouter()
    store = ResponseStore(service.state_dir / "responses")
    chains = Chains(service)
    engine = service.engine

    def plan(caller: Caller, body: ResponseRequest) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str | None]:
        """The prompt's messages, the history to store (no instructions), and the chain's session."""
        history: list[dict[str, Any]] = []
        session_id = None
        if body.previous_response_id is not None:
            prev = store.get(body.previous_response_id, caller.namespace)
            history, session_id = copy.deepcopy(prev.messages), prev.session_id
        history += body.messages()
        prompt = ([{"role": "system", "content": body.instructions}] if body.instructions else []) + \
            name_tool_results(copy.deepcopy(history))
        return prompt, history, session_id

    @r.post("/v1/responses")
    async def create(body: ResponseRequest, request: Request) -> Response:
        caller = service.caller(request)
        service.check_model(body.model)
        body.check()
        tooling = body.tool_settings()
        fmt = service.tool_format(tooling)
        text_rule = await text_constraint(body.text)
        check_engine(service, text_rule, "text.format")
        prompt, history, chain = await asyncio.to_thread(plan, caller, body)
        wanted = body.max_output_tokens
        session_id = (chain or str(uuid.uuid4())) if body.store else None
        encode = service.encode_chat(prompt, tooling.offered)
        sampling = constrained(lambda n: body.sampling(n, [], constraint=text_rule), fmt,
                               tools.constraint(fmt, tooling))
        chat_prompt = _chat_messages(prompt)

        if session_id is None:
            start = service.stateless(caller.salt(body.cache_salt), encode, wanted, sampling, chat_prompt,
                                      kind=SessionKind.TEMPORARY)
        else:
            def start(cancel: threading.Event, sid: str = session_id) -> Iterator[Any]:
                ids = encode()
                params = sampling(service.new_tokens(wanted, service.checked_length(ids)))
                chains.acquire(sid, caller.salt(body.cache_salt))

                def run() -> Iterator[Any]:
                    try:
                        tokens = service.tokens
                        yield from (tokens.generate_tokens(sid, ids, params, cancel)
                                    if tokens is not None and ids is not None
                                    else engine.generate(sid, chat_prompt, params, cancel))
                    finally:
                        chains.release(sid)
                return run()

        run = await service.submit(caller, start, request)
        rid, created = new_response_id(), int(time.time())
        try:
            await run.first()
        except BaseException:
            run.cancel()
            raise
        output = ResponseOutput(fmt, tooling.parallel)

        async def finish(result: GenerationResult, events: list[Event]) -> dict[str, Any]:
            events += output.finish(result.figures.finish_reason in ("length", "context_full"))
            amber = amber_figures(result, run.queue_ms, session_id=session_id)
            full = _response(rid, created, body, service.model_id, output.items, result, amber, tooling)
            if session_id is not None:
                record = ResponseRecord(rid, caller.namespace, session_id, history + [output.history_message()],
                                        created, service.model_id, body.previous_response_id, full)
                await asyncio.to_thread(store.save, record)
            return full

        if not body.stream:
            try:
                result = await run.collect()
            finally:
                run.cancel()
            output.start()
            output.feed(result.text)
            return JSONResponse(await finish(result, []))

        async def events() -> AsyncIterator[bytes]:
            seq = 0

            def event(kind: str, **fields: Any) -> bytes:
                nonlocal seq
                seq += 1
                return f"event: {kind}\n".encode() + sse({"type": kind, "sequence_number": seq - 1, **fields})
            yield event("response.created", response=_response(rid, created, body, service.model_id, [], None, None,
                                                               tooling))
            yield event("response.in_progress", response=_response(rid, created, body, service.model_id, [], None,
                                                                   None, tooling))
            for kind, fields in output.start():
                yield event(kind, **fields)
            try:
                async for ev in run.events():
                    if isinstance(ev, TextChunk):
                        if ev.text:
                            for kind, fields in output.feed(ev.text):
                                yield event(kind, **fields)
                    else:
                        closing: list[Event] = []
                        full = await finish(ev, closing)
                        for kind, fields in closing:
                            yield event(kind, **fields)
                        yield event("response.completed" if full["status"] == "completed" else "response.incomplete",
                                    response=full)
            except ApiError as exc:     # the spec's error event: its own `type`, not the error's
                err = error_body(exc.status, exc.message, exc.param, exc.code)["error"]
                yield event("error", code=err["code"], message=err["message"], param=err["param"])
            finally:
                run.cancel()

        return StreamingResponse(events(), media_type="text/event-stream", headers=SSE_HEADERS)

    @r.get("/v1/responses/{response_id}")
    async def retrieve(response_id: str, request: Request) -> Response:
        caller = service.caller(request)
        record = await asyncio.to_thread(store.get, response_id, caller.namespace)
        return JSONResponse(record.body)

    @r.get("/v1/responses/{response_id}/input_items")
    async def input_items(response_id: str, request: Request) -> Response:
        caller = service.caller(request)
        query = request.query_params
        raw_limit = query.get("limit", str(DEFAULT_ITEMS))
        if not (raw_limit.isascii() and raw_limit.isdigit() and len(raw_limit) <= 3
                and 1 <= int(raw_limit) <= MAX_ITEMS):
            raise ApiError(400, f"'limit' is a whole number from 1 to {MAX_ITEMS}", "limit")
        limit = int(raw_limit)
        order = query.get("order", "desc")
        if order not in ("asc", "desc"):
            raise ApiError(400, "'order' is 'asc' or 'desc'", "order")
        record = await asyncio.to_thread(store.get, response_id, caller.namespace)
        items = _input_items(record)
        if order == "desc":
            items.reverse()
        after = query.get("after")
        if after is not None:
            ids = [item["id"] for item in items]
            if after not in ids:
                raise ApiError(400, f"'after' names no input item of this response: '{after[:80]}'", "after")
            items = items[ids.index(after) + 1:]
        page = items[:limit]
        return JSONResponse({"object": "list", "data": page, "first_id": page[0]["id"] if page else None,
                             "last_id": page[-1]["id"] if page else None, "has_more": len(items) > limit})

    @r.delete("/v1/responses/{response_id}")
    async def delete(response_id: str, request: Request) -> Response:
        caller = service.caller(request)
        record = await asyncio.to_thread(store.delete, response_id, caller.namespace)
        # A damaged record names no session we can trust: the janitor's budget and age apply to it.
        if record is not None and not await asyncio.to_thread(store.session_in_use, record.session_id):
            session_id = record.session_id

            def forget() -> None:
                try:
                    engine.delete(session_id)
                except Exception:   # noqa: BLE001 - busy or already gone: the janitor's budget and age apply
                    pass
            await asyncio.to_thread(forget)
        return JSONResponse({"id": response_id, "object": "response", "deleted": True})

    return r

