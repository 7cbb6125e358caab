"""No import circles in the GUI or the engine: every module of app.gui and of engine can be read
(and loaded) on its own, below what it imports. Imports under `TYPE_CHECKING` count too: a circle
drawn only for the type checker is still one module that cannot be understood without the other."""
from __future__ import annotations

from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]


def circles(graph: grimp.ImportGraph, package: str) -> list[list[str]]:
    """The strongly connected components of more than one module among `package`'s modules."""
    nodes = sorted(m for m in graph.modules if m == package or m.startswith(package + "."))
    inside = set(nodes)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in nodes:          # Tarjan's algorithm, iteratively (no recursion limit)
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root) & inside)))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, edges = work[-1]
            w = next(edges, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.find_modules_directly_imported_by(w) & inside))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    component.append(m)
                    if m == v:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("app", "engine", exclude_type_checking_imports=False, cache_dir=None)


@pytest.mark.parametrize("package", ["app.gui", "engine"])
def test_no_import_circles(graph: grimp.ImportGraph, package: str) -> None:
    assert any(m.startswith(package + ".") for m in graph.modules)
    assert circles(graph, package) == []


def test_a_circle_is_found() -> None:
    """The check itself: two modules that import each other (and a third, outside) are one circle."""
    g = grimp.ImportGraph()
    for m in ("pkg", "pkg.a", "pkg.b", "pkg.c"):
        g.add_module(m)
    g.add_import(importer="pkg.a", imported="pkg.b")
    g.add_import(importer="pkg.b", imported="pkg.a")
    g.add_import(importer="pkg.c", imported="pkg.a")
    assert circles(g, "pkg") == [["pkg.a", "pkg.b"]]


def test_the_graph_is_this_checkout() -> None:
    import app.gui

    assert Path(app.gui.__file__).resolve().is_relative_to(ROOT)
