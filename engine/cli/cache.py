"""`amber-engine cache stats|gc|clear`: the shared prefix cache."""
from __future__ import annotations

import argparse
import json
from typing import Any


def cmd_cache(args: argparse.Namespace) -> int:
    from engine.cli.common import CliError
    from engine.cli.sessions import open_manager
    from engine.sessions.manager import SessionError
    manager = open_manager(args)
    try:
        if args.action == "stats":
            stats = manager.stats()
            print(json.dumps({"cache": stats["cache"], "block_tokens": stats["block_tokens"],
                              "startup": manager.startup_report}, indent=2))
        elif args.action == "gc":
            print(json.dumps({**manager.cache_gc(), "startup": manager.startup_report}))
        elif args.action == "clear":
            print(json.dumps({"removed_blocks": manager.clear_cache()}))
    except SessionError as exc:
        raise CliError(str(exc)) from None
    finally:
        manager.shutdown()
    return 0


def add_cache_commands(sub: argparse._SubParsersAction[Any]) -> None:
    c = sub.add_parser("cache", help="the shared prefix cache: stats, gc, clear (pinned chats keep theirs)")
    c.add_argument("action", choices=["stats", "gc", "clear"])
    c.add_argument("--state-dir")
    c.add_argument("--model")
    from engine.cli.common import add_kv_store_option
    add_kv_store_option(c)
    c.set_defaults(func=cmd_cache)
