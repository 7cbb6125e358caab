"""`amber-engine models ...` as a user runs it (a child process) against the local Hub."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


from tests.support.hub_server import REPO, TOKEN, Repo

ROOT = Path(__file__).resolve().parents[2]


def cli(hub, home: Path, *args: str, stdin: str | None = None, **env: str) -> subprocess.CompletedProcess:
    full = dict(os.environ)
    full.update({"AMBER_HOME": str(home), "HF_ENDPOINT": hub.url,
                 "PYTHONPATH": os.pathsep.join([str(ROOT)] + ([full["PYTHONPATH"]] if full.get("PYTHONPATH") else []))})
    for var in ("HF_TOKEN", "HF_HUB_OFFLINE"):
        full.pop(var, None)
    full.update(env)
    return subprocess.run([sys.executable, "-m", "engine", "models", *args], cwd=ROOT, env=full, input=stdin,
                          capture_output=True, text=True, timeout=300)


def test_search_files_download_list_remove(hub, tmp_path):
    home = tmp_path / "cli-home"
    r = cli(hub, home, "search", "tiny")
    assert r.returncode == 0 and REPO in r.stdout and "llama" in r.stdout, r.stderr
    r = cli(hub, home, "files", REPO, "--json")
    data = json.loads(r.stdout)
    assert {f["quant"] for f in data["files"]} == {"Q8_0", "F32"}
    assert all(f["verdict"] in ("fits", "tight", "too large") for f in data["files"])
    r = cli(hub, home, "download", REPO, "Q8_0")
    assert r.returncode == 0, r.stderr
    dest = Path(r.stdout.strip())
    assert dest == home / "models" / "Tiny-Chat-Q8_0" and (dest / "model.onnx").is_file()
    assert "downloading Tiny-Chat-Q8_0.gguf" in r.stderr and "converting to ONNX" in r.stderr
    assert "memory ~" in r.stderr and "fits" in r.stderr
    r = cli(hub, home, "list")
    assert "Tiny-Chat-Q8_0" in r.stdout and f"{REPO} (Q8_0)" in r.stdout
    r = cli(hub, home, "remove", "Tiny-Chat-Q8_0")
    assert r.returncode == 0 and not dest.exists()
    r = cli(hub, home, "remove", "Tiny-Chat-Q8_0")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "no model named" in r.stderr


def test_errors_are_one_line_exit_2(hub, tmp_path):
    home = tmp_path / "cli-home"
    hub.corrupt.add("Tiny-Chat-Q8_0.gguf")
    r = cli(hub, home, "download", REPO, "Q8_0")
    assert r.returncode == 2 and "SHA-256 mismatch" in r.stderr and "Traceback" not in r.stderr
    assert not any(p for p in (home / "models").iterdir() if not p.name.startswith(".")) \
        if (home / "models").exists() else True
    r = cli(hub, home, "search", "tiny", HF_HUB_OFFLINE="1")
    assert r.returncode == 2 and r.stderr.strip().endswith("models cannot be searched or downloaded")
    r = cli(hub, home, "download", "not a repo")
    assert r.returncode == 2 and "not a Hugging Face repo id" in r.stderr and r.stderr.count("\n") == 1


def test_gated_repo_and_the_token_command(hub, tiny_ggufs, tmp_path):
    home = tmp_path / "cli-home"
    hub.repos["g/Gated-GGUF"] = Repo(files={"Gated-Q8_0.gguf": tiny_ggufs["Q8_0"]}, gated=True)
    r = cli(hub, home, "files", "g/Gated-GGUF")
    assert r.returncode == 2 and "gated" in r.stderr and "token" in r.stderr
    r = cli(hub, home, "files", "g/Gated-GGUF", HF_TOKEN=TOKEN)
    assert r.returncode == 0 and "Q8_0" in r.stdout
    r = cli(hub, home, "token", stdin=TOKEN + "\n")
    assert r.returncode == 0 and TOKEN not in r.stdout + r.stderr
    r = cli(hub, home, "files", "g/Gated-GGUF")
    assert r.returncode == 0, r.stderr


def test_recommended_without_a_query_needs_no_network(hub, tmp_path):
    r = cli(hub, tmp_path / "h", "search", HF_HUB_OFFLINE="1")
    assert r.returncode == 0 and "bartowski/Llama-3.2-1B-Instruct-GGUF" in r.stdout
    assert not hub.requests
