"""Options are parsed once, by the CLI, into frozen values (issue 42): outside ``demidcd.cli``
no module reads or writes an argparse namespace, and no module imports a private name of
another module of the package (what several modules share is public).

Both checks read the source (AST), every module of the package, imports inside functions
included."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "demidcd"
INTROSPECTION = {"getattr", "setattr", "hasattr", "delattr", "vars"}


def _modules() -> dict[str, Path]:
    """Dotted name → path of every module of the package (a package by its ``__init__``)."""
    out = {}
    for p in sorted(PACKAGE.rglob("*.py")):
        parts = list(p.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = p
    return out


def _in_cli(name: str) -> bool:
    return name == "demidcd.cli" or name.startswith("demidcd.cli.")


def _uses_of_args(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) for each attribute of a name ``args`` read or assigned, and each
    getattr / setattr / hasattr / delattr / vars called on it."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id == "args":
            found.append((node.lineno, f"args.{node.attr}"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in INTROSPECTION and node.args \
                and isinstance(node.args[0], ast.Name) and node.args[0].id == "args":
            found.append((node.lineno, f"{node.func.id}(args, ...)"))
    return found


def test_no_module_outside_the_cli_reads_or_writes_an_argparse_namespace():
    bad = [f"{path.relative_to(PACKAGE.parent)}:{line}: {what}"
           for name, path in _modules().items() if not _in_cli(name)
           for line, what in _uses_of_args(ast.parse(path.read_text(encoding="utf-8")))]
    assert not bad, "options come as frozen values (demidcd.options), not args:\n" + \
        "\n".join(bad)


def _source_module(name: str, path: Path, node: ast.ImportFrom) -> str:
    """The dotted module an ``from … import`` of module ``name`` (at ``path``) reads."""
    if not node.level:
        return node.module or ""
    base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    base = base[: len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _private_uses(name: str, path: Path, modules: dict[str, Path]) -> list[tuple[int, str]]:
    """(line, what) for each private name of another module of the package that ``name``
    imports (``from .x import _y``) or reads through a module it imported
    (``from ..io import tagged`` … ``tagged._y``). A private module is not a private name."""
    found, aliases = [], {}
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        source = _source_module(name, path, node)
        if source != "demidcd" and not source.startswith("demidcd."):
            continue
        for alias in node.names:
            if f"{source}.{alias.name}" in modules:  # a module: its attributes are checked
                aliases[alias.asname or alias.name] = f"{source}.{alias.name}"
            elif _private(alias.name):
                found.append((node.lineno, f"{alias.name} from {source}"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id in aliases and _private(node.attr) \
                and aliases[node.value.id] != name:
            found.append((node.lineno, f"{node.attr} of {aliases[node.value.id]}"))
    return found


def _private(attr: str) -> bool:
    return attr.startswith("_") and not attr.startswith("__")


def test_no_private_name_is_imported_from_another_module_of_the_package():
    modules = _modules()
    bad = [f"{path.relative_to(PACKAGE.parent)}:{line}: {what}"
           for name, path in modules.items()
           for line, what in _private_uses(name, path, modules)]
    assert not bad, "make the name public instead:\n" + "\n".join(bad)


def test_the_checks_see_what_they_look_for():
    """The AST patterns match the forms they are meant to refuse."""
    src = ("def f(args):\n    x = args.encoding\n    args.column = 1\n"
           "    return getattr(args, 'nbest', None), vars(args)\n")
    assert [w for _, w in _uses_of_args(ast.parse(src))] == [
        "args.encoding", "args.column", "getattr(args, ...)", "vars(args, ...)"]
    node = ast.parse("from ...io.tagged import _label_index").body[0]
    assert isinstance(node, ast.ImportFrom)
    assert _source_module("demidcd.tasks.chain.stream", PACKAGE / "tasks" / "chain" / "stream.py",
                          node) == "demidcd.io.tagged"


def test_the_private_check_sees_both_forms(tmp_path):
    path = tmp_path / "stream.py"
    path.write_text("from ...io.tagged import _label_index\nfrom ...io import tagged\n"
                    "x = tagged._label_index('conllu', None)\ny = tagged.read_tagged\n")
    modules = {"demidcd.io.tagged": path, "demidcd.io": path}
    assert _private_uses("demidcd.tasks.chain.stream", path, modules) == [
        (1, "_label_index from demidcd.io.tagged"), (3, "_label_index of demidcd.io.tagged")]


MAX_LINES = 900
SHARED_TASK_MODULES = {"__init__.py", "base.py", "phi.py"}


def test_no_module_of_the_package_is_over_900_lines():
    """Modules stay readable: none over 900 lines (split by what the code is)."""
    long = [f"{p.relative_to(PACKAGE)}: {n}" for p in PACKAGE.rglob("*.py")
            if (n := p.read_text(encoding="utf-8").count("\n")) > MAX_LINES]
    assert not long, long


def test_tasks_are_packages_beside_the_shared_modules():
    """tasks/ holds one package per task family (chain, dependency, entity_relation) and only
    the shared modules (the registry, the Task protocol, the φ kernels) beside them."""
    tasks = PACKAGE / "tasks"
    packages = {d.name for d in tasks.iterdir() if (d / "__init__.py").is_file()}
    assert {"chain", "dependency", "entity_relation"} <= packages
    flat = {p.name for p in tasks.glob("*.py")}
    assert flat == SHARED_TASK_MODULES, flat - SHARED_TASK_MODULES
