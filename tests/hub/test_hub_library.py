"""engine.hub against a local Hub (tests/hub/hub_server.py) through the real huggingface_hub client:
search, listing by quantization, fit, download + convert + load + generate, interrupt-and-resume,
checksum mismatch, disk full, offline, gated repos, ONNX repos, list and remove."""
from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path

import pytest


from tests.support.hub_server import REPO, TOKEN, Repo

from engine import hub as H
from engine.base import paths


def models() -> Path:
    return paths.models_dir()


def visible(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if not p.name.startswith(".")) if root.is_dir() else []


# ---- search and listing ------------------------------------------------------------------------


def test_search(hub):
    hub.repos["other/Unrelated-GGUF"] = Repo(files={"x-Q4_0.gguf": b"x" * 2000}, downloads=99)
    hub.repos["other/Tiny-Onnx"] = Repo(files={"onnx/model.onnx": b"o" * 2000}, tags=("onnx",))
    hits = H.search("tiny")
    assert [h.repo for h in hits] == [REPO]
    assert hits[0].architecture == "llama" and hits[0].kind == "gguf" and not hits[0].gated
    everything = H.search("")
    assert [h.repo for h in everything] == ["other/Unrelated-GGUF", REPO]      # most downloaded first
    assert [h.repo for h in H.search("tiny", kind="onnx")] == ["other/Tiny-Onnx"]
    q = hub.get_requests("GET", "/api/models")[0]["query"]
    assert "filter=gguf" in q and "search=tiny" in q



def test_repo_files_grouped_by_quant_with_sizes_and_sha(hub, tiny_ggufs):
    listing = hub.repos[REPO]
    files = H.repo_files(REPO)
    assert files.revision == listing.commit and files.architecture == "llama"
    assert sorted(v.quant for v in files.variants) == ["F32", "Q8_0"]
    q8 = files.find("Q8_0")
    assert q8.size == len(tiny_ggufs["Q8_0"])
    assert q8.files[0].sha256 == hashlib.sha256(tiny_ggufs["Q8_0"]).hexdigest()
    assert files.find("Tiny-Chat-F32.gguf").quant == "F32"
    with pytest.raises(H.HubError, match="no file or quantization 'Q2_K'.*available: "):
        files.find("Q2_K")


def test_split_and_mmproj_files_are_grouped(hub):
    hub.repos["o/Big-GGUF"] = Repo(files={"Big-Q4_K_M-00001-of-00002.gguf": b"a" * 2000,
                                          "Big-Q4_K_M-00002-of-00002.gguf": b"b" * 2000,
                                          "mmproj-Big-f16.gguf": b"m" * 2000})
    files = H.repo_files("o/Big-GGUF")
    assert [(v.quant, len(v.files), v.split) for v in files.variants] == [("Q4_K_M", 2, True)]
    with pytest.raises(H.HubError, match="split into 2 files"):
        H.plan("o/Big-GGUF")


def test_fit_verdicts(tmp_path):
    gb = 1 << 30
    assert H.estimate(gb, "Q8_0", tmp_path, memory_total=16 * gb).verdict == "fits"
    assert H.estimate(4 * gb, "Q4_K_M", tmp_path, memory_total=12 * gb).verdict == "tight"
    assert H.estimate(8 * gb, "Q4_K_M", tmp_path, memory_total=8 * gb).verdict == "too large"
    f = H.estimate(1000, "Q8_0", tmp_path, already=400, memory_total=16 * gb)
    assert f.download_bytes == 600 and f.disk_bytes == 600 + 1100


def test_bad_repo_ids_are_refused_before_any_request(hub):
    for bad in ("../etc", "no-slash", "a/b/c", "a/../b"):
        with pytest.raises(H.HubError, match="not a Hugging Face repo id"):
            H.repo_files(bad)
    assert not hub.requests


def test_unknown_repo_is_one_line(hub):
    with pytest.raises(H.AuthRequired, match="not found, or private"):
        H.repo_files("nobody/nothing")


