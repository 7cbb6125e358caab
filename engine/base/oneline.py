"""Messages quoting untrusted names (metadata keys, file names) kept to one safe line."""
from __future__ import annotations

import unicodedata


def one_line(text: str) -> str:
    """`text` with control characters (a newline in a metadata key or a file name) escaped, so a
    message quoting untrusted names stays one line and cannot move the terminal's cursor."""
    if all(unicodedata.category(c) != "Cc" for c in text):
        return text
    return "".join(c.encode("unicode_escape").decode("ascii") if unicodedata.category(c) == "Cc" else c
                   for c in text)
