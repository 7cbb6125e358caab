"""Shapes of parsed, untrusted JSON, measured without recursion (a value may nest as deep as the
parser allowed)."""
from __future__ import annotations

from typing import Any


def json_depth(value: Any) -> int:
    """How deeply a parsed JSON value nests: 1 for a scalar or an empty container, one more per
    level of objects and arrays."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return deepest
