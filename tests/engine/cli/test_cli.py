"""`amber-engine` / `python -m engine`: generate --json on the real default model (slow), errors as
one line and exit code 2, pinned sessions across invocations, and `sessions list|show|unpin|delete|gc`.
"""
from __future__ import annotations

import json
import shutil
import uuid

import pytest

from engine.cli import main
from tests.support.cli_errors import one_line_error

FIGURES = {"prompt_tokens", "reused_tokens", "prefilled_tokens", "generated_tokens", "ttft_ms", "prefill_ms",
           "resume_ms", "decode_tokens_per_s", "provider", "finish_reason", "resume", "cache_tokens_memory",
           "cache_tokens_disk", "fallback_reason", "context_used", "context_window", "dropped_messages",
           "dropped_tokens"}


def parse_json(proc) -> dict:
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    out = proc.stdout.strip().splitlines()
    assert len(out) == 1, proc.stdout
    data = json.loads(out[0])
    assert {"text", "tokens", "session"} | FIGURES <= set(data), set(data)
    return data


# ---- the real default model --------------------------------------------------------------------
@pytest.mark.slow
def test_generate_json_on_the_default_model(default_model_dir, run_cli, tmp_path):
    state = tmp_path / "state"
    # --greedy is the argmax (no repetition penalty). Under the template's own default system
    # prompt that answers in French; the GUI's default system prompt gets the fact.
    proc = run_cli("generate", "--chat", "What is the capital of France?", "--greedy", "--json",
                   "--system", "You are a helpful assistant.",
                   "--max-tokens", "40", "--state-dir", state,
                   env={"AMBER_HOME": str(default_model_dir.parent.parent)})
    data = parse_json(proc)
    assert "Paris" in data["text"]
    assert data["finish_reason"] in ("eos", "length", "stop")
    assert data["generated_tokens"] == len(data["tokens"]) > 0
    assert data["prompt_tokens"] == data["reused_tokens"] + data["prefilled_tokens"] > 0
    assert data["reused_tokens"] == 0 and data["resume"] == "none" and data["fallback_reason"] is None
    assert data["ttft_ms"] > 0 and data["prefill_ms"] > 0 and data["decode_tokens_per_s"] > 0
    assert data["provider"] in ("CPU", "CUDA")
    assert data["context_window"] == 8192
    assert data["context_used"] == data["prompt_tokens"] + data["generated_tokens"]
    assert str(uuid.UUID(data["session"])) == data["session"]
    # No --session: a temporary session, nothing written.
    assert not state.exists() or not [p for p in state.rglob("*") if p.is_file()]


# ---- errors: one line, exit code 2 --------------------------------------------------------------
def test_missing_model_folder(run_cli, tmp_path):
    one_line_error(run_cli("generate", "--model", tmp_path / "nope", "--chat", "hi"), "no such model folder")


def test_default_model_not_prepared(run_cli, tmp_path):
    one_line_error(run_cli("generate", "--chat", "hi"), "fetch-default")


@pytest.mark.parametrize("args,needle", [
    (["--temperature", "-1"], "temperature"),
    (["--max-tokens", "0"], "--max-tokens"),
    (["--max-tokens", "many"], "--max-tokens"),
    (["--top-p", "1.5"], "top_p"),
    (["--system", "be brief", "--prompt", "x"], "--system"),
], ids=["temperature", "max-tokens-0", "max-tokens-word", "top-p", "system-without-chat"])
def test_bad_option_values(run_cli, tiny_dir, args, needle):
    chat = [] if "--prompt" in args else ["--chat", "hi"]
    one_line_error(run_cli("generate", "--model", tiny_dir, *chat, *args), needle)


def test_chat_template_that_raises(run_cli, tiny_dir, tmp_path):
    folder = tmp_path / "no-chat"
    shutil.copytree(tiny_dir, folder)
    (folder / "chat_template.jinja").write_text("{{ raise_exception('this model cannot chat') }}")
    line = one_line_error(run_cli("generate", "--model", folder, "--chat", "hi", "--state-dir", tmp_path / "s"),
                          "this model cannot chat")
    assert "no-chat" in line     # names the model


def test_broken_model_folder(run_cli, tiny_dir, tmp_path):
    folder = tmp_path / "broken"
    shutil.copytree(tiny_dir, folder)
    (folder / "config.json").write_text("{not json")
    one_line_error(run_cli("generate", "--model", folder, "--chat", "hi"), "config.json")


