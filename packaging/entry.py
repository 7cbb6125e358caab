"""The built app's entry point (PyInstaller runs this file as `__main__`).

It starts `app.main.main`, with two things an installed build needs until `app.main` and
`engine.paths` have them (see docs/PACKAGING.md; both shims step aside once they do):
  * `--self-test` runs `app.selftest.run_self_test` (after `--data-dir`, like the real flag will);
  * the default model bundled in `<bundle>/models/` is used when the user has no converted copy.
"""
from __future__ import annotations

import os
import sys

from app import main as amber_main   # first: app.main records the start time when imported


def _bundled_model_lookup() -> None:
    from engine import paths

    if hasattr(paths, "bundled_models_dir"):
        return   # engine.paths knows about the bundle itself
    from app.selftest import bundled_models_dir

    bundled = bundled_models_dir()
    if bundled is None:
        return
    user_default = paths.default_model_dir

    def default_model_dir():   # type: ignore[no-untyped-def]
        # called when the model is prepared (a worker thread): the import costs the window nothing
        from engine.default_model import is_ready

        user = user_default()
        candidate = bundled / paths.DEFAULT_MODEL_NAME
        # only a complete bundled model, so that ensure_default_model never rewrites the bundle
        if not is_ready(user) and is_ready(candidate):
            return candidate
        return user

    paths.default_model_dir = default_model_dir   # type: ignore[assignment]


def _self_test(argv: list[str]) -> int:
    args, _ = amber_main.parse_args(argv)
    if args.data_dir is not None:
        os.environ["AMBER_HOME"] = str(args.data_dir.expanduser().resolve())
    from app.selftest import run_self_test

    return run_self_test()


def main() -> int:
    argv = sys.argv[1:]
    _bundled_model_lookup()
    if "--self-test" in argv:
        return _self_test(argv)
    return amber_main.main(argv)


if __name__ == "__main__":
    sys.exit(main())
