"""`amber-engine serve`: Amber's OpenAI-compatible API server over the engine's sessions."""
from __future__ import annotations

import argparse
import ipaddress
import os
import signal
import sys
from pathlib import Path
from typing import Any

from engine.base import paths
from engine.config import settings

DEFAULT_PORT = 8080


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _inside(name: object, folder: Path) -> bool:
    """Whether an OSError's file name lies in `folder` (else it is about the address)."""
    if not isinstance(name, (str, os.PathLike)):
        return False
    return os.path.abspath(os.fspath(name)).startswith(os.path.abspath(folder) + os.sep)


def cmd_serve(args: argparse.Namespace) -> int:
    from engine.base.oneline import one_line
    from engine.base.safefs import UnsafePathError
    from engine.cli.common import CliError, note_unused_gpu, resolve_model_dir
    from engine.runtime.model import ModelLoadError, load_model
    from engine.server import ServerConfig, serve_forever
    from engine.sessions.manager import SessionManager

    keys = list(args.api_key or [])
    keys += settings().api_keys
    if not _is_loopback(args.host) and not keys:
        # Anyone on the network could use the model and read cached prompts' timings otherwise.
        raise CliError(f"--host {args.host} is reachable from other machines: give --api-key (or AMBER_API_KEYS)")
    if args.max_prompt_tokens is not None and args.max_prompt_tokens <= 0:
        raise CliError("--max-prompt-tokens must be positive")
    from engine.runtime.host.spin import prefer_server_spin
    prefer_server_spin()     # concurrent clients' batched steps: a longer bounded spin (spin.py)
    try:
        model = load_model(resolve_model_dir(args.model), provider=args.provider)
    except ModelLoadError as exc:
        raise CliError(str(exc)) from None
    note_unused_gpu(model.provider_fallback_reason)
    state = Path(args.state_dir) if args.state_dir else paths.state_dir()
    if state.is_dir() and not os.access(state, os.W_OK):
        # The server writes its chats, stored responses and locks there: refused at once, not per request.
        raise CliError(f"the state folder cannot be used: {one_line(str(state))} is read-only")
    try:
        manager = SessionManager(model, state, kv_store=args.kv_store)
    except OSError as exc:      # an unusable state folder (read-only, not a folder, a symlinked locks/, ...)
        raise CliError(f"the state folder cannot be used: {exc}") from None
    # The options left out keep ServerConfig's defaults (engine.server is not imported for --help).
    limits = {name: value for name, value in (("max_in_flight", args.max_in_flight),
                                              ("body_timeout_s", args.body_timeout)) if value is not None}
    config = ServerConfig(api_keys=keys, max_body_bytes=args.max_body_bytes, max_prompt_tokens=args.max_prompt_tokens,
                          max_new_tokens=args.max_tokens, max_queued=args.max_queued, max_active=args.max_active,
                          **limits)

    def ready(url: str) -> None:
        # The first stdout line, parsed by scripts and tests: keep its form.
        print(f"amber-engine: serving {url}", flush=True)
        print(f"amber-engine: model {manager.model_name} ({manager.provider}), "
              f"{'API keys required' if keys else 'no API key'}; Ctrl+C stops", file=sys.stderr, flush=True)

    def terminate(signum: int, frame: object) -> None:   # uvicorn re-raises SIGTERM after its graceful shutdown
        raise SystemExit(0)
    signal.signal(signal.SIGTERM, terminate)
    try:
        serve_forever(manager, args.host, args.port, state, config, on_ready=ready)
    except OSError as exc:
        if isinstance(exc, UnsafePathError) or _inside(exc.filename, state):    # its secret: server/
            raise CliError(f"the state folder cannot be used: {exc}") from None
        raise CliError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        manager.shutdown()      # waits (bounded) for pinned sessions' saves
    return 0


def add_serve_command(sub: argparse._SubParsersAction[Any]) -> None:
    from engine.cli.common import add_kv_store_option, positive_int, positive_seconds
    s = sub.add_parser("serve", help="serve an OpenAI-compatible API (loopback by default)")
    s.add_argument("--model", help="model folder (default: the default model)")
    s.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1, loopback only)")
    s.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0 picks a free one)")
    s.add_argument("--api-key", action="append",
                   help="accept this bearer key (repeatable; also AMBER_API_KEYS=k1,k2); none: no key needed")
    s.add_argument("--provider", choices=["auto", "cpu", "gpu"], default="auto")
    s.add_argument("--state-dir", help="engine state folder (default: in the user data folder)")
    s.add_argument("--max-body-bytes", type=positive_int, default=4 << 20)
    s.add_argument("--max-prompt-tokens", type=int, help="longest prompt accepted (default: the context window)")
    s.add_argument("--max-tokens", type=positive_int, default=4096, help="most tokens one reply may generate")
    s.add_argument("--max-active", type=positive_int, default=4, help="generations interleaved at once")
    s.add_argument("--max-queued", type=positive_int, default=32, help="requests waiting beyond: 429")
    s.add_argument("--max-in-flight", type=positive_int,
                   help="requests handled at once, bodies still arriving included; beyond: 503 (default 128)")
    s.add_argument("--body-timeout", type=positive_seconds, metavar="SECONDS",
                   help="a request body still arriving after this many seconds is answered 408 (default 30)")
    add_kv_store_option(s)
    s.set_defaults(func=cmd_serve)