def test_convert_rejects_a_non_gguf_file(run_cli, tmp_path):
    src = tmp_path / "model.gguf"
    src.write_bytes(b"this is not a GGUF file at all\n" * 10)
    one_line_error(run_cli("convert", src, tmp_path / "out"))
    assert not (tmp_path / "out").exists()
    one_line_error(run_cli("convert", tmp_path / "missing.gguf", tmp_path / "out2"))
    assert not (tmp_path / "out2").exists()


def test_bad_session_id(run_cli, tiny_dir, tmp_path):
    one_line_error(run_cli("generate", "--model", tiny_dir, "--chat", "hi", "--session", "not-a-uuid",
                           "--state-dir", tmp_path / "s"))


@pytest.mark.parametrize("args, option", [
    (["--chat", "caf\udce9 au lait"], "--chat"),               # the bytes b"caf\xe9 au lait" (Latin-1)
    (["--chat", "hi", "--system", "caf\udce9"], "--system"),
    (["--prompt", "\udcff"], "--prompt"),
    (["--chat", "hi", "--stop", "\udcc3"], "--stop"),
], ids=["chat", "system", "prompt", "stop"])
def test_text_that_is_not_utf8_is_refused_in_one_line(run_cli, tiny_dir, tmp_path, args, option):
    # A str with surrogate escapes: subprocess passes it to the child as the original bytes.
    line = one_line_error(run_cli("generate", "--model", tiny_dir, "--temporary", *args,
                                  "--state-dir", tmp_path / "s"), option, "not valid UTF-8")
    assert "byte 0x" in line


# ---- pinned sessions across invocations ---------------------------------------------------------
def _sessions(capsys, *args) -> tuple[int, str, str]:
    """`amber-engine sessions ...` in this process (each call loads the model and a new manager)."""
    rc = main(["sessions", *map(str, args)])
    out, err = capsys.readouterr()
    return rc, out, err


def test_pinned_session_resumes_across_invocations_and_sessions_commands(run_cli, tiny_dir, tmp_path, capsys):
    state = tmp_path / "state"
    sid = str(uuid.uuid4())
    common = ["--model", tiny_dir, "--session", sid, "--pinned", "--json", "--greedy", "--max-tokens", "8",
              "--state-dir", state]
    first = parse_json(run_cli("generate", "--chat", "Hello there", *common))
    assert first["session"] == sid and first["resume"] == "none" and first["reused_tokens"] == 0
    assert first["provider"] == "CPU" and first["context_window"] == 512
    second = parse_json(run_cli("generate", "--chat", "Tell me more", *common))
    assert second["resume"] == "disk" and second["reused_tokens"] > 0
    assert second["fallback_reason"] is None
    assert second["prefilled_tokens"] == second["prompt_tokens"] - second["reused_tokens"]
    assert second["reused_tokens"] > first["prompt_tokens"] // 2
    assert (state / "sessions" / f"{sid}.json").is_file()

    where = ["--state-dir", state, "--model", tiny_dir]
    rc, out, err = _sessions(capsys, "list", *where)
    assert rc == 0 and err == ""
    lines = out.strip().splitlines()
    assert len(lines) == 1 and sid in lines[0] and "pinned" in lines[0]

    rc, out, _ = _sessions(capsys, "show", sid, *where)
    shown = json.loads(out)
    assert rc == 0 and shown["session_id"] == sid and shown["kind"] == "pinned"
    assert shown["kv_location"] == "disk" and shown["kv_bytes_disk"] > 0 and shown["tokens"] > 0
    assert [m["role"] for m in shown["transcript"]] == ["user", "assistant", "user", "assistant"]
    assert shown["transcript"][0]["content"] == "Hello there"
    assert shown["transcript"][3]["content"] == second["text"]

    rc, _, _ = _sessions(capsys, "unpin", sid, *where)
    assert rc == 0
    assert not [p for p in (state / "tails").iterdir()]
    rc, out, _ = _sessions(capsys, "show", sid, *where)
    assert json.loads(out)["kind"] == "regular" and json.loads(out)["kv_bytes_disk"] == 0

    rc, out, _ = _sessions(capsys, "gc", *where)
    report = json.loads(out)
    assert rc == 0 and {"temp_files", "orphan_tails"} <= set(report)

    rc, _, _ = _sessions(capsys, "delete", sid, *where)
    assert rc == 0 and not (state / "sessions" / f"{sid}.json").exists()
    rc, out, _ = _sessions(capsys, "list", *where)
    assert rc == 0 and out.strip() == ""


