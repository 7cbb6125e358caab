"""Markdown → HTML for replies, and the user's own text as written (pure Python, safe on worker
threads).

Headings, lists, tables, links, fenced code highlighted by Pygments (inline styles, so no
stylesheet is needed), a "Copy" link above every code block (`copy:N`, handled by the view).
Raw HTML and images from the model are not interpreted (shown as text / dropped). An unclosed
fence while a reply streams is closed for rendering so the code block does not flicker.
"""
from __future__ import annotations

import html
import re
import threading
from dataclasses import dataclass

import markdown

from .palette import Theme

FENCE_RE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})[ \t]*(?P<lang>[\w+#.-]*)[^\n]*$",
                      re.MULTILINE)
MONO = "'JetBrains Mono', 'DejaVu Sans Mono', Menlo, Consolas, monospace"

_local = threading.local()


@dataclass(frozen=True)
class Rendered:
    html: str
    code_blocks: tuple[str, ...]


def _md(style: str) -> markdown.Markdown:
    cache = getattr(_local, "md", None)
    if cache is None:
        cache = _local.md = {}
    md = cache.get(style)
    if md is None:
        md = markdown.Markdown(
            extensions=["fenced_code", "tables", "codehilite", "sane_lists"],
            extension_configs={"codehilite": {"noclasses": True, "pygments_style": style,
                                              "guess_lang": False, "css_class": "codehilite"}})
        for name in ("html", ):
            if name in md.inlinePatterns:
                md.inlinePatterns.deregister(name)
        for name in ("image_link", "image_reference", "short_image_ref"):
            if name in md.inlinePatterns:
                md.inlinePatterns.deregister(name)
        if "html_block" in md.preprocessors:
            md.preprocessors.deregister("html_block")
        cache[style] = md
    md.reset()
    return md


def extract_code_blocks(text: str) -> tuple[list[tuple[str, str]], str]:
    """Fenced code blocks as (language, code), and `text` with any unclosed fence closed."""
    blocks: list[tuple[str, str]] = []
    lines = text.split("\n")
    open_fence: str | None = None
    lang = ""
    body: list[str] = []
    for line in lines:
        if open_fence is None:
            m = FENCE_RE.match(line)
            if m:
                open_fence, lang, body = m.group("fence"), m.group("lang"), []
        else:
            stripped = line.strip()
            if stripped.startswith(open_fence[0] * len(open_fence)) and set(stripped) == {open_fence[0]}:
                blocks.append((lang, "\n".join(body)))
                open_fence = None
            else:
                body.append(line)
    if open_fence is not None:
        blocks.append((lang, "\n".join(body)))
        text = text + ("\n" if not text.endswith("\n") else "") + open_fence
    return blocks, text


_CODEHILITE_RE = re.compile(r'<div class="codehilite"(?: style="(?P<style>[^"]*)")?>(?P<body>.*?)</div>',
                            re.DOTALL)
_PLAIN_PRE_RE = re.compile(r"<pre><code(?: class=\"[^\"]*\")?>(?P<body>.*?)</code></pre>", re.DOTALL)


def render(text: str, theme: Theme, code_offset: int = 0) -> Rendered:
    """HTML for `text` in `theme`, plus the raw code of each block (for the copy links, which
    are numbered from `code_offset`)."""
    blocks, text = extract_code_blocks(text)
    body = _md(theme.pygments_style).convert(text)
    counter = iter(range(10**6))

    def frame(inner: str, style: str | None = None) -> str:
        n = next(counter)
        lang = blocks[n][0] if n < len(blocks) else ""
        bg = theme.code_bg
        m = re.search(r"background:\s*(#[0-9a-fA-F]{3,8})", style or "")
        if m:
            bg = m.group(1)
        if '<pre style="' in inner[:40]:
            inner = inner.replace('<pre style="', f'<pre style="font-family: {MONO}; margin: 0; ', 1)
        else:
            inner = inner.replace("<pre", f'<pre style="font-family: {MONO}; margin: 0;"', 1)
        # The header (language, Copy) is a table of its own: its 100 % is the message's width,
        # so Copy stays in view however wide the code is; the code's table may grow wider than
        # the message, which then scrolls sideways (MessageBrowser) instead of clipping Copy.
        return (
            f'<table width="100%" cellspacing="0" cellpadding="0" '
            f'style="background-color: {bg}; border: 1px solid {theme.border}; '
            f'margin-top: 6px; margin-bottom: 0px;"><tr><td>'
            f'<table width="100%" cellspacing="0" cellpadding="0" border="0"><tr>'
            f'<td style="padding: 4px 10px;">'
            f'<span style="color: {theme.muted}; font-size: small;">{html.escape(lang or "code")}</span></td>'
            f'<td align="right" style="padding: 4px 10px;">'
            f'<a href="copy:{n + code_offset}" style="color: {theme.muted}; text-decoration: none; font-size: small;">'
            f'<img src="amber:copy" width="12" height="12"> Copy</a></td></tr></table></td></tr></table>'
            f'<table width="100%" cellspacing="0" cellpadding="0" '
            f'style="background-color: {bg}; border: 1px solid {theme.border}; '
            f'margin-top: 0px; margin-bottom: 6px;">'
            f'<tr><td style="padding: 8px 10px;">{inner}</td></tr></table>')

    grid = "#57514a" if theme.dark else "#cfc8bf"
    body = body.replace("<table>", (
        f'<table border="1" cellspacing="0" cellpadding="6" '
        f'style="border-collapse: collapse; border-color: {grid}; border-style: solid; '
        f'margin-top: 4px; margin-bottom: 10px;">'))
    body = body.replace("<th>", f'<th style="background-color: {theme.surface};">')
    body = re.sub(r'<th style="text-align: (\w+);">',
                  lambda m: f'<th style="text-align: {m.group(1)}; background-color: {theme.surface};">',
                  body)
    body = body.replace("\n</code></pre>", "</code></pre>")  # no blank line under the code
    # <code> inside a highlighted block would get the inline-code background on every line
    body = body.replace("<span></span><code>", "<span></span>").replace("</code></pre>", "</pre>")
    body = _CODEHILITE_RE.sub(lambda m: frame(m.group("body"), m.group("style")), body)
    body = _PLAIN_PRE_RE.sub(lambda m: frame(f"<pre>{m.group('body')}</pre>"), body)
    return Rendered(body, tuple(code for _, code in blocks))


def render_plain(text: str) -> Rendered:
    """The user's text as written: HTML escaped, every space, tab and line kept (a paste is not
    Markdown: its indented lines are not code, its backticks and asterisks are just characters)."""
    return Rendered(f'<p style="white-space: pre-wrap; margin: 0px;">{html.escape(text, quote=False)}</p>', ())


def render_message(role: str, text: str, theme: Theme) -> Rendered:
    """A message's body: the user's as written, anything else as Markdown."""
    return render_plain(text) if role == "user" else render(text, theme)


def stable_prefix(text: str) -> int:
    """Where the finished blocks of a streaming text end: the last blank line outside a code
    fence that is followed by a new, unindented block. Text before it will not change its
    rendering as more arrives, so a streaming view renders it once and re-renders only the rest.
    """
    end = 0
    pos = 0
    fence: str | None = None
    blank_at: int | None = None
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        if fence is None:
            m = FENCE_RE.match(line.rstrip("\n"))
            if stripped == "":
                if blank_at is None:
                    blank_at = pos
            else:
                if blank_at is not None and not line[:1].isspace() and line.endswith("\n"):
                    end = blank_at  # a new top-level block has started (and its line is complete)
                blank_at = None
                if m:
                    fence = m.group("fence")
        else:
            if stripped.startswith(fence) and set(stripped) == {fence[0]}:
                fence = None
            blank_at = None
        pos += len(line)
    return end


def document_css(theme: Theme) -> str:
    """Default stylesheet of each message's QTextDocument."""
    return f"""
        body {{ color: {theme.text}; }}
        p {{ margin-top: 0px; margin-bottom: 8px; line-height: 135%; }}
        h1 {{ font-size: x-large; margin-top: 10px; margin-bottom: 6px; }}
        h2 {{ font-size: large; margin-top: 10px; margin-bottom: 6px; }}
        h3, h4, h5, h6 {{ font-size: medium; margin-top: 8px; margin-bottom: 4px; }}
        ul, ol {{ margin-top: 0px; margin-bottom: 8px; }}
        li {{ margin-bottom: 2px; }}
        a {{ color: {theme.accent}; }}
        code {{ font-family: {MONO}; background-color: {theme.code_bg}; }}
        pre {{ font-family: {MONO}; margin: 0px; }}
        blockquote {{ color: {theme.muted}; margin-left: 12px; }}
        th {{ background-color: {theme.surface}; font-weight: 600; }}
        hr {{ color: {theme.border}; }}
    """


def plain_html(text: str) -> str:
    return "<p>" + html.escape(text).replace("\n", "<br>") + "</p>"
