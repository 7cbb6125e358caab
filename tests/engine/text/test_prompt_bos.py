"""Prompts start with exactly one BOS where the model asks for one (GGUF `tokenizer.ggml.add_bos_token`,
copied to tokenizer_config.json's `add_bos_token`), for chat and raw completion alike, whether or not
the chat template writes `bos_token` itself; a base model without a chat template refuses chat with
a message naming it. Tiny real models (tests/support/tiny_gguf.py) converted by Amber's importer."""
from __future__ import annotations

from pathlib import Path

import pytest

from engine.api import ChatMessage, SamplingParams
from engine.convert import convert_gguf
from engine.generation.generate import Generator
from engine.runtime.model import load_model
from engine.sessions.manager import SessionManager
from engine.text.chat_template import NoChatTemplate
from tests.support.server import TINY
from tests.support.tiny_gguf import write_tiny_gguf

BOS = "<|im_start|>"          # the tiny models' BOS (tokenizer.ggml.bos_token_id)
PLAIN_TEMPLATE = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"   # no bos_token


def _model(root: Path, name: str, *, add_bos: bool, template: str | None | bool) -> Path:
    """template: None = none at all, True = the tiny default (ChatML: starts with the BOS's text)."""
    omit = ["tokenizer.ggml.add_bos_token"]
    metadata: dict[str, object] = {"tokenizer.ggml.add_bos_token": add_bos}
    if template is not True:
        omit.append("tokenizer.chat_template")
        if isinstance(template, str):
            metadata["tokenizer.chat_template"] = template
    src = write_tiny_gguf(root / f"{name}.gguf", TINY, omit=tuple(omit), metadata=metadata)
    return convert_gguf(src.path, root / name)


@pytest.fixture(scope="module")
def generators(tmp_path_factory) -> dict[str, Generator]:
    root = tmp_path_factory.mktemp("bos")
    specs = {"base-bos": (True, None), "plain-bos": (True, PLAIN_TEMPLATE), "chatml-bos": (True, True),
             "plain-nobos": (False, PLAIN_TEMPLATE), "base-nobos": (False, None)}
    return {name: Generator(load_model(_model(root, name, add_bos=add_bos, template=template), provider="cpu"))
            for name, (add_bos, template) in specs.items()}


def _bos_id(g: Generator) -> int:
    bos_id = g.model.tokenizer.token_to_id(BOS)
    assert bos_id is not None
    return bos_id


def _leading_bos(g: Generator, ids: list[int]) -> int:
    n = 0
    while n < len(ids) and ids[n] == _bos_id(g):
        n += 1
    return n


def test_the_conversion_keeps_the_models_word_on_bos(generators):
    assert generators["base-bos"].model.tokenizer_config["add_bos_token"] is True
    assert generators["base-nobos"].model.tokenizer_config["add_bos_token"] is False


@pytest.mark.parametrize("name", ["base-bos", "plain-bos", "chatml-bos"])
def test_completion_prompts_start_with_exactly_one_bos(generators, name):
    g = generators[name]
    for text in ("Hello world", BOS + "Hello world", ""):
        ids = g.encode_prompt(text)
        assert _leading_bos(g, ids) == 1, (text, ids)
        assert g.model.tokenizer.decode(ids[1:], skip_special_tokens=False) == text.removeprefix(BOS)


def test_without_add_bos_a_completion_prompt_is_the_text_alone(generators):
    g = generators["base-nobos"]
    assert _leading_bos(g, g.encode_prompt("Hello world")) == 0
    assert g.encode_prompt("Hello world") == g.model.tokenizer.encode("Hello world", add_special_tokens=False).ids


def test_a_template_without_bos_token_still_gets_one_bos(generators):
    g = generators["plain-bos"]
    msgs = [ChatMessage("user", "Hello")]
    assert g.chat_text(msgs) == BOS + "user: Hello\n"
    assert _leading_bos(g, g.encode_chat(msgs)) == 1


def test_a_template_that_writes_the_bos_gets_no_second_one(generators):
    g = generators["chatml-bos"]
    text = g.chat_text([ChatMessage("user", "Hello")])
    assert text == g.template.render([ChatMessage("user", "Hello")]) and text.startswith(BOS)
    assert _leading_bos(g, g.encode_chat([ChatMessage("user", "Hello")])) == 1


def test_without_add_bos_the_chat_prompt_is_the_templates_alone(generators):
    g = generators["plain-nobos"]
    assert g.chat_text([ChatMessage("user", "Hello")]) == "user: Hello\n"


@pytest.mark.parametrize("name", ["base-bos", "base-nobos"])
def test_a_base_model_refuses_chat_naming_itself(generators, name):
    g = generators[name]
    with pytest.raises(NoChatTemplate, match=rf"^{name} has no chat template; use /v1/completions$"):
        g.encode_chat([ChatMessage("user", "Hello")])


def test_the_session_manager_chat_path_adds_the_bos_once_and_completes_a_base_model(generators, tmp_path):
    g = generators["plain-bos"]
    manager = SessionManager(g.model, tmp_path / "a")
    try:
        job = manager.planner.prepare([ChatMessage("user", "Hello")], None)
        assert job.rendered == BOS + "user: Hello\n"
        base = SessionManager(generators["base-bos"].model, tmp_path / "b")
        try:
            sid = base.open().session_id
            with pytest.raises(NoChatTemplate):
                base.generate(sid, [ChatMessage("user", "Hello")])
            events = list(base.generate_text(sid, "Once upon a time", SamplingParams(max_new_tokens=4, temperature=0)))
            assert events[-1].figures.prompt_tokens == len(generators["base-bos"].encode_prompt("Once upon a time"))
        finally:
            base.shutdown()
    finally:
        manager.shutdown()
