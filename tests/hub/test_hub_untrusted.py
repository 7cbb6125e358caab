"""A hostile or broken Hub, as a user meets it on the command line: deep or mistyped JSON, names
with terminal control sequences, a server that stalls every connection, a repo that does not load.
Each ends in one line on stderr and exit 2 (or the bad item left out), never a traceback or a hang."""
from __future__ import annotations

import json
from pathlib import Path

from tests.hub.test_cli_models import cli
from tests.support.hub_server import REPO, Repo

CONTROL = ("\x1b", "\x07", "\x9b", "\r")


def one_error_line(r) -> str:
    """The error: exit 2, and every line on stderr is one of Amber's (none split, no traceback);
    the last one is the error."""
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.replace("\r", "\n").splitlines()
    assert lines and all(line.startswith("amber-engine: ") for line in lines), r.stderr
    assert lines[-1].startswith("amber-engine: error: "), r.stderr
    return lines[-1]


def clean(text: str) -> bool:
    return not any(c in text for c in CONTROL)


def visible(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if not p.name.startswith(".")) if root.is_dir() else []


def deep(n: int) -> bytes:
    return b"[" * n + b"]" * n


def test_deeply_nested_model_info_is_one_line(hub, tmp_path):
    hub.raw["/api/models/o/Deep"] = b'{"id": "o/Deep", "sha": "' + b"a" * 40 + b'", "siblings": ' + deep(100_000) + b"}"
    err = one_error_line(cli(hub, tmp_path / "h", "files", "o/Deep"))
    assert "o/Deep" in err and "nested" in err
    hub.raw["/api/models/o/Deep"] = b'{"id": "o/Deep", "cardData": {"x": ' + deep(100_000) + b"}}"
    one_error_line(cli(hub, tmp_path / "h", "download", "o/Deep"))


def test_deeply_nested_search_answer_is_one_line(hub, tmp_path):
    hub.raw["/api/models"] = deep(100_000)
    assert "nested" in one_error_line(cli(hub, tmp_path / "h", "search", "tiny"))


def test_search_items_with_mistyped_fields_are_left_out(hub, tmp_path):
    good = {"id": "o/Good-GGUF", "downloads": 7, "likes": 1, "gated": False, "gguf": {"architecture": "llama"}}
    bad = [{"id": "o/Many-GGUF", "downloads": "many"}, {"id": "o/Likes-GGUF", "likes": [1]},
           {"id": "o/Gated-GGUF", "gated": {"x": 1}}, {"id": 5}, {"id": "not a repo id"},
           {"id": "o/Arch-GGUF", "gguf": {"architecture": ["llama"]}}, {"id": "o/Neg-GGUF", "downloads": -1},
           {"id": "o/Huge-GGUF", "downloads": 10 ** 400}, "o/Str-GGUF", None]
    hub.raw["/api/models"] = json.dumps([bad[0], good, *bad[1:]]).encode()
    r = cli(hub, tmp_path / "h", "search", "x", "--json")
    assert r.returncode == 0, r.stderr
    assert [h["repo"] for h in json.loads(r.stdout)] == ["o/Good-GGUF"]
    r = cli(hub, tmp_path / "h", "search", "x")
    assert r.returncode == 0 and "o/Good-GGUF" in r.stdout and "Many" not in r.stdout, r.stderr
    hub.raw["/api/models"] = json.dumps(bad).encode()         # nothing usable at all: say so
    assert "malformed" in one_error_line(cli(hub, tmp_path / "h", "search", "x"))


def test_mistyped_model_info_fields_are_one_line(hub, tmp_path):
    hub.raw["/api/models/o/Odd"] = json.dumps({"id": "o/Odd", "siblings": [
        {"rfilename": "x-Q8_0.gguf", "size": "big"}]}).encode()
    assert "size" in one_error_line(cli(hub, tmp_path / "h", "files", "o/Odd"))
    hub.raw["/api/models/o/Odd"] = json.dumps({"id": "o/Odd", "siblings": {"rfilename": "x"}}).encode()
    assert "malformed" in one_error_line(cli(hub, tmp_path / "h", "files", "o/Odd"))


