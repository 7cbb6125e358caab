"""A small Hugging Face Hub on 127.0.0.1 for the model-library tests (tests/hub, tests/gui).

It answers what huggingface_hub 2.4 asks: model search (`GET /api/models`), model info with file
metadata (`GET /api/models/{repo}[/revision/{rev}]?blobs=true`: siblings, LFS sha256, sizes) and
`HEAD`/`GET /{repo}/resolve/{rev}/{file}` with the X-Repo-Commit / ETag / X-Linked-Etag /
X-Linked-Size headers and Range requests. Gated repos answer 401 + `X-Error-Code: GatedRepo`
without the right token, as the Hub does. Faults for the tests: `cut[path] = n` sends the full
Content-Length, then n bytes, then drops the connection (once per entry); `stall[path] = [n, k]`
sends n bytes on each of the next k GETs of that file, then neither sends nor closes until the
client hangs up; `corrupt` serves a flipped byte; `raw[path] = bytes` answers GET `path` with those
bytes as JSON (a malformed or hostile answer); every request is recorded in `requests`.
"""
from __future__ import annotations

import hashlib
import json
import re
import select
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

TOKEN = "hf_good_token_for_tests"
REPO = "tiny-org/Tiny-Chat-GGUF"     # the public GGUF repo the `hub` fixture serves


@dataclass
class Repo:
    files: dict[str, bytes]
    commit: str = "c0ffee" + "0" * 34
    gated: bool = False
    architecture: str = ""
    downloads: int = 0
    tags: tuple[str, ...] = ("gguf",)
    lfs_threshold: int = 1024        # files at least this big are "LFS" (sha256 listed)


@dataclass
class Hub:
    repos: dict[str, Repo] = field(default_factory=dict)
    cut: dict[str, int] = field(default_factory=dict)
    corrupt: set[str] = field(default_factory=set)
    stall: dict[str, list[int]] = field(default_factory=dict)
    raw: dict[str, bytes] = field(default_factory=dict)
    requests: list[dict[str, Any]] = field(default_factory=list)
    url: str = ""
    server: Any = None
    stopping: threading.Event = field(default_factory=threading.Event)

    def get_requests(self, method: str, path_part: str) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["method"] == method and path_part in r["path"]]

    def stop(self) -> None:
        self.stopping.set()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _sibling(repo: Repo, path: str, data: bytes) -> dict[str, Any]:
    s: dict[str, Any] = {"rfilename": path, "size": len(data), "blobId": hashlib.sha1(data).hexdigest()}
    if len(data) >= repo.lfs_threshold:
        s["lfs"] = {"size": len(data), "sha256": _sha(data), "pointerSize": 134}
    return s


