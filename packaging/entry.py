"""The built app's entry point (PyInstaller runs this file as `__main__`).

It starts `app.main.main` (which handles `--self-test`), with one thing an installed build needs
until `engine.base.paths` has it (see docs/PACKAGING.md; the shim steps aside once it does): the
default model bundled in `<bundle>/models/` is used when the user has no converted copy.
"""
from __future__ import annotations

import sys

from app import main as amber_main   # first: app.main records the start time when imported


def _bundled_model_lookup() -> None:
    from engine.base import paths

    if hasattr(paths, "bundled_models_dir"):
        return   # engine.base.paths knows about the bundle itself
    from app.selftest import bundled_models_dir

    bundled = bundled_models_dir()
    if bundled is None:
        return
    user_default = paths.default_model_dir

    def default_model_dir():   # type: ignore[no-untyped-def]
        # called when the model is prepared (a worker thread): the import costs the window nothing
        from engine.convert.default_model import is_ready

        user = user_default()
        candidate = bundled / paths.DEFAULT_MODEL_NAME
        # only a complete bundled model, so that ensure_default_model never rewrites the bundle
        if not is_ready(user) and is_ready(candidate):
            return candidate
        return user

    paths.default_model_dir = default_model_dir   # type: ignore[assignment]


def main() -> int:
    from engine.runtime.host.hugepages import reexec_with_huge_pages

    reexec_with_huge_pages({amber_main.LAUNCHED_AT: repr(amber_main._STARTED)})
    argv = sys.argv[1:]
    _bundled_model_lookup()
    return amber_main.main(argv)


if __name__ == "__main__":
    sys.exit(main())