def test_control_characters_in_remote_names_never_reach_the_terminal(hub, tiny_ggufs, tmp_path):
    home = tmp_path / "h"
    hub.repos["evil/Names-GGUF"] = Repo(
        files={"Tiny-\x1b[2J\x07-Q8_0.gguf": tiny_ggufs["Q8_0"], "ok\x9b31m-Q4_0.gguf": b"q" * 2000,
               "Tiny-Q8_0.gguf": tiny_ggufs["Q8_0"]}, architecture="llama", downloads=3)
    hub.repos["evil/Arch-GGUF"] = Repo(files={"Tiny-Q8_0.gguf": tiny_ggufs["Q8_0"]},
                                       architecture="llama\x1b]0;pwned\x07")
    hub.raw["/api/models"] = json.dumps([
        {"id": "evil/\x1b[31mRed-GGUF\x07", "downloads": 1},
        {"id": "evil/Arch-GGUF", "downloads": 2, "gguf": {"architecture": "llama\x1b]0;pwned\x07"}},
        {"id": "evil/Names-GGUF", "downloads": 3, "gguf": {"architecture": "llama"}}]).encode()
    r = cli(hub, home, "search", "x")
    assert r.returncode == 0 and clean(r.stdout + r.stderr), repr(r.stdout)
    assert r.stdout.split() == ["evil/Names-GGUF", "llama", "3", "downloads"]
    r = cli(hub, home, "files", "evil/Names-GGUF")
    assert r.returncode == 0 and clean(r.stdout + r.stderr), repr(r.stdout)
    assert "Tiny-Q8_0.gguf" in r.stdout and "2J" not in r.stdout and "31m" not in r.stdout
    r = cli(hub, home, "files", "evil/Arch-GGUF")
    assert "invalid architecture" in one_error_line(r) and clean(r.stderr)
    r = cli(hub, home, "download", "evil/Names-GGUF", "Q4_0\x1b[2J\nsecond line")
    err = one_error_line(r)
    assert "no file or quantization" in err and "second line" in err and clean(r.stderr)


def test_a_newline_in_a_file_name_does_not_split_the_error(hub, tiny_ggufs, tmp_path):
    hub.repos["evil/Newline-GGUF"] = Repo(files={"a\nb-Q8_0.gguf": tiny_ggufs["Q8_0"]})
    assert "no GGUF file or ONNX model" in one_error_line(cli(hub, tmp_path / "h", "download", "evil/Newline-GGUF"))


def test_a_server_that_stalls_every_connection_is_given_up(hub, tmp_path):
    home = tmp_path / "h"
    # each of the first 8 GETs sends 1 KB, then nothing: every reconnect makes a little progress
    hub.stall["Tiny-Chat-Q8_0.gguf"] = [1024, 8]
    r = cli(hub, home, "download", REPO, "Q8_0", HF_HUB_DOWNLOAD_TIMEOUT="1", AMBER_HUB_MAX_ATTEMPTS="3")
    err = one_error_line(r)
    assert "3 connections" in err and "run it again to resume" in err
    assert len(hub.get_requests("GET", "/resolve/")) == 3
    assert visible(home / "models") == []
    part = next((home / "models" / ".downloads").rglob("*.gguf.part"))
    assert part.stat().st_size == 3 * 1024                      # kept: the next run resumes it


def test_a_download_past_its_deadline_is_given_up(hub, tmp_path):
    home = tmp_path / "h"
    hub.stall["Tiny-Chat-Q8_0.gguf"] = [1024, 8]
    r = cli(hub, home, "download", REPO, "Q8_0", HF_HUB_DOWNLOAD_TIMEOUT="1", AMBER_HUB_DEADLINE_S="0")
    assert "deadline" in one_error_line(r)
    assert len(hub.get_requests("GET", "/resolve/")) == 1 and visible(home / "models") == []


def test_bad_retry_settings_are_one_line(hub, tmp_path):
    r = cli(hub, tmp_path / "h", "download", REPO, "Q8_0", AMBER_HUB_MAX_ATTEMPTS="lots")
    assert "AMBER_HUB_MAX_ATTEMPTS" in one_error_line(r)
    assert not hub.get_requests("GET", "/resolve/")


def test_an_onnx_repo_that_does_not_load_is_not_installed(hub, tmp_path):
    home = tmp_path / "h"
    hub.repos["junk/Garbage-ONNX"] = Repo(files={"onnx/model.onnx": b"\x00garbage" * 400, "config.json": b"{}",
                                                 "tokenizer.json": b"{}"}, tags=("onnx",))
    err = one_error_line(cli(hub, home, "download", "junk/Garbage-ONNX"))
    assert "does not load" in err and "nothing was installed" in err
    assert visible(home / "models") == []
    left = [p for p in (home / "models").rglob("*") if p.is_file()] if (home / "models").exists() else []
    assert left == [], left
    assert cli(hub, home, "list").stdout.count("partial download") == 0
