"""Titles that tell copies and branches apart from their source (and from each other)."""
from __future__ import annotations

import re
from typing import Iterable

_SUFFIX = re.compile(r"\s+\((?:copy|branch)(?: \d+)?\)$")


def derived_title(source: str, existing: Iterable[str], *, branch: bool) -> str:
    """“Trip plan (copy)”, “Trip plan (branch 2)”…: a title no other chat has."""
    base = _SUFFIX.sub("", source.strip()) or "New chat"
    kind = "branch" if branch else "copy"
    taken = set(existing)
    title = f"{base} ({kind})"
    n = 2
    while title in taken:
        title = f"{base} ({kind} {n})"
        n += 1
    return title
