"""`amber-engine generate`: one prompt or chat turn, streamed to stdout."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from engine.api import GenerationResult, SamplingParams, SessionInfo, TextChunk
from engine.base import paths
from engine.cli.common import CliError, check_text, note_unused_gpu, resolve_model_dir


# ---- generate --------------------------------------------------------------------------------
def _sampling(args: argparse.Namespace) -> SamplingParams:
    return SamplingParams(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p,
                          repetition_penalty=args.repetition_penalty, seed=args.seed, greedy=args.greedy,
                          max_new_tokens=args.max_tokens, stop=list(args.stop or []),
                          overflow=args.overflow)


def cmd_generate(args: argparse.Namespace) -> int:
    from engine.text.chat_template import ChatTemplateError, NoChatTemplate
    from engine.runtime.model import ModelLoadError, ModelRunError, load_model
    from engine.sessions.manager import SessionError, SessionManager
    for option, value in [("--prompt", args.prompt), ("--chat", args.chat), ("--system", args.system),
                          ("--cache-salt", args.cache_salt)] + [("--stop", s) for s in args.stop or []]:
        check_text(option, value)
    sampling = _sampling(args)
    try:
        from engine.text.sampling import resolve_sampling
        resolve_sampling(sampling, {})      # bad option values fail before the model loads
    except ValueError as exc:
        raise CliError(str(exc)) from None
    try:
        from engine.onnx.variants import print_variant_progress
        model = load_model(resolve_model_dir(args.model), provider=args.provider, progress=print_variant_progress)
    except ModelLoadError as exc:
        raise CliError(str(exc)) from None
    note_unused_gpu(model.provider_fallback_reason)
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
    except NoChatTemplate as exc:      # a base model: --prompt is what it takes here
        raise CliError(f"{exc.model_name} has no chat template (a base model): give it text to continue "
                       "with --prompt") from None
    except (ChatTemplateError, SessionError, ModelRunError, ValueError) as exc:
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