def test_float16_kv_store_across_invocations(run_cli, tiny_dir, tmp_path, capsys):
    state = tmp_path / "state"
    sid = str(uuid.uuid4())
    common = ["--model", tiny_dir, "--session", sid, "--pinned", "--json", "--greedy", "--max-tokens", "8",
              "--state-dir", state, "--kv-store", "float16"]
    parse_json(run_cli("generate", "--chat", "Hello there", *common))
    second = parse_json(run_cli("generate", "--chat", "Tell me more", *common))
    assert second["resume"] == "disk" and second["fallback_reason"] is None and second["reused_tokens"] > 0
    header = next((state / "tails").glob("*.kvt")).read_bytes()[:4096]    # a short chat: its tail only
    assert b'"dtype":"float16"' in header
    rc, out, _ = _sessions(capsys, "show", sid, "--state-dir", state, "--model", tiny_dir, "--kv-store", "float16")
    assert rc == 0 and json.loads(out)["kv_location"] == "disk"
    # The lossless setting cannot use it: one re-prefill, the chat itself intact.
    third = parse_json(run_cli("generate", "--chat", "And then?", *common[:-2]))
    assert third["resume"] != "disk" and "another KV store setting" in third["fallback_reason"]


def test_sessions_command_errors(capsys, tiny_dir, tmp_path):
    where = ["--state-dir", tmp_path / "state", "--model", tiny_dir]
    for args, needle in ((["show"], "needs a session id"), (["show", "not-a-uuid"], "")):
        rc, out, err = _sessions(capsys, *args, *where)
        assert rc == 2 and out == ""
        assert len(err.strip().splitlines()) == 1 and needle in err and "Traceback" not in err
    rc, _, err = _sessions(capsys, "list", "--state-dir", tmp_path / "s", "--model", tmp_path / "none")
    assert rc == 2 and "no such model folder" in err and len(err.strip().splitlines()) == 1


# ---- a reply cut inside a character ------------------------------------------------------------
def _cut_mid_character(tiny_model, tmp_path) -> tuple[int, str]:
    """A seed whose 3-token reply to "Hello" ends inside a multi-byte character, and its text."""
    from engine.api import GenerationResult, SamplingParams
    from engine.sessions.manager import SessionManager

    m = SessionManager(tiny_model, tmp_path / "search-state")
    try:
        sid = m.open(None, kind="temporary").session_id
        for seed in range(200):
            sampling = SamplingParams(temperature=4.0, top_k=0, top_p=1.0, min_p=0.0,
                                      repetition_penalty=1.0, seed=seed, max_new_tokens=3)
            r = next(e for e in m.generate_text(sid, "Hello", sampling) if isinstance(e, GenerationResult))
            if tiny_model.tokenizer.decode(r.token_ids).endswith("\ufffd"):
                return seed, r.text
    finally:
        m.shutdown()
    pytest.fail("no reply cut mid-character in 200 seeds")


def test_generate_cut_at_max_tokens_never_prints_a_broken_character(run_cli, tiny_dir, tiny_model, tmp_path):
    seed, text = _cut_mid_character(tiny_model, tmp_path)
    args = ("generate", "--model", tiny_dir, "--prompt", "Hello", "--temperature", "4", "--top-k", "0",
            "--top-p", "1", "--min-p", "0", "--repetition-penalty", "1", "--seed", str(seed),
            "--max-tokens", "3", "--provider", "cpu")
    data = parse_json(run_cli(*args, "--json"))
    assert data["finish_reason"] == "length"
    assert tiny_model.tokenizer.decode(data["tokens"]).endswith("\ufffd")   # cut mid-character
    assert "\ufffd" not in data["text"]
    assert data["text"] == text == tiny_model.tokenizer.decode(data["tokens"]).replace("\ufffd", "")
    plain = run_cli(*args)
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout == text + "\n"


def test_a_base_model_refuses_chat_and_continues_a_prompt(run_cli, tmp_path):
    """A model without a chat template: --chat is one line naming it and --prompt; --prompt works."""
    from engine.convert import convert_gguf
    from tests.support.server import TINY
    from tests.support.tiny_gguf import write_tiny_gguf
    src = write_tiny_gguf(tmp_path / "tiny-base.gguf", TINY, omit=("tokenizer.chat_template",))
    folder = convert_gguf(src.path, tmp_path / "tiny-base")
    one_line_error(run_cli("generate", "--model", folder, "--chat", "hi", "--state-dir", tmp_path / "s"),
                   "tiny-base has no chat template (a base model)", "--prompt")
    proc = run_cli("generate", "--model", folder, "--prompt", "Once upon a time", "--max-tokens", "3", "--json",
                   "--state-dir", tmp_path / "s")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert 1 <= out["generated_tokens"] <= 3 and out["finish_reason"] in ("length", "stop")
