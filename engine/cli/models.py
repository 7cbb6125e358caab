"""`amber-engine models search|files|download|list|remove|token`: the model library on the command line."""
from __future__ import annotations

import argparse
import getpass
import json
import sys
import time
from typing import Any

from engine.base.oneline import one_line as shown   # names from the Hub: control characters escaped


def _fail(exc: Exception) -> int:
    from engine.cli.common import CliError
    raise CliError(str(exc)) from None


def _duration(s: float | None) -> str:
    if s is None:
        return "?"
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


class _Printer:
    """Progress lines on stderr, at most a few a second (a terminal gets them on one line)."""

    def __init__(self) -> None:
        self.last = 0.0
        self.tty = sys.stderr.isatty()
        self.stage = ""

    def __call__(self, p: Any) -> None:
        from engine.hub import human
        now = time.monotonic()
        final = p.done >= p.total
        if p.stage == "download" and p.speed <= 0 and not final:
            return                        # the first sample: no speed or time left to show yet
        if p.stage == self.stage and not final and now - self.last < (0.25 if self.tty else 2.0):
            return
        self.last, self.stage = now, p.stage
        if p.stage == "download":
            line = (f"downloading {shown(p.what)}: {p.fraction * 100:5.1f}% of {human(p.total)}, "
                    f"{human(p.speed)}/s, {_duration(p.eta_s)} left")
        elif p.stage == "convert":
            line = f"converting to ONNX: {p.done}/{p.total} tensors"
        elif p.stage == "verify":
            line = f"checking SHA-256 of {shown(p.what)}"
        elif p.stage == "check":
            line = f"checking that {shown(p.what)} loads"
        else:
            line = f"{p.stage}: {shown(p.what)}"
        end = "\r" if self.tty and not final else "\n"
        print(f"amber-engine: {line}\x1b[K" if self.tty else f"amber-engine: {line}", end=end, file=sys.stderr,
              flush=True)


def cmd_search(args: argparse.Namespace) -> int:
    from engine import hub
    supported = hub.supported_architectures()
    if not args.query and not args.onnx:
        rows = [{"repo": r.repo, "file": r.file or r.quant, "architecture": r.architecture, "params": r.params,
                 "supported": r.is_onnx or r.architecture in supported, "title": r.title}
                for r in hub.recommended()]
        if args.json:
            print(json.dumps(rows, indent=1))
        else:
            print("Recommended chat models (amber-engine models download REPO [FILE]):")
            for r in rows:
                mark = "" if r["supported"] else f"   [{r['architecture']}: not supported by this build yet]"
                print(f"  {r['repo']:<42} {r['file']:<36} {r['params']:>5}{mark}")
        return 0
    try:
        hits = hub.search(args.query or "", limit=args.limit, kind="onnx" if args.onnx else "gguf",
                          token=args.token)
    except hub.HubError as exc:
        return _fail(exc)
    if args.json:
        print(json.dumps([h.__dict__ for h in hits], indent=1))
        return 0
    if not hits:
        print("no matching repos")
    for h in hits:
        arch = shown(h.architecture) or "?"
        flags = (" gated" if h.gated else "") + ("" if arch in supported or h.kind == "onnx" or arch == "?"
                                                 else " [architecture not supported yet]")
        print(f"{shown(h.repo):<56} {arch:<10} {h.downloads:>9} downloads{flags}")
    return 0


def cmd_files(args: argparse.Namespace) -> int:
    from engine import hub
    from engine.base import paths
    try:
        listing = hub.repo_files(args.repo, revision=args.revision, token=args.token)
    except hub.HubError as exc:
        return _fail(exc)
    rows: list[dict[str, Any]] = []
    for v in listing.variants:
        fit = hub.estimate(v.size, v.quant, paths.models_dir())
        rows.append({"quant": v.quant, "file": v.name, "kind": v.kind, "parts": len(v.files), "size": v.size,
                     "memory": fit.memory_bytes, "verdict": fit.verdict, "disk_needed": fit.disk_bytes})
    if args.json:
        print(json.dumps({"repo": listing.repo, "revision": listing.revision, "gated": listing.gated,
                          "architecture": listing.architecture, "files": rows}, indent=1))
        return 0
    print(f"{shown(listing.repo)} @ {shown(listing.revision[:12])}"
          + (f"  ({shown(listing.architecture)})" if listing.architecture else "")
          + ("  gated" if listing.gated else ""))
    for r in rows:
        parts = f" ({r['parts']} parts: not supported yet)" if r["kind"] == "gguf" and r["parts"] > 1 else ""
        print(f"  {shown(r['quant']):<10} {hub.human(r['size']):>9}  memory ~{hub.human(r['memory']):>9}  "
              f"{r['verdict']:<9}  {shown(r['file'])}{parts}")
    return 0


