"""A streaming reply's HTML, rendered incrementally: finished blocks (see
`markdown_render.stable_prefix`) are rendered once and kept; only the unfinished tail is rendered
again on each update, so an update's cost does not grow with the length of the reply. The widget
(`widgets.message.StreamRenderer`) puts each step into its document."""
from __future__ import annotations

from dataclasses import dataclass

from engine.text.reasoning import Reply

from .markdown_render import Rendered, render, stable_prefix
from .message import reply_of
from .palette import Theme

CURSOR = " ▍"


@dataclass(frozen=True)
class StreamStep:
    reply: Reply            # the text so far, its reasoning split off (the thinking panel's)
    finished: str | None    # the HTML of blocks finished by this update (None: none)
    tail: str | None        # the unfinished tail's HTML ("" to clear it; None: unchanged)
    rendered: Rendered      # everything so far


class StreamMarkup:
    def __init__(self, th: Theme):
        self.theme = th
        self.stable_len = 0          # characters of the answer rendered as finished blocks
        self.code_blocks: list[str] = []
        self.html_parts: list[str] = []
        self._tail_codes: tuple[str, ...] = ()
        self._tail_html = ""

    def update(self, text: str, *, final: bool = False) -> StreamStep:
        reply = reply_of("assistant", text)
        assert reply is not None
        text = reply.content
        finished: str | None = None
        split = len(text) if final else stable_prefix(text)
        if split > self.stable_len:
            part = render(text[self.stable_len:split], self.theme, len(self.code_blocks))
            finished = part.html
            self.code_blocks.extend(part.code_blocks)
            self.html_parts.append(part.html)
            self.stable_len = split
        tail_text = text[self.stable_len:]
        tail: str | None = None
        if tail_text.strip() and not final:
            part = render(tail_text + CURSOR, self.theme, len(self.code_blocks))
            self._tail_codes, self._tail_html = part.code_blocks, part.html
            tail = part.html
        elif final:
            self._tail_codes, self._tail_html = (), ""
            tail = ""
        return StreamStep(reply, finished, tail, Rendered("".join(self.html_parts) + self._tail_html,
                                                          tuple(self.code_blocks) + self._tail_codes))
