"""Hub search and a repo's downloadable files, grouped by quantization, with sizes and SHA-256."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from .client import api, check_online, endpoint, hub_errors, resolve_token
from .errors import HubError

MAX_RESULTS = 50
_QUANT = re.compile(r"^(I?Q\d(?:_[0-9A-Z]+)*|BF16|F16|F32|FP16|FP32)$", re.IGNORECASE)
_SHARD = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95}$")
# Files an ONNX model folder needs besides the graph and its external data
ONNX_SIDE_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                   "special_tokens_map.json", "chat_template.jinja", "chat_template.json")


@dataclass(frozen=True)
class RepoHit:
    repo: str
    downloads: int
    likes: int
    gated: bool
    kind: str                 # "gguf" | "onnx"
    architecture: str         # from the Hub's GGUF metadata when it has it, else ""


@dataclass(frozen=True)
class HubFile:
    path: str
    size: int
    sha256: str               # from the Hub's LFS metadata; "" for small non-LFS files


@dataclass
class Variant:
    """One downloadable model in a repo: a GGUF quantization (one file, or shards) or an ONNX graph."""
    quant: str
    files: list[HubFile] = field(default_factory=list)
    kind: str = "gguf"

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def name(self) -> str:
        return self.files[0].path if self.files else ""

    @property
    def split(self) -> bool:
        return self.kind == "gguf" and len(self.files) > 1


@dataclass
class RepoFiles:
    repo: str
    revision: str             # the commit the listing is from: downloads pin it
    gated: bool
    architecture: str
    variants: list[Variant]

    def find(self, name_or_quant: str) -> Variant:
        want = name_or_quant.strip()
        for v in self.variants:
            if want in (v.name, v.quant) or any(f.path == want for f in v.files):
                return v
        lowered = [v for v in self.variants if v.quant.lower() == want.lower()]
        if lowered:
            return lowered[0]
        choices = ", ".join(v.quant for v in self.variants) or "none"
        raise HubError(f"{self.repo}: no file or quantization '{want}' (available: {choices})")


def safe_path(path: str) -> bool:
    """A repo file name that may become a local path: relative, no `..`, no odd characters."""
    parts = path.split("/")
    return (0 < len(path) <= 300 and not path.startswith("/") and "\\" not in path and "\x00" not in path
            and all(p not in ("", ".", "..") for p in parts) and len(parts) <= 4
            and not re.match(r"^[A-Za-z]:", path))


def check_repo_id(repo: str) -> str:
    repo = repo.strip()
    if not _REPO_ID.match(repo) or ".." in repo:
        raise HubError(f"'{repo}' is not a Hugging Face repo id (owner/name)")
    return repo


def quant_of(filename: str) -> str:
    """`Llama-3.2-1B-Instruct-Q4_K_M.gguf` -> `Q4_K_M`; "" when the name carries none."""
    stem = _SHARD.sub(".gguf", filename.rsplit("/", 1)[-1])
    stem = re.sub(r"\.gguf$", "", stem, flags=re.IGNORECASE)
    for token in reversed(re.split(r"[-.]", stem)):
        if _QUANT.match(token):
            return token.upper()
    return ""


def search(query: str, limit: int = 20, kind: str = "gguf", token: str | None = None) -> list[RepoHit]:
    """Repos matching `query` with GGUF files (kind="gguf") or ONNX graphs (kind="onnx"), most downloaded first."""
    check_online()
    limit = max(1, min(int(limit), MAX_RESULTS))
    query = query.strip()[:200]
    params: dict[str, Any] = {"filter": kind, "sort": "downloads", "limit": limit,
                              "expand": ["downloads", "likes", "gated", "gguf"]}
    if query:
        params["search"] = query
    with hub_errors(f"search '{query}'"):
        # One request, no retries: huggingface_hub's list_models pages with a backoff of ~25 s
        # before it reports an unreachable endpoint; the rest is its session, headers and parser.
        from huggingface_hub import ModelInfo
        from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status
        r = get_session().get(f"{endpoint()}/api/models", params=params, timeout=20,
                              headers=build_hf_headers(token=resolve_token(token) or False))
        hf_raise_for_status(r)
        items = r.json()
        if not isinstance(items, list):
            raise HubError("the Hub's search answer is not a list")
        found = [ModelInfo(**{**item, "siblings": None}) for item in items[:limit] if isinstance(item, dict)]
    hits = []
    for m in found:
        gguf_info = getattr(m, "gguf", None) or {}
        arch = str(gguf_info.get("architecture") or "") if isinstance(gguf_info, dict) else ""
        hits.append(RepoHit(repo=m.id, downloads=int(m.downloads or 0), likes=int(m.likes or 0),
                            gated=bool(m.gated), kind=kind, architecture=arch))
    return hits


def repo_files(repo: str, revision: str | None = None, token: str | None = None) -> RepoFiles:
    """The repo's GGUF quantizations and ONNX graphs, with sizes and the Hub's SHA-256."""
    check_online()
    repo = check_repo_id(repo)
    with hub_errors(repo):
        info = api(token).model_info(repo, revision=revision, files_metadata=True)
        return group_files(repo, info)


def listing_from_json(repo: str, data: Any) -> RepoFiles:
    """What `repo_files` does with the Hub's JSON answer (huggingface_hub's parser, then ours)."""
    from huggingface_hub import ModelInfo
    with hub_errors(repo):
        if not isinstance(data, dict):
            raise HubError(f"{repo}: the Hub's answer is malformed")
        return group_files(repo, ModelInfo(**{**data, "siblings": data.get("siblings")}))


def _size(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise HubError("the Hub's answer has an invalid file size")
    return value


def group_files(repo: str, info: Any) -> RepoFiles:
    files: list[HubFile] = []
    for s in info.siblings or []:
        if not isinstance(s.rfilename, str) or not safe_path(s.rfilename):
            continue                  # a name that could escape the download folder: never used
        lfs = s.lfs
        size = _size((lfs.size if lfs else s.size) or 0)
        sha = lfs.sha256 if lfs and isinstance(lfs.sha256, str) and re.match(r"^[0-9a-f]{64}$", lfs.sha256) else ""
        files.append(HubFile(s.rfilename, size, sha))
    variants: dict[str, Variant] = {}
    for f in files:
        low = f.path.lower()
        base = low.rsplit("/", 1)[-1]
        if low.endswith(".gguf") and "mmproj" not in base:    # mmproj: a vision projector, not a model
            key = _SHARD.sub("", f.path)
            q = quant_of(f.path) or base.removesuffix(".gguf")
            variants.setdefault("gguf:" + key, Variant(q, kind="gguf")).files.append(f)
        elif low.endswith(".onnx") and base.startswith(("model", "decoder_model_merged")):
            q = "ONNX" + base.removesuffix(".onnx").replace("decoder_model_merged", "").replace("model", "")
            v = variants.setdefault("onnx:" + f.path, Variant(q, kind="onnx"))
            v.files.append(f)
            data = [g for g in files if g.path.startswith(f.path + "_data") or g.path.startswith(f.path + ".data")]
            v.files.extend(data)
            side_dir = f.path.rsplit("/", 1)[0] + "/" if "/" in f.path else ""
            for name in ONNX_SIDE_FILES:   # at the repo root, or next to the graph
                for g in files:
                    if g.path in (name, side_dir + name) and g not in v.files:
                        v.files.append(g)
    for v in variants.values():
        v.files.sort(key=lambda f: f.path if v.kind == "gguf" else (not f.path.endswith(".onnx"), f.path))
    gguf_info = getattr(info, "gguf", None) or {}
    arch = str(gguf_info.get("architecture") or "") if isinstance(gguf_info, dict) else ""
    ordered = sorted(variants.values(), key=lambda v: (v.kind != "gguf", v.size))
    revision = info.sha if isinstance(info.sha, str) and re.match(r"^[0-9a-f]{40}$", info.sha) else "main"
    return RepoFiles(repo=repo, revision=revision, gated=bool(info.gated),
                     architecture=arch, variants=ordered)