def cmd_download(args: argparse.Namespace) -> int:
    from engine import hub
    try:
        p = hub.plan(args.repo, args.file, name=args.name, revision=args.revision, token=args.token)
    except hub.HubError as exc:
        return _fail(exc)
    print(f"amber-engine: {shown(p.listing.repo)} {shown(p.variant.quant)} ({shown(p.variant.name)}) -> "
          f"{shown(p.name)}: {p.fit.summary()}", file=sys.stderr)
    if p.fit.verdict == hub.TOO_LARGE and not args.force:
        return _fail(hub.HubError("the model is too large for this machine's memory (use --force to get it anyway)"))
    try:
        dest = hub.install(p, token=args.token, progress=_Printer(), weights=args.weights)
    except KeyboardInterrupt:
        print("\namber-engine: interrupted; run the same command again to resume the download", file=sys.stderr)
        return 130
    except hub.HubError as exc:
        return _fail(exc)
    print(dest)
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from engine import hub
    from engine.base import paths
    installed, pending = hub.list_installed(), hub.list_pending()
    if args.json:
        print(json.dumps({"models": [{"name": m.name, "path": str(m.path), "size": m.size, "source": m.source}
                                     for m in installed],
                          "partial_downloads": [{"key": p.key, "size": p.size} for p in pending]}, indent=1))
        return 0
    print(f"models in {paths.models_dir()}:")
    for m in installed:
        print(f"  {shown(m.name):<40} {hub.human(m.size):>9}  {shown(m.source)}")
    if not installed:
        print("  (none)")
    for p in pending:
        print(f"  partial download: {shown(p.key)} ({hub.human(p.size)}; `models download` resumes it, "
              f"`models remove {p.key}` deletes it)")
    return 0


def cmd_remove(args: argparse.Namespace) -> int:
    from engine import hub
    try:
        print(f"removed {hub.remove(args.name)}")
    except hub.HubError as exc:
        return _fail(exc)
    return 0


def cmd_token(args: argparse.Namespace) -> int:
    from engine import hub
    if args.forget:
        hub.store_token(None)
        print("token forgotten")
        return 0
    # read from stdin, never from the command line (shell history, ps)
    token = sys.stdin.readline().strip() if not sys.stdin.isatty() else getpass.getpass("Hugging Face token: ")
    try:
        hub.store_token(token)
    except hub.HubError as exc:
        return _fail(exc)
    print("token saved (HF_TOKEN, when set, is used instead)")
    return 0


def add_models_commands(sub: argparse._SubParsersAction[Any]) -> None:
    m = sub.add_parser("models", help="the model library: search the Hugging Face Hub, download, list, remove")
    ms = m.add_subparsers(dest="models_command", required=True, parser_class=type(m))

    def token_opt(p: argparse.ArgumentParser) -> None:
        p.add_argument("--token", help=argparse.SUPPRESS)   # prefer HF_TOKEN / `models token`: not in ps

    s = ms.add_parser("search", help="search GGUF repos (no query: the recommended models)")
    s.add_argument("query", nargs="?", default="")
    s.add_argument("--onnx", action="store_true", help="ONNX repos instead of GGUF")
    s.add_argument("--limit", type=int, default=20)
    s.add_argument("--json", action="store_true")
    token_opt(s)
    s.set_defaults(func=cmd_search)

    f = ms.add_parser("files", help="a repo's files by quantization, with sizes and the memory verdict")
    f.add_argument("repo")
    f.add_argument("--revision")
    f.add_argument("--json", action="store_true")
    token_opt(f)
    f.set_defaults(func=cmd_files)

    d = ms.add_parser("download", help="download (resumable), verify, convert into the models folder")
    d.add_argument("repo")
    d.add_argument("file", nargs="?", help="file name or quantization (default: Q4_K_M, else the smallest)")
    d.add_argument("--name", help="the model's folder name (default: from the repo and quantization)")
    d.add_argument("--revision")
    d.add_argument("--weights", choices=["auto", "int4", "int8", "fp16", "fp32"], default="auto")
    d.add_argument("--force", action="store_true", help="download even when it looks too large")
    token_opt(d)
    d.set_defaults(func=cmd_download)

    lst = ms.add_parser("list", help="installed models and partial downloads")
    lst.add_argument("--json", action="store_true")
    lst.set_defaults(func=cmd_list)

    r = ms.add_parser("remove", help="delete an installed model (or a partial download)")
    r.add_argument("name")
    r.set_defaults(func=cmd_remove)

    t = ms.add_parser("token", help="store a Hugging Face token for gated repos (read from stdin)")
    t.add_argument("--forget", action="store_true")
    t.set_defaults(func=cmd_token)
