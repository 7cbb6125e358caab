"""OpenAI's OpenAPI spec (tests/data/openai-openapi) as JSON Schema validators.

The YAML is 3 MB: it is parsed once per test session, turned into plain JSON Schema 2020-12 (the
spec is OpenAPI 3.1, whose schemas are 2020-12 plus a few OpenAPI words), cut down to the
endpoints Amber serves and the component schemas they reach, and written as a small JSON file
that the server processes the tests start load instead of parsing the YAML again.
"""
from __future__ import annotations

import copy
import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import jsonschema
import referencing
import referencing.jsonschema
import yaml

SPEC_YAML = Path(__file__).resolve().parents[1] / "data" / "openai-openapi" / "openapi.yaml"
BASE_URI = "urn:openai-openapi"
SCHEMA_REF = "#/components/schemas/"
# The spec's paths are under its server URL, https://api.openai.com/v1.
SERVED_PATHS = ("/chat/completions", "/completions", "/responses", "/responses/{response_id}",
                "/responses/{response_id}/input_items", "/models", "/models/{model}")
ERROR_SCHEMA = "ErrorResponse"          # OpenAI's error body, {"error": {...}}, for every 4xx and 5xx
STREAM_EVENTS = "ResponseStreamEvent"   # the union of the Responses API's streamed events
COMPLETION_CHUNK = "AmberCompletionStreamChunk"     # not the spec's: see _completion_chunk
ITEM_PAGE = "AmberResponseItemPage"                 # not the spec's: see _item_page


def _load_yaml(path: Path) -> dict[str, Any]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)     # libyaml: ~20x faster when built in
    with path.open("rb") as f:
        return yaml.load(f, Loader=loader)   # noqa: S506 - a safe loader, C or Python


