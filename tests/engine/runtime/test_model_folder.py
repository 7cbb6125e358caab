"""A damaged model folder gets one `ModelLoadError` naming the file and the key.

Each case copies the tiny converted model (tests/engine/conftest.py) and damages one file:
wrong JSON types, generation settings out of range, an empty, truncated, missing or FIFO
`model.onnx.data`, an external-data path leading out of the folder. Also: ONNX Runtime's own
telemetry leaves nothing in the user's home.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from tests.support.bounded import run_bounded
from engine.runtime.model import ModelLoadError, load_model

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def folder(tiny_dir, tmp_path) -> Path:
    dest = tmp_path / "model"
    shutil.copytree(tiny_dir, dest)
    return dest


def refused(folder: Path) -> str:
    with pytest.raises(ModelLoadError) as err:
        run_bounded(lambda: load_model(folder, provider="cpu", threads=1), seconds=60)
    msg = str(err.value)
    assert "\n" not in msg and "Traceback" not in msg, msg
    return msg


def edit_json(path: Path, **changes) -> None:
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


# ---- config.json ----------------------------------------------------------------------------------
@pytest.mark.parametrize("key,value", [
    ("eos_token_id", "x"), ("eos_token_id", [None]), ("eos_token_id", [2, "a"]), ("eos_token_id", -1),
    ("eos_token_id", 2.5), ("eos_token_id", {"id": 2}), ("bos_token_id", True),
    ("max_position_embeddings", "abc"), ("max_position_embeddings", 0), ("max_position_embeddings", -5),
    ("max_position_embeddings", 1e9), ("max_position_embeddings", 2 ** 40),
    ("num_key_value_heads", 0), ("num_key_value_heads", "2"), ("num_attention_heads", [4]),
    ("hidden_size", False), ("head_dim", 16.0),
])
def test_config_value_of_the_wrong_type(folder, key, value):
    edit_json(folder / "config.json", **{key: value})
    msg = refused(folder)
    assert "config.json" in msg and key in msg, msg


@pytest.mark.parametrize("content,words", [
    (b"[1, 2, 3]", "expected a JSON object"),
    (b"", "not valid JSON"),
    (b"{\"a\": ", "not valid JSON"),
    (b"\xff\xfe{}", "not valid JSON"),
    (b"[" * 100_000 + b"]" * 100_000, "not valid JSON"),
    (b"{\"max_position_embeddings\": NaN}", "max_position_embeddings"),
])
def test_config_not_an_object(folder, content, words):
    (folder / "config.json").write_bytes(content)
    msg = refused(folder)
    assert "config.json" in msg and words in msg, msg


def test_config_too_large(folder):
    with open(folder / "config.json", "r+b") as f:
        f.truncate(65 << 20)     # sparse: nothing is written
    assert "more than a config file can be" in refused(folder)


@pytest.mark.parametrize("name", ["config.json", "generation_config.json", "tokenizer_config.json"])
def test_config_file_is_a_fifo(folder, name):
    """Opening a FIFO blocks until someone writes to it: the loader never opens one."""
    (folder / name).unlink()
    os.mkfifo(folder / name)
    assert name in refused(folder)


def test_config_file_is_a_folder(folder):
    (folder / "generation_config.json").unlink()
    (folder / "generation_config.json").mkdir()
    assert "generation_config.json: not a regular file" in refused(folder)


# ---- generation_config.json and tokenizer_config.json -------------------------------------------------
@pytest.mark.parametrize("key,value", [
    ("temperature", "hot"), ("temperature", -1), ("top_p", 5), ("top_k", 2.5), ("min_p", [0.1]),
    ("repetition_penalty", 0), ("do_sample", "yes"), ("eos_token_id", ["x"]), ("pad_token_id", "0"),
])
def test_generation_config_value(folder, key, value):
    edit_json(folder / "generation_config.json", **{key: value})
    msg = refused(folder)
    assert "generation_config.json" in msg and key in msg, msg


@pytest.mark.parametrize("value", [5, ["<|im_end|>"], {"content": 3}])
def test_tokenizer_config_eos_token(folder, value):
    edit_json(folder / "tokenizer_config.json", eos_token=value)
    msg = refused(folder)
    assert "tokenizer_config.json" in msg and "eos_token" in msg, msg


def test_tokenizer_json_garbage(folder):
    (folder / "tokenizer.json").write_bytes(b"\x00\x01 not json")
    assert "tokenizer.json: not a valid tokenizer" in refused(folder)


def test_old_llama_pad_token_minus_one_loads(folder):
    """Old Llama configs write "pad_token_id": -1 for "none"; the engine does not read it."""
    edit_json(folder / "config.json", pad_token_id=-1)
    edit_json(folder / "generation_config.json", pad_token_id=-1)
    assert load_model(folder, provider="cpu", threads=1).eos_token_ids


def test_untouched_folder_still_loads(folder):
    model = load_model(folder, provider="cpu", threads=1)
    assert model.context_window == 512 and model.eos_token_ids


# ---- model.onnx.data ------------------------------------------------------------------------------------
def test_empty_weights_file(folder):
    (folder / "model.onnx.data").write_bytes(b"")
    msg = refused(folder)
    assert "model.onnx.data: empty" in msg, msg


def test_truncated_weights_file(folder):
    data = folder / "model.onnx.data"
    data.write_bytes(data.read_bytes()[:data.stat().st_size // 2])
    msg = refused(folder)
    assert "model.onnx.data: truncated" in msg and "needs bytes up to" in msg, msg


def test_missing_weights_file(folder):
    (folder / "model.onnx.data").unlink()
    assert "model.onnx.data: missing" in refused(folder)


def test_weights_file_is_a_fifo(folder):
    (folder / "model.onnx.data").unlink()
    os.mkfifo(folder / "model.onnx.data")
    assert "model.onnx.data: not a regular file" in refused(folder)


@pytest.mark.parametrize("location", ["../outside.data", "/etc/passwd", "sub/../../x.data"])
def test_external_data_outside_the_folder(folder, location):
    graph = folder / "model.onnx"
    proto = onnx.load(str(graph), load_external_data=False)
    tensor = next(t for t in proto.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL)
    for entry in tensor.external_data:
        if entry.key == "location":
            entry.value = location
    onnx.save(proto, str(graph))
    msg = refused(folder)
    assert "points outside the model folder" in msg and tensor.name in msg, msg


def test_weights_file_linked_from_outside_the_folder(folder, tmp_path):
    """ONNX Runtime itself refuses external data that resolves outside the model folder; Amber
    says so first, in its own words (a link inside the folder is fine)."""
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    data = folder / "model.onnx.data"
    shutil.move(data, blobs / "0123abcd")
    data.symlink_to(blobs / "0123abcd")
    assert "points outside the model folder" in refused(folder)
    data.unlink()
    (folder / "weights").mkdir()
    shutil.move(blobs / "0123abcd", folder / "weights" / "0123abcd")
    data.symlink_to(folder / "weights" / "0123abcd")
    assert load_model(folder, provider="cpu", threads=1).kv.n_layers == 2


# ---- the command line: one line, no ONNX Runtime log lines -------------------------------------------
@pytest.mark.parametrize("damage", ["empty-data", "eos-string", "max-pos-string", "unknown-operator"])
def test_cli_one_line_no_ort_log(folder, run_cli, damage):
    if damage == "empty-data":
        (folder / "model.onnx.data").write_bytes(b"")
    elif damage == "unknown-operator":     # refused by ONNX Runtime itself: still one line
        proto = onnx.load(str(folder / "model.onnx"), load_external_data=False)
        proto.graph.node[3].op_type = "NoSuchOp"
        onnx.save(proto, str(folder / "model.onnx"))
    elif damage == "eos-string":
        edit_json(folder / "config.json", eos_token_id="x")
    else:
        edit_json(folder / "config.json", max_position_embeddings="abc")
    r = run_cli("generate", "--model", folder, "--prompt", "hi", "--max-tokens", "2")
    assert r.returncode == 2, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("amber-engine: error: "), r.stderr
    # ORT's own log lines look like "2026-12-01 10:00:00.0 [E:onnxruntime:, ...]", in red.
    assert ":onnxruntime:" not in r.stderr and "\x1b[" not in r.stderr


# ---- ONNX Runtime telemetry -----------------------------------------------------------------------------
def _ort_traces(home: Path) -> list[str]:
    """What ONNX Runtime's telemetry left under `home` (other libraries' caches, e.g. CUDA's JIT
    cache on a GPU machine, are not its business)."""
    return sorted(str(p.relative_to(home)) for p in home.rglob("*")
                  if "onnxruntime" in str(p).lower() or "microsoft" in str(p).lower())


def _run_in_home(home: Path, code: str) -> subprocess.CompletedProcess:
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "ORT_"))}
    env.update(HOME=str(home), PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=home, capture_output=True, text=True,
                          timeout=300)


def test_engine_start_leaves_no_ort_telemetry(tiny_dir, tmp_path):
    """A bare `import onnxruntime` writes a device id and an event database under ~/.cache; an
    engine start (load + generate) writes nothing under the home folder."""
    bare = _run_in_home(tmp_path / "bare", "import onnxruntime")
    assert bare.returncode == 0, bare.stderr
    if not _ort_traces(tmp_path / "bare"):
        pytest.skip("this ONNX Runtime build records no local telemetry: nothing to turn off")
    code = ("import engine.runtime.model as m, engine.generation.generate as g, engine.api as a\n"
            f"model = m.load_model({str(tiny_dir)!r}, provider='cpu', threads=1)\n"
            "gen = g.Generator(model)\n"
            "list(gen.stream(gen.new_cache(), [1, 2, 3], a.SamplingParams(greedy=True, max_new_tokens=2)))\n"
            "import os; print(os.environ['ORT_DISABLE_TELEMETRY'])\n")
    r = _run_in_home(tmp_path / "engine", code)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "1"
    assert _ort_traces(tmp_path / "engine") == []