# ---- download, convert, load, generate ----------------------------------------------------------
def test_download_convert_and_the_model_generates(hub, tiny_ggufs):
    seen = []
    p = H.plan(REPO, "Q8_0")
    assert p.name == "Tiny-Chat-Q8_0" and p.fit.download_bytes == len(tiny_ggufs["Q8_0"])
    dest = H.install(p, progress=seen.append)
    assert dest == models() / "Tiny-Chat-Q8_0" and (dest / "model.onnx").is_file()
    assert visible(models()) == ["Tiny-Chat-Q8_0"]
    assert not (models() / ".downloads").exists() or not any((models() / ".downloads").iterdir())
    stages = [s.stage for s in seen]
    assert stages.index("download") < stages.index("verify") < stages.index("convert")
    last_dl = [s for s in seen if s.stage == "download"][-1]
    assert last_dl.done == last_dl.total == len(tiny_ggufs["Q8_0"])
    conv = [s for s in seen if s.stage == "convert"]
    assert conv[-1].done == conv[-1].total > 0
    # it is in the list (with where it came from) and it loads and generates
    [inst] = H.list_installed()
    assert inst.name == "Tiny-Chat-Q8_0" and inst.source == f"{REPO} (Q8_0)"
    from engine.api import GenerationResult, SamplingParams
    from engine.generation.generate import Generator
    from engine.runtime.model import load_model
    gen = Generator(load_model(dest, provider="cpu", threads=1))
    events = list(gen.stream(gen.new_cache(), gen.encode_chat([{"role": "user", "content": "Hello"}]),
                             SamplingParams(greedy=True, max_new_tokens=5)))
    result = events[-1]
    assert isinstance(result, GenerationResult) and 0 < len(result.token_ids) <= 5
    # the GET carried no token (public repo) and pinned the listed commit
    gets = hub.get_requests("GET", "/resolve/")
    assert all(r["auth"] is None for r in gets)
    assert all(f"/resolve/{hub.repos[REPO].commit}/" in r["path"] for r in gets)


def test_interrupted_download_resumes_with_a_range_request(hub, tiny_ggufs, monkeypatch):
    data = tiny_ggufs["Q8_0"]
    hub.cut["Tiny-Chat-Q8_0.gguf"] = len(data) // 3
    monkeypatch.setattr("engine.hub.download.RETRIES", 0)      # first run: give up at the drop
    p = H.plan(REPO, "Q8_0")
    with pytest.raises(H.OfflineError, match="connection"):
        H.install(p)
    part = p.work / "files" / "Tiny-Chat-Q8_0.gguf.part"
    assert part.stat().st_size == len(data) // 3
    assert visible(models()) == []                               # nothing half-made in the picker
    # "restart": a new plan sees the partial file, a second run asks only for the rest
    p2 = H.plan(REPO, "Q8_0")
    assert p2.fit.download_bytes == len(data) - len(data) // 3
    dest = H.install(p2)
    gets = hub.get_requests("GET", "/resolve/")
    assert gets[-1]["range"] == f"bytes={len(data) // 3}-"
    assert (dest / "model.onnx").is_file() and not p2.work.exists()


def test_a_dropped_connection_is_resumed_within_the_same_run(hub, tiny_ggufs):
    hub.cut["Tiny-Chat-Q8_0.gguf"] = 1000
    dest = H.install(H.plan(REPO, "Q8_0"))
    assert [r["range"] for r in hub.get_requests("GET", "/resolve/")] == [None, "bytes=1000-"]
    assert (dest / "model.onnx").is_file()


def test_cancel_keeps_the_part_and_a_later_run_continues(hub, tiny_ggufs, monkeypatch):
    monkeypatch.setattr("engine.hub.download.CHUNK", 4096)

    class CancelAfter:
        def __init__(self, n: int) -> None:
            self.n = n

        def is_set(self) -> bool:
            self.n -= 1
            return self.n < 0
    p = H.plan(REPO, "Q8_0")
    with pytest.raises(H.Cancelled):
        H.install(p, cancel=CancelAfter(3))
    part = p.work / "files" / "Tiny-Chat-Q8_0.gguf.part"
    kept = part.stat().st_size
    assert 0 < kept < len(tiny_ggufs["Q8_0"]) and visible(models()) == []
    H.install(H.plan(REPO, "Q8_0"))
    assert hub.get_requests("GET", "/resolve/")[-1]["range"] == f"bytes={kept}-"


