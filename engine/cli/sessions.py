"""`amber-engine sessions …`: list, show, pin, unpin, close, delete, gc."""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.sessions.manager import SessionManager

from engine.base import paths


def open_manager(args: argparse.Namespace) -> SessionManager:   # imported lazily: loading is slow
    from engine.cli.common import CliError, resolve_model_dir
    from engine.runtime.model import ModelLoadError, load_model
    from engine.sessions.manager import SessionManager
    try:
        model = load_model(resolve_model_dir(getattr(args, "model", None)), provider="cpu")
    except ModelLoadError as exc:
        raise CliError(str(exc)) from None
    try:
        return SessionManager(model, Path(args.state_dir) if args.state_dir else paths.state_dir(),
                              kv_store=args.kv_store)
    except OSError as exc:      # an unusable state folder (not a folder, no permission, ...)
        raise CliError(f"the state folder cannot be used: {exc}") from None


def cmd_sessions(args: argparse.Namespace) -> int:
    from engine.cli.common import CliError
    from engine.sessions.manager import SessionError
    manager = open_manager(args)
    try:
        if args.action == "list":
            for info in manager.list_sessions():
                print(f"{info.session_id}  {info.kind.value:<9} {info.tokens:>6} tokens  "
                      f"disk {info.kv_bytes_disk:>11,} B"
                      + (f"  ({info.manifest_error})" if info.manifest_error else ""))
        elif args.action == "gc":
            print(json.dumps(manager.gc()))
        else:
            if not args.id:
                raise CliError(f"sessions {args.action} needs a session id")
            if args.action != "delete":
                manager.open(args.id, cache_salt=args.cache_salt)
            if args.action == "show":
                info = manager.info(args.id)
                print(json.dumps({"session_id": info.session_id, "kind": info.kind.value, "tokens": info.tokens,
                                  "kv_location": info.kv_location.value, "kv_bytes_disk": info.kv_bytes_disk,
                                  "cache_salt": info.cache_salt, "manifest_error": info.manifest_error,
                                  "transcript": manager.transcript(args.id)},
                                 indent=2, ensure_ascii=False))
            elif args.action == "pin":
                manager.pin(args.id)
            elif args.action == "unpin":
                manager.unpin(args.id)
            elif args.action == "close":
                manager.close(args.id)
            elif args.action == "delete":
                manager.delete(args.id)
    except (SessionError, ValueError) as exc:
        raise CliError(str(exc)) from None
    finally:
        manager.shutdown()
    return 0


def add_session_commands(sub: argparse._SubParsersAction[Any]) -> None:
    s = sub.add_parser("sessions", help="list and manage sessions")
    s.add_argument("action", choices=["list", "show", "pin", "unpin", "close", "delete", "gc"])
    s.add_argument("id", nargs="?")
    s.add_argument("--state-dir")
    s.add_argument("--model")
    s.add_argument("--cache-salt", help="the session's cache salt (a salted session opens only with it)")
    from engine.cli.common import add_kv_store_option
    add_kv_store_option(s)
    s.set_defaults(func=cmd_sessions)
