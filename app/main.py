"""`amber`: start the desktop app. `--data-dir` selects the data folder (sets AMBER_HOME)."""
from __future__ import annotations

import time

_STARTED = time.perf_counter()

import argparse  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Sequence  # noqa: E402

from engine.config import HOME, LAUNCHED_AT, take_launched_at  # noqa: E402

# A re-executed launch counts from the first process's start (perf_counter is system-wide on Linux).
_STARTED = take_launched_at(_STARTED)


def parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(prog="amber", description="Amber: chat with local models")
    parser.add_argument("--data-dir", type=Path, default=None,
                        help="folder for chats, models and caches (default: the user data folder)")
    parser.add_argument("--self-test", action="store_true",
                        help="check the installation (data folder, model, generation, pinned resume) "
                             "and exit 0, or print what failed and exit 1")
    parser.add_argument("--verbose", "-v", action="store_true", help="log more")
    return parser.parse_known_args(list(argv))


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args, qt_args = parse_args(argv)
    if args.data_dir is not None:
        os.environ[HOME] = str(args.data_dir.expanduser().resolve())
    if args.self_test:
        from app.selftest import run_self_test  # noqa: PLC0415

        return run_self_test()
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from engine.runtime.host.hugepages import log_status  # noqa: PLC0415

    log_status()   # one line, when launch() re-executed with huge pages
    from app.gui.app import run_app  # noqa: PLC0415 - Qt only when the GUI starts

    return run_app([sys.argv[0], *qt_args], started_at=_STARTED)


def launch() -> int:
    """The `amber` command: on Linux first re-executes with huge pages for ONNX Runtime's
    buffers (engine.runtime.host.hugepages), then `main`."""
    from engine.runtime.host.hugepages import reexec_with_huge_pages  # noqa: PLC0415

    reexec_with_huge_pages({LAUNCHED_AT: repr(_STARTED)})
    return main()


if __name__ == "__main__":
    sys.exit(launch())
