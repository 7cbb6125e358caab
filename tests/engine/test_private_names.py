"""No module of engine/ or app/ imports another module's private (`_x`) name: what a module shares
is public, so a move or a rename inside one module never breaks another."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def private_imports(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module != "__future__":
            found += [f"{'.' * node.level}{node.module or ''} import {a.name}" for a in node.names
                      if a.name.startswith("_") and not a.name.startswith("__")]
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names
                      if any(p.startswith("_") and not p.startswith("__") for p in a.name.split("."))]
    return found


def test_the_scan_sees_private_imports():
    assert private_imports("from engine.cli.common import CliError, _Parser\nimport a._b\n") == [
        "engine.cli.common import _Parser", "a._b"]
    assert private_imports("from __future__ import annotations\nfrom . import x as _x\n") == []


def test_no_module_imports_a_private_name():
    offenders = [f"{p.relative_to(ROOT)}: {hit}" for folder in ("engine", "app")
                 for p in sorted((ROOT / folder).rglob("*.py"))
                 for hit in private_imports(p.read_text(encoding="utf-8"))]
    assert offenders == []
