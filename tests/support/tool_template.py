"""A tiny model whose chat template teaches tool calls (Qwen2.5's, from tests.support.tool_templates),
with a context long enough for Qwen's tool instructions: it reports the "hermes" tool-call format."""
from __future__ import annotations

from pathlib import Path

from .tool_templates import QWEN25_TEMPLATE


def tiny_tool_model(base: Path, name: str = "tiny-tools") -> Path:
    """The tests' tiny model (tests.support.server.TINY) with a 4096-token context (the tiny
    vocabulary spells Qwen's tool instructions in ~600 tokens), converted into `base / name`,
    shipping Qwen2.5's tool template."""
    from engine.convert import convert_gguf

    from .server import TINY
    from .tiny_gguf import variant, write_tiny_gguf
    src = write_tiny_gguf(base / f"{name}.gguf", variant(TINY, context_length=4096))
    dest = convert_gguf(src.path, base / name)
    (dest / "chat_template.jinja").write_text(QWEN25_TEMPLATE, encoding="utf-8")
    return dest
