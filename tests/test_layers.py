"""The package's layers only point down: no import cycle between modules, and no import from a
layer into one above it (every import counts, at module top or inside a function)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "demidcd"

# bottom to top; a module may import its own layer and the layers below it
LAYERS = (
    ("errors", "options", "_version", "progress"),
    ("io", "synthetic"),
    ("primitives",),
    ("tasks",),
    ("parallel",),
    ("solvers",),
    ("estimators", "datasets", "metrics", "scorers"),
    ("api",),
    ("cli", "__main__"),
)
RANK = {name: k for k, names in enumerate(LAYERS) for name in names}


def _modules() -> dict[str, Path]:
    out = {}
    for p in PACKAGE.rglob("*.py"):
        rel = p.relative_to(PACKAGE.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = p
    return out


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            mod = (".".join(base[: len(base) - node.level + 1] + ([node.module] if node.module
                                                                    else []))
                   if node.level else node.module or "")
            found.add(mod)
            found.update(f"{mod}.{a.name}" for a in node.names)
    res = set()
    for m in found:
        while m and m not in known:
            m = m.rpartition(".")[0]
        if m and m != name:
            res.add(m)
    return res


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    mods = _modules()
    known = set(mods)
    return {m: _imports(m, p, known) for m, p in mods.items()}


def test_every_module_has_a_layer(graph):
    missing = sorted({_layer(m) for m in graph} - set(RANK) - {"__init__"})
    assert not missing, f"modules outside the declared layers: {missing}"


def test_no_upward_import(graph):
    up = []
    for m, targets in graph.items():
        if _layer(m) == "__init__":
            continue  # the package's __init__ re-exports the API
        for t in targets:
            if _layer(t) != "__init__" and RANK[_layer(t)] > RANK[_layer(m)]:
                up.append(f"{m} -> {t}")
    assert not up, "upward imports:\n" + "\n".join(sorted(up))


def test_no_module_cycle(graph):
    # a package's __init__ importing its own children is not a cycle
    g = {m: {t for t in ts if not m.startswith(t + ".") and not t.startswith(m + ".")}
         for m, ts in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in g:
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def test_the_check_sees_an_upward_import(tmp_path):
    """The walker itself: a tasks module importing the api is found."""
    (tmp_path / "demidcd" / "tasks").mkdir(parents=True)
    (tmp_path / "demidcd" / "__init__.py").write_text("")
    (tmp_path / "demidcd" / "api.py").write_text("")
    (tmp_path / "demidcd" / "tasks" / "__init__.py").write_text("")
    bad = tmp_path / "demidcd" / "tasks" / "x.py"
    bad.write_text("def f():\n    from ..api import g\n")
    known = {"demidcd", "demidcd.api", "demidcd.tasks", "demidcd.tasks.x"}
    assert _imports("demidcd.tasks.x", bad, known) == {"demidcd.api"}
