"""The package's layering (issue 26): no import circles, the core never imports the energon-compatibility layer,
and no sub-package holds more than a quarter of the package's lines.

Imports are read with `ast` from every module, at any depth (imports inside functions count), except those under
`if TYPE_CHECKING:`; `from a.b import c` counts as importing `a.b` and, when it is a module, `a.b.c`.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "energon_arrow"
#: the fast core and the formats it reads: none of it may import energon_arrow.energon
CORE = ("loader", "images", "index", "query", "tar", "adapters", "meta", "metadataset", "samples", "tokens")


def _modules() -> dict[str, Path]:
    out = {}
    for f in PACKAGE.rglob("*.py"):
        parts = list(f.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = f
    return out


def _imports(path: Path, module: str) -> set[str]:
    is_package = path.name == "__init__.py"
    found: set[str] = set()

    def visit(node):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {
        m: {
            t
            for t in _imports(f, m)
            if t in modules and t != m and not m.startswith(t + ".") and t != "energon_arrow"
        }
        for m, f in modules.items()
    }


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def test_no_import_circles():
    assert _circles(_graph()) == []


def test_core_imports_nothing_of_the_energon_layer():
    bad = {
        m: sorted(t for t in targets if t.startswith("energon_arrow.energon"))
        for m, targets in _graph().items()
        if m.split(".")[1:2] and m.split(".")[1] in CORE
    }
    assert {m: t for m, t in bad.items() if t} == {}


def test_no_sub_package_over_a_quarter_of_the_lines():
    lines: dict[str, int] = {}
    for m, f in _modules().items():
        top = m.split(".")[1] if "." in m else m
        lines[top] = lines.get(top, 0) + len(f.read_text().splitlines())
    total = sum(lines.values())
    assert {p: n for p, n in lines.items() if n > total / 4} == {}


def test_the_circle_finder_finds_a_circle():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
