"""Hugging Face transformers' own chat-template renderer, in side venvs, for Amber's template sweep.

Amber renders chat templates itself (engine/text/chat_template.py) and must produce exactly what
`tokenizer.apply_chat_template(..., tokenize=False)` produces. tests/engine/text/test_template_sweep.py
checks that over real templates and message sets against two transformers releases: the last 4.x
and the newest 5.x. transformers is not one of Amber's dependencies, so each release lives in a venv
of its own under build/ (never the project's venv; no torch: the renderer needs only transformers,
jinja2 and tokenizers):

    python packaging/hf_templates.py --install-only        # make install-hf-templates
    <venv>/bin/python packaging/hf_templates.py --render CASES.json OUT.json

`--render` runs inside a side venv and imports nothing of Amber's: for each case it builds a
tokenizer carrying the case's special tokens and template and writes what apply_chat_template
returned, or the exception it raised (type and message).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "packaging"))   # side_venv, beside this script
import side_venv  # noqa: E402

# The releases compared, and where their venvs live (relative to the checkout).
RELEASES = {
    "4.57": ["transformers==4.57.6", "jinja2==3.1.6"],
    "5": ["transformers==5.25.0", "jinja2==3.1.6"],
}


def venv_dir(release: str) -> Path:
    return ROOT / "build" / f"transformers-{release}" / "venv"


STAMP = ".amber-hf-templates.json"


def ready_python(release: str) -> Path | None:
    """The release's venv python when the venv was made for exactly its pins (its stamp says so)."""
    return side_venv.ready(venv_dir(release), RELEASES[release], STAMP)


def ensure_venv(release: str) -> Path:
    """Creates (or reuses) the release's venv; returns its python. Needs PyPI the first time."""
    return side_venv.ensure(venv_dir(release), RELEASES[release], STAMP, "hf-templates")


def _tokenizer(special: dict[str, str], template: str) -> Any:
    """A word-level tokenizer whose only job is to carry the special tokens and the template:
    apply_chat_template(tokenize=False) renders with `special_tokens_map` and never tokenizes."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(dict.fromkeys(special.values()))}
    backend = Tokenizer(WordLevel(vocab, unk_token=special.get("unk_token") or next(iter(vocab))))
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, **special)
    tok.chat_template = template
    return tok


def render_cases(cases_path: Path, out_path: Path) -> None:
    """Renders every case of `cases_path` with this interpreter's transformers into `out_path`."""
    import transformers

    data = json.loads(cases_path.read_text(encoding="utf-8"))
    templates: dict[str, str] = data["templates"]
    tokenizers: dict[tuple[str, str], Any] = {}
    results: dict[str, Any] = {}
    for case in data["cases"]:
        key = (case["template"], json.dumps(case["special"], sort_keys=True))
        if key not in tokenizers:
            tokenizers[key] = _tokenizer(case["special"], templates[case["template"]])
        try:
            text = tokenizers[key].apply_chat_template(
                case["messages"], tools=case.get("tools"), tokenize=False,
                add_generation_prompt=case["add_generation_prompt"], **case.get("kwargs", {}))
            results[case["id"]] = {"text": text}
        except Exception as exc:  # noqa: BLE001 - a template can raise anything; that is a result
            results[case["id"]] = {"error": f"{type(exc).__name__}: {exc}"}
    out_path.write_text(json.dumps({"version": transformers.__version__, "results": results}),
                        encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--install-only", action="store_true", help="create the side venvs and stop")
    ap.add_argument("--render", nargs=2, type=Path, metavar=("CASES", "OUT"),
                    help="render CASES.json with this interpreter's transformers into OUT.json")
    args = ap.parse_args(argv)
    if args.render:
        render_cases(*args.render)
        return 0
    for release in RELEASES:
        print(f"transformers {release}: {ensure_venv(release)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