def start(hub: Hub) -> Hub:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:   # quiet
            pass

        def _json(self, code: int, data: Any, headers: dict[str, str] | None = None) -> None:
            body = json.dumps(data).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _gated_refused(self, repo: Repo) -> bool:
            if repo.gated and self.headers.get("Authorization") != f"Bearer {TOKEN}":
                self._json(401, {"error": "Access to model is restricted."},
                           {"X-Error-Code": "GatedRepo", "X-Error-Message": "Access to model is restricted."})
                return True
            return False

        def _not_found(self, code: str = "RepoNotFound") -> None:
            self._json(404 if code != "RepoNotFound" else 401, {"error": "not found"}, {"X-Error-Code": code})

        def do_HEAD(self) -> None:
            self._route()

        def do_GET(self) -> None:
            self._route()

        def _route(self) -> None:
            u = urlparse(self.path)
            path = unquote(u.path)
            hub.requests.append({"method": self.command, "path": path, "range": self.headers.get("Range"),
                                 "auth": self.headers.get("Authorization"), "query": u.query})
            if path in hub.raw and self.command == "GET":
                return self._raw(hub.raw[path])
            if path == "/api/models":
                return self._search(parse_qs(u.query))
            m = re.match(r"^/api/models/([^/]+/[^/]+?)(?:/revision/([^/]+))?$", path)
            if m:
                return self._info(m.group(1), m.group(2))
            m = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path)
            if m:
                return self._resolve(m.group(1), m.group(2), m.group(3))
            self._json(404, {"error": "no such endpoint"})

        def _raw(self, body: bytes) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _hold_until_the_client_hangs_up(self) -> None:
            while not hub.stopping.is_set():
                ready, _, _ = select.select([self.connection], [], [], 0.2)
                if ready:
                    try:
                        if not self.connection.recv(1024):
                            return
                    except OSError:
                        return

        def _search(self, q: dict[str, list[str]]) -> None:
            text = (q.get("search") or [""])[0].lower()
            wanted = q.get("filter") or []
            limit = int((q.get("limit") or ["100"])[0])
            out = []
            for rid, r in sorted(hub.repos.items(), key=lambda kv: -kv[1].downloads):
                if text in rid.lower() and all(f in r.tags for f in wanted):
                    item: dict[str, Any] = {"id": rid, "downloads": r.downloads, "likes": 1,
                                            "gated": "auto" if r.gated else False, "tags": list(r.tags)}
                    if r.architecture:
                        item["gguf"] = {"architecture": r.architecture, "total": 1}
                    out.append(item)
            self._json(200, out[:limit])

        def _info(self, rid: str, rev: str | None) -> None:
            repo = hub.repos.get(rid)
            if repo is None:
                return self._not_found()
            if rev not in (None, "main", repo.commit):
                return self._json(404, {"error": "revision"}, {"X-Error-Code": "RevisionNotFound"})
            if self._gated_refused(repo):
                return
            data: dict[str, Any] = {"id": rid, "sha": repo.commit, "gated": "auto" if repo.gated else False,
                                    "tags": list(repo.tags),
                                    "siblings": [_sibling(repo, p, d) for p, d in sorted(repo.files.items())]}
            if repo.architecture:
                data["gguf"] = {"architecture": repo.architecture, "total": 1}
            self._json(200, data)

        def _resolve(self, rid: str, rev: str, fpath: str) -> None:
            repo = hub.repos.get(rid)
            if repo is None:
                return self._not_found()
            if self._gated_refused(repo):
                return
            if rev not in ("main", repo.commit):
                return self._json(404, {"error": "revision"}, {"X-Error-Code": "RevisionNotFound"})
            data = repo.files.get(fpath)
            if data is None:
                return self._json(404, {"error": "entry"}, {"X-Error-Code": "EntryNotFound"})
            etag = _sha(data) if len(data) >= repo.lfs_threshold else hashlib.sha1(data).hexdigest()
            if fpath in hub.corrupt:
                data = bytes([data[0] ^ 0xFF]) + data[1:]
            start_at = 0
            rng = self.headers.get("Range")
            if rng and self.command == "GET":
                mm = re.match(r"bytes=(\d+)-$", rng)
                start_at = int(mm.group(1)) if mm else 0
            body = data[start_at:]
            self.send_response(206 if start_at else 200)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Accept-Ranges", "bytes")
            if start_at:
                self.send_header("Content-Range", f"bytes {start_at}-{len(data) - 1}/{len(data)}")
            self.send_header("X-Repo-Commit", repo.commit)
            self.send_header("ETag", f'"{etag}"')
            self.send_header("X-Linked-Etag", f'"{etag}"')
            self.send_header("X-Linked-Size", str(len(data)))
            self.end_headers()
            if self.command == "HEAD":
                return
            stall = hub.stall.get(fpath)
            if stall is not None and stall[1] > 0:
                stall[1] -= 1
                self.wfile.write(body[:stall[0]])
                self.wfile.flush()
                self.close_connection = True
                return self._hold_until_the_client_hangs_up()
            cut = hub.cut.pop(fpath, None)
            if cut is not None:
                self.wfile.write(body[:cut])
                self.wfile.flush()
                self.close_connection = True
                import socket
                try:
                    self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                return
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    hub.server = server
    hub.url = f"http://127.0.0.1:{server.server_address[1]}"
    return hub