def test_checksum_mismatch_is_a_clear_error_and_nothing_is_kept(hub):
    hub.corrupt.add("Tiny-Chat-Q8_0.gguf")
    p = H.plan(REPO, "Q8_0")
    with pytest.raises(H.ChecksumMismatch, match="SHA-256 mismatch.*deleted"):
        H.install(p)
    leftovers = [q for q in (p.work / "files").rglob("*") if q.is_file()] if p.work.exists() else []
    assert leftovers == [] and visible(models()) == []


def test_disk_full_before_downloading(hub, monkeypatch):
    monkeypatch.setattr("engine.hub.fit.free_space", lambda path: 10)
    p = H.plan(REPO, "Q8_0")
    assert not p.fit.disk_ok
    with pytest.raises(H.DiskFull, match="not enough disk space"):
        H.install(p)
    assert not hub.get_requests("GET", "/resolve/") and visible(models()) == []


def test_disk_full_while_writing(hub, monkeypatch):
    monkeypatch.setattr("engine.hub.download.CHUNK", 4096)

    class FillsUp:
        def __init__(self, f):
            self.f, self.written = f, 0

        def write(self, b):
            if self.written + len(b) > 6000:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "model.gguf.part")
            self.written += len(b)
            return self.f.write(b)

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()
    monkeypatch.setattr("engine.hub.download._open_part", lambda part: FillsUp(part.open("ab")))
    p = H.plan(REPO, "Q8_0")
    with pytest.raises(H.DiskFull, match="disk is full"):
        H.install(p)
    assert not (p.work / "files" / "Tiny-Chat-Q8_0.gguf.part").exists() and visible(models()) == []


