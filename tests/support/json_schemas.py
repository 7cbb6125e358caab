"""JSON schemas the constraint tests share: bounded, so a random tiny model's constrained reply
is sure to end within a few dozen tokens."""
from __future__ import annotations

PET = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 6},
    "age": {"type": "integer", "minimum": 0, "maximum": 30},
    "kind": {"enum": ["cat", "dog", "fish"]},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 4}, "maxItems": 3}},
    "required": ["name", "age", "kind", "tags"], "additionalProperties": False}
