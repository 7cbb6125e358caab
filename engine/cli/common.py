"""What every `amber-engine` command group shares: the one-line error, the parser class, option types."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import NoReturn

from engine.base import paths


class CliError(Exception):
    """Shown as one line on stderr; exit code 2."""


class CliParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:   # one line, exit 2 (argparse prints usage too)
        self.exit(2, f"{self.prog}: error: {message}\n")


def check_text(option: str, value: str | None) -> None:
    """Text options must be UTF-8: bytes that are not (Python keeps them as lone surrogates) are
    refused with one line naming the option, never replaced (the server refuses the same: a 400)."""
    if value is None:
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        code = ord(value[exc.start])
        what = (f"byte 0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"lone surrogate U+{code:04X}")
        raise CliError(f"{option} is not valid UTF-8 text ({what} at character {exc.start + 1}); "
                       "give UTF-8 text") from None


def positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def positive_seconds(text: str) -> float:
    """A duration in seconds: a finite number above zero (at most a day)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text}") from None
    if not 0 < value <= 86400:     # NaN and inf fail this too
        raise argparse.ArgumentTypeError(f"must be above 0 and at most 86400 seconds, got {text}")
    return value


def note_unused_gpu(fallback: str | None) -> None:
    """On stderr, one line when the model runs on the CPU although an NVIDIA GPU is here (what to
    install); nothing on a machine without one."""
    from engine.base.cuda_libs import unused_gpu_note
    from engine.base.cuda_probe import machine_gpu

    note = unused_gpu_note(fallback, machine_gpu())
    if note:
        print(f"amber-engine: note: {note}", file=sys.stderr)


def resolve_model_dir(arg: str | None) -> Path:
    if arg:
        return Path(arg)
    from engine.convert.default_model import is_ready
    if not is_ready():
        raise CliError(f"the default model is not prepared at {paths.default_model_dir()} "
                       "(run: amber-engine fetch-default)")
    return paths.default_model_dir()


def add_kv_store_option(p: argparse.ArgumentParser) -> None:
    from engine.api import KV_STORE_MODEL, KV_STORES
    p.add_argument("--kv-store", choices=KV_STORES, default=KV_STORE_MODEL,
                   help="saved KV: 'model' keeps the model's own dtype (lossless), 'float16' halves "
                        "the bytes (use the same setting for every command on a state folder)")
