"""Structured outputs: chat completions' `response_format` and the Responses API's `text.format`,
turned into the engine's `OutputConstraint` (enforced while sampling: engine.text.constraints).

    {"type": "text"}                                           free text (no constraint)
    {"type": "json_object"}                                    one JSON object
    {"type": "json_schema", "json_schema": {name, schema, strict}}    (chat completions)
    {"type": "json_schema", name, schema, strict}                     (Responses' text.format)

The schema is enforced whatever `strict` says (OpenAI enforces it only with strict: true; here a
reply always follows it). A schema that cannot be enforced is a 400 naming the problem.
"""
from __future__ import annotations

import asyncio
from engine.api import OutputConstraint
from .errors import ApiError
from .schemas import ResponseFormat, Schema, TextConfig
from .service import Service


def check_engine(service: Service, constraint: OutputConstraint | None, param: str) -> None:
    """A 400 where the engine cannot enforce a format (no tokenizer here: a remote engine)."""
    if constraint is not None and service.tokens is None:
        raise ApiError(400, f"this engine does not enforce '{param}'", param)

async def constraint(kind: str, schema: Schema | None, param: str) -> OutputConstraint | None:
    """The engine's constraint for a format `kind` ("text", "json_object", "json_schema") and its
    schema; ApiError 400 (naming `param`) for one that cannot be enforced. Compiled off the event
    loop: a large schema takes a moment."""
    # Imported here: the server loads without the engine's implementation (it serves any ChatEngine).
    from engine.text import constraints  # noqa: PLC0415
    if kind == "text":
        return None
    if kind == "json_schema" and schema is None:
        raise ApiError(400, f"'{param}' is required for a json_schema format", param)
    try:
        if kind == "json_object":
            return await asyncio.to_thread(constraints.json_object)
        return await asyncio.to_thread(constraints.json_schema, schema if schema is not None else {})
    except constraints.ConstraintError as exc:
        raise ApiError(400, f"'{param}' cannot be enforced: {exc}", param, "invalid_json_schema") from None


async def chat_constraint(fmt: ResponseFormat | None) -> OutputConstraint | None:
    """Chat completions' `response_format` as a constraint (None: free text)."""
    if fmt is None:
        return None
    if fmt.type == "json_schema" and fmt.json_schema is None:
        raise ApiError(400, "'response_format.json_schema' is required when its type is json_schema",
                       "response_format.json_schema")
    schema = fmt.json_schema.schema_ if fmt.json_schema is not None else None
    return await constraint(fmt.type, schema, "response_format.json_schema.schema")


async def text_constraint(text: TextConfig | None) -> OutputConstraint | None:
    """The Responses API's `text.format` as a constraint (None: free text)."""
    fmt = None if text is None else text.format
    if fmt is None:
        return None
    if fmt.type == "json_schema" and fmt.name is None:
        raise ApiError(400, "'text.format.name' is required when its type is json_schema", "text.format.name")
    return await constraint(fmt.type, fmt.schema_, "text.format.schema")
