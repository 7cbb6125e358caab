"""The controller layer imports no Qt widgets, even indirectly (import-linter cannot name
PySide6.QtWidgets, a subpackage of an external package, so this walks the imports itself)."""
from __future__ import annotations

import ast
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]


def _imports_qtwidgets(module: str) -> bool:
    path = ROOT / Path(*module.split("."))
    file = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("PySide6.QtWidgets"):
            return True
        if isinstance(node, ast.Import) and any(a.name.startswith("PySide6.QtWidgets") for a in node.names):
            return True
    return False


def test_no_module_the_controllers_reach_imports_qt_widgets() -> None:
    graph = grimp.build_graph("app", "engine")
    controllers = {m for m in graph.modules if m.startswith("app.gui.controllers")}
    assert "app.gui.controllers.replies" in controllers
    reached = set(controllers)
    for m in controllers:
        reached |= graph.find_upstream_modules(m)
    assert "app.gui.tasks" in reached and "app.chat.turn" in reached   # what they import, too
    offenders = sorted(m for m in reached if m.startswith("app") and _imports_qtwidgets(m))
    assert offenders == []


def test_the_check_itself_sees_a_widget_module() -> None:
    assert _imports_qtwidgets("app.gui.widgets.chat_view")
    assert not _imports_qtwidgets("app.gui.controllers.chats")


def test_no_module_the_view_models_reach_imports_qt_widgets() -> None:
    graph = grimp.build_graph("app", "engine")
    models = {m for m in graph.modules if m.startswith("app.gui.models")}
    assert {"app.gui.models.message", "app.gui.models.chat_list"} <= models
    reached = set(models)
    for m in models:
        reached |= graph.find_upstream_modules(m)
    offenders = sorted(m for m in reached if m.startswith("app") and _imports_qtwidgets(m))
    assert offenders == []