def as_json_schema(node: Any) -> Any:
    """An OpenAPI schema as plain JSON Schema: OpenAPI 3.0's `nullable: true` (still used by a
    few of the 3.1 spec's schemas) becomes "or null". `discriminator`, `x-*` and `example` are
    annotations JSON Schema ignores, and the members they annotate say their `type` themselves."""
    if isinstance(node, list):
        return [as_json_schema(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: as_json_schema(v) if k not in ("example", "examples", "x-oaiMeta") else v for k, v in node.items()}
    if out.pop("nullable", False) is True:
        description = out.get("description")
        out = {"anyOf": [out, {"type": "null"}]}
        if description is not None:
            out["description"] = description
    return out


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            elif key not in ("example", "examples", "x-oaiMeta"):
                yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def _schema_name(ref: str) -> str:
    if not ref.startswith(SCHEMA_REF):
        raise ValueError(f"the spec refers outside its component schemas: {ref}")
    return ref[len(SCHEMA_REF):]


def _completion_chunk(response: dict[str, Any]) -> dict[str, Any]:
    """The spec gives /completions no streamed answer, yet says (CreateCompletionResponse's
    description) that a streamed chunk has the body's shape; OpenAI's chunks before the last say
    `"finish_reason": null` (as chat chunks do), which that shape does not allow: so this is the
    body's schema with a null finish reason allowed, and nothing else changed."""
    chunk = copy.deepcopy(response)
    choice = chunk["properties"]["choices"]["items"]["properties"]
    choice["finish_reason"] = {"anyOf": [choice["finish_reason"], {"type": "null"}]}
    chunk["description"] = _completion_chunk.__doc__
    return chunk


def _item_page() -> dict[str, Any]:
    """ResponseItemList requires `first_id` and `last_id` as strings, but a page with no items
    (asked for the items after the last one) has neither: Amber says null there, as OpenAI's own
    API does for an empty list (clients such as async-openai made both optional for it). So this
    is ResponseItemList, or an empty last page whose ids are null; nothing else is allowed."""
    empty = {"type": "object", "required": ["object", "data", "has_more", "first_id", "last_id"],
             "properties": {"object": {"enum": ["list"]}, "data": {"type": "array", "maxItems": 0},
                            "has_more": {"const": False}, "first_id": {"type": "null"}, "last_id": {"type": "null"}}}
    return {"description": _item_page.__doc__, "anyOf": [{"$ref": SCHEMA_REF + "ResponseItemList"}, empty]}


def served_subset(spec: dict[str, Any]) -> dict[str, Any]:
    """The spec's paths Amber serves (their responses' content only) and the schemas they reach."""
    schemas = spec["components"]["schemas"]
    paths = {p: {method: {"responses": {status: {"content": answer.get("content", {})}
                                        for status, answer in op.get("responses", {}).items()}}
                 for method, op in spec["paths"][p].items() if isinstance(op, dict) and "responses" in op}
             for p in SERVED_PATHS}
    wanted = [_schema_name(r) for r in _refs(paths)] + [ERROR_SCHEMA, STREAM_EVENTS]
    # Where the spec cannot describe what OpenAI's API answers, a schema of Amber's, each one
    # OpenAI's with the one difference its docstring gives, checks instead.
    kept: dict[str, Any] = {COMPLETION_CHUNK: _completion_chunk(as_json_schema(schemas["CreateCompletionResponse"])),
                            ITEM_PAGE: _item_page()}
    completion = paths["/completions"]["post"]["responses"]["200"]["content"]
    completion.setdefault("text/event-stream", {"schema": {"$ref": SCHEMA_REF + COMPLETION_CHUNK}})
    items = paths["/responses/{response_id}/input_items"]["get"]["responses"]["200"]["content"]
    items["application/json"] = {"schema": {"$ref": SCHEMA_REF + ITEM_PAGE}}
    wanted.append("ResponseItemList")
    while wanted:
        name = wanted.pop()
        if name not in kept:
            kept[name] = as_json_schema(schemas[name])
            wanted.extend(_schema_name(r) for r in _refs(kept[name]))
    return {"openapi": spec["openapi"], "info": spec["info"], "paths": paths, "components": {"schemas": kept}}


@functools.cache
def parsed_spec() -> dict[str, Any]:
    """The served subset of the pinned spec, from the YAML (once per process)."""
    return served_subset(_load_yaml(SPEC_YAML))


def write_subset(path: Path) -> Path:
    """The served subset as JSON at `path` (for server processes to load quickly)."""
    path.write_text(json.dumps(parsed_spec()), encoding="utf-8")
    return path


@dataclass(frozen=True)
class Route:
    """One endpoint of the spec: its method, a regex for its URL path, and its answers' schemas
    by status and content type (None where the spec gives a status no body schema)."""
    method: str
    pattern: re.Pattern[str]
    answers: dict[str, dict[str, str | None]]


class Spec:
    """Validators for the spec's component schemas and the routes that use them."""

    def __init__(self, subset: dict[str, Any]) -> None:
        self.schemas: dict[str, Any] = subset["components"]["schemas"]
        resource = referencing.jsonschema.DRAFT202012.create_resource(subset)
        self._registry: referencing.Registry[Any] = referencing.Registry().with_resource(BASE_URI, resource)
        self.routes = [self._route(path, method, op) for path, ops in subset["paths"].items()
                       for method, op in ops.items()]
        self.events = self._event_schemas()

    @classmethod
    def load(cls, subset_json: Path | None = None) -> "Spec":
        """From a subset written by `write_subset`, or else from the pinned YAML."""
        if subset_json is None:
            return cls(parsed_spec())
        return cls(json.loads(subset_json.read_text(encoding="utf-8")))

    @staticmethod
    def _route(path: str, method: str, op: dict[str, Any]) -> Route:
        regex = "/v1" + re.sub(r"\\{[^/]+?\\}", "[^/]+", re.escape(path))
        answers = {status: {ctype: (_schema_name(body["schema"]["$ref"]) if "$ref" in body.get("schema", {})
                                    else None)
                            for ctype, body in answer["content"].items()}
                   for status, answer in op["responses"].items()}
        return Route(method.upper(), re.compile(regex), answers)

    def _event_schemas(self) -> dict[str, str]:
        """Each streamed Responses event's `type` -> its schema's name (from the union's members)."""
        events = {}
        for member in self.schemas[STREAM_EVENTS]["anyOf"]:
            name = _schema_name(member["$ref"])
            kind = self.schemas[name].get("properties", {}).get("type", {})
            for value in kind.get("enum", []) + ([kind["const"]] if "const" in kind else []):
                events[value] = name
        return events

    def route(self, method: str, path: str) -> Route | None:
        return next((r for r in self.routes if r.method == method and r.pattern.fullmatch(path)), None)

    @functools.cache     # noqa: B019 - one Spec per process, kept for its life
    def validator(self, name: str) -> jsonschema.protocols.Validator:
        if name not in self.schemas:
            raise KeyError(f"the spec has no component schema '{name}'")
        return jsonschema.Draft202012Validator({"$ref": f"{BASE_URI}{SCHEMA_REF}{name}"}, registry=self._registry)

    def problems(self, name: str, instance: Any) -> list[str]:
        """What in `instance` does not match the schema `name` (empty when it matches): the most
        telling error, with the path of the value at fault."""
        errors = list(self.validator(name).iter_errors(instance))
        if not errors:
            return []
        best = jsonschema.exceptions.best_match(errors)
        where = "/".join(str(p) for p in best.absolute_path) or "(the body)"
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        return [f"{name} at {where}: {best.message[:400]}{more}"]