def test_offline_mode_is_one_clear_message(hub, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for call in (lambda: H.search("tiny"), lambda: H.plan(REPO)):
        with pytest.raises(H.OfflineError, match="offline mode is on"):
            call()
    assert not hub.requests


def test_unreachable_endpoint_is_one_clear_message(hub, monkeypatch):
    url = hub.url
    hub.stop()
    with pytest.raises(H.OfflineError, match=f"cannot reach {url}"):
        H.search("tiny")


def test_gated_repo_asks_for_a_token_then_works_with_it(hub, tiny_ggufs, monkeypatch):
    hub.repos["gated-org/Gated-GGUF"] = Repo(files={"Gated-Q8_0.gguf": tiny_ggufs["Q8_0"]}, gated=True)
    with pytest.raises(H.AuthRequired, match="gated.*token"):
        H.plan("gated-org/Gated-GGUF")
    monkeypatch.setenv("HF_TOKEN", "hf_wrong")
    with pytest.raises(H.AuthRequired):
        H.plan("gated-org/Gated-GGUF")
    monkeypatch.delenv("HF_TOKEN")
    H.store_token(TOKEN)                     # what the GUI / `models token` does
    token_file = paths.amber_home() / "hf-token"
    assert token_file.stat().st_mode & 0o077 == 0
    dest = H.install(H.plan("gated-org/Gated-GGUF"))
    assert (dest / "model.onnx").is_file()
    assert {r["auth"] for r in hub.get_requests("GET", "/resolve/")} == {f"Bearer {TOKEN}"}


def test_onnx_repo_downloads_as_a_model_folder(hub, tiny_dir_files):
    hub.repos["onnx-org/Tiny-Chat"] = Repo(files=tiny_dir_files, tags=("onnx",))
    p = H.plan("onnx-org/Tiny-Chat")
    assert p.variant.kind == "onnx" and p.name == "Tiny-Chat"
    dest = H.install(p)
    from engine.runtime.model import load_model
    model = load_model(dest, provider="cpu", threads=1)
    assert model is not None and (dest / "model.onnx").is_file() and (dest / "config.json").is_file()


@pytest.fixture(scope="session")
def tiny_dir_files(tiny_ggufs, tmp_path_factory) -> dict[str, bytes]:
    """An optimum-style ONNX repo: graph + data under onnx/, config and tokenizer at the root."""
    from engine.convert import convert_gguf
    src = tmp_path_factory.mktemp("onnx-src") / "t.gguf"
    src.write_bytes(tiny_ggufs["Q8_0"])
    folder = convert_gguf(src, tmp_path_factory.mktemp("onnx-out") / "m", gpu_variant=False)
    out = {}
    for f in folder.iterdir():
        if f.is_file():
            key = f"onnx/{f.name}" if f.name.startswith("model.onnx") else f.name
            out[key] = f.read_bytes()
    return out


def test_list_and_remove(hub):
    H.install(H.plan(REPO, "Q8_0"))
    assert [m.name for m in H.list_installed()] == ["Tiny-Chat-Q8_0"]
    with pytest.raises(H.HubError, match="no model named"):
        H.remove("nothing-here")
    with pytest.raises(H.HubError, match="not a model name"):
        H.remove("../x")
    H.remove("Tiny-Chat-Q8_0")
    assert H.list_installed() == [] and visible(models()) == []


def test_recommended_list_is_data_with_verified_entries():
    recs = H.recommended()
    assert len(recs) >= 6 and all("/" in r.repo and r.quant for r in recs)
    assert {"qwen2", "llama"} <= {r.architecture for r in recs}


def test_unsafe_file_names_from_the_hub_are_never_used(hub, tiny_ggufs):
    hub.repos["evil/Evil-GGUF"] = Repo(files={"../../escape-Q8_0.gguf": tiny_ggufs["Q8_0"],
                                              "/abs-Q4_0.gguf": b"a" * 2000, "ok-Q8_0.gguf": tiny_ggufs["Q8_0"]})
    files = H.repo_files("evil/Evil-GGUF")
    assert [f.path for v in files.variants for f in v.files] == ["ok-Q8_0.gguf"]


def test_a_malformed_search_answer_is_one_line(hub, monkeypatch):
    import json as _json
    real = _json.dumps
    monkeypatch.setattr("tests.support.hub_server.json.dumps", lambda data: real([{"no_id": 1}]) if isinstance(data, list) else real(data))
    with pytest.raises(H.HubError, match="malformed"):
        H.search("tiny")


def test_a_conversion_failure_keeps_the_download_and_says_how_to_delete_it(hub, tiny_ggufs):
    hub.repos["o/Broken-GGUF"] = Repo(files={"Broken-Q8_0.gguf": tiny_ggufs["Q8_0"][:4000]})
    p = H.plan("o/Broken-GGUF")
    with pytest.raises(H.HubError, match=r"conversion failed.*models remove o--Broken-GGUF--Q8_0"):
        H.install(p)
    assert visible(models()) == []
    assert [q.key for q in H.list_pending()] == ["o--Broken-GGUF--Q8_0"]
    H.remove("o--Broken-GGUF--Q8_0")
    assert H.list_pending() == []


def test_an_unsupported_architecture_is_refused_before_downloading(hub, tiny_ggufs):
    hub.repos["o/Future-GGUF"] = Repo(files={"Future-Q8_0.gguf": tiny_ggufs["Q8_0"]}, architecture="mamba9")
    with pytest.raises(H.HubError, match="architecture 'mamba9' is not supported yet"):
        H.plan("o/Future-GGUF")
    assert not hub.get_requests("GET", "/resolve/") and not hub.get_requests("HEAD", "/resolve/")


def test_onnx_repos_default_to_the_4bit_graph(hub):
    files = {"config.json": b"{}", "tokenizer.json": b"{}", "onnx/model.onnx": b"f" * 3000,
             "onnx/model.onnx_data": b"d" * 9000, "onnx/model_q4.onnx": b"q" * 2000,
             "onnx/model_fp16.onnx": b"h" * 2500}
    hub.repos["onnx-org/Many"] = Repo(files=files, tags=("onnx",))
    p = H.plan("onnx-org/Many")
    assert p.variant.quant == "ONNX_q4" and p.name == "Many-q4"
    assert [f.path for f in p.variant.files] == ["onnx/model_q4.onnx", "config.json", "tokenizer.json"]
    full = H.plan("onnx-org/Many", "ONNX")
    assert [f.path for f in full.variant.files] == ["onnx/model.onnx", "config.json", "onnx/model.onnx_data",
                                                    "tokenizer.json"]


def test_a_second_process_cannot_append_to_the_same_partial_download(hub):
    from filelock import FileLock
    p = H.plan(REPO, "Q8_0")
    p.work.mkdir(parents=True)
    with FileLock(str(p.work / ".lock")):      # another process holds it
        with pytest.raises(H.HubError, match="already being downloaded"):
            H.install(p)
    assert not hub.get_requests("GET", "/resolve/")
    assert (H.install(p) / "model.onnx").is_file()
