"""Hub search and a repo's downloadable files, grouped by quantization, with sizes and SHA-256."""
from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from .client import check_online, endpoint, get_json, hub_errors
from .errors import HubError

MAX_RESULTS = 50
_QUANT = re.compile(r"^(I?Q\d(?:_[0-9A-Z]+)*|BF16|F16|F32|FP16|FP32)$", re.IGNORECASE)
_SHARD = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95}$", re.ASCII)
_ARCH = re.compile(r"^[A-Za-z0-9][\w.-]{0,63}$", re.ASCII)     # a GGUF architecture: llama, qwen2, gpt-oss
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
MAX_COUNT = 1 << 62
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
    """A repo file name that may become a local path: relative, no `..`, no odd characters (no
    control or format characters either: a name is also shown on a terminal)."""
    parts = path.split("/")
    return (0 < len(path) <= 300 and not path.startswith("/") and "\\" not in path
            and all(unicodedata.category(c) not in ("Cc", "Cf") for c in path)
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
    what = f"search '{query}'"
    # One request, no retries: huggingface_hub's list_models pages with a backoff of ~25 s
    # before it reports an unreachable endpoint; the parser is Amber's own (every field checked).
    items = get_json(f"{endpoint()}/api/models", what, params=params, token=token)
    return hits_from_json(items, kind, limit, what)


def hits_from_json(items: Any, kind: str, limit: int = MAX_RESULTS, what: str = "search") -> list[RepoHit]:
    """The search answer as hits: an item with a missing or mistyped field is left out; an answer
    that is not a list, or has items but none usable, is a one-line HubError."""
    if not isinstance(items, list):
        raise HubError(f"{what}: the Hub's search answer is malformed (not a list)")
    hits = [hit for hit in (_hit(item, kind) for item in items[:limit]) if hit is not None]
    if items and not hits:
        raise HubError(f"{what}: the Hub's search answer is malformed (no usable item)")
    return hits


def _hit(item: Any, kind: str) -> RepoHit | None:
    if not isinstance(item, dict):
        return None
    repo = item.get("id")
    if not isinstance(repo, str) or not _REPO_ID.match(repo) or ".." in repo:
        return None
    downloads, likes = _count(item.get("downloads")), _count(item.get("likes"))
    gated, arch = _gated(item.get("gated")), _architecture(item.get("gguf"))
    if downloads is None or likes is None or gated is None or arch is None:
        return None
    return RepoHit(repo=repo, downloads=downloads, likes=likes, gated=gated, kind=kind, architecture=arch)


def _count(value: Any) -> int | None:
    """A download/like count: absent is 0; anything but a non-negative integer is None (bad)."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
        return None
    return value


def _gated(value: Any) -> bool | None:
    """The Hub says false, "auto" or "manual" (any short word is taken as gated); None (bad) for
    anything else."""
    if value is None or isinstance(value, bool):
        return bool(value)
    if isinstance(value, str) and re.fullmatch(r"[a-z]{1,20}", value):
        return True
    return None


def _architecture(gguf: Any) -> str | None:
    """The GGUF architecture from the Hub's `gguf` block ("" when absent); None (bad) when it is
    not a plain identifier."""
    if gguf is None:
        return ""
    if not isinstance(gguf, dict):
        return None
    arch = gguf.get("architecture")
    if arch is None or arch == "":
        return ""
    return arch if isinstance(arch, str) and _ARCH.match(arch) else None


def repo_files(repo: str, revision: str | None = None, token: str | None = None) -> RepoFiles:
    """The repo's GGUF quantizations and ONNX graphs, with sizes and the Hub's SHA-256."""
    check_online()
    repo = check_repo_id(repo)
    url = f"{endpoint()}/api/models/{repo}" + (f"/revision/{quote(revision, safe='')}" if revision else "")
    return listing_from_json(repo, get_json(url, repo, params={"blobs": True}, token=token))


def listing_from_json(repo: str, data: Any) -> RepoFiles:
    """The Hub's model-info answer as a listing: every field used is checked; a file whose name
    could not be a safe local path is left out; anything else malformed is a one-line HubError."""
    with hub_errors(repo):
        return _listing(repo, data)


def _listing(repo: str, data: Any) -> RepoFiles:
    if not isinstance(data, dict):
        raise HubError(f"{repo}: the Hub's answer is malformed (not an object)")
    siblings = data.get("siblings")
    if siblings is None:
        siblings = []
    if not isinstance(siblings, list):
        raise HubError(f"{repo}: the Hub's answer is malformed (its file list is not a list)")
    files = [f for f in (_file(repo, s) for s in siblings) if f is not None]
    gated, arch = _gated(data.get("gated")), _architecture(data.get("gguf"))
    if gated is None:
        raise HubError(f"{repo}: the Hub's answer is malformed (gated)")
    if arch is None:
        raise HubError(f"{repo}: the Hub's answer names an invalid architecture")
    sha = data.get("sha")
    revision = sha if isinstance(sha, str) and _COMMIT.match(sha) else "main"
    return RepoFiles(repo=repo, revision=revision, gated=gated, architecture=arch, variants=_variants(files))


def _file(repo: str, s: Any) -> HubFile | None:
    if not isinstance(s, dict) or not isinstance(s.get("rfilename"), str):
        raise HubError(f"{repo}: the Hub's answer is malformed (a file without a name)")
    name = s["rfilename"]
    if not safe_path(name):
        return None                   # a name that could escape the download folder: never used
    lfs = s.get("lfs")
    if lfs is not None and not isinstance(lfs, dict):
        raise HubError(f"{repo}: the Hub's answer is malformed (LFS metadata of {name})")
    size = _size(repo, name, (lfs.get("size") if lfs else s.get("size")) or 0)
    sha = lfs.get("sha256") if lfs else ""
    return HubFile(name, size, sha if isinstance(sha, str) and _SHA256.match(sha) else "")


def _size(repo: str, name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
        raise HubError(f"{repo}: the Hub's answer has an invalid size for {name}")
    return value


def _variants(files: list[HubFile]) -> list[Variant]:
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
    return sorted(variants.values(), key=lambda v: (v.kind != "gguf", v.size))
