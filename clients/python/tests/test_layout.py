"""No import circle among the package's modules (issue 45 item 7), as node/tests/layout/
checks the Rust crates. Reads the source with ``ast`` (stdlib only, no cluster).

An import is one at module level, an ``if TYPE_CHECKING:`` block's included (a type
is a dependency too); one inside a function is not, as that is Python's usual way to
break a circle (the import runs when the function does, once both modules are loaded).
``from . import x`` names the module ``x`` when there is one, the package otherwise.
The source is read from ``src/`` beside the tests, not the installed package.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = "leasehold"
SRC = Path(__file__).resolve().parent.parent / "src"

#: ``(from, to)`` modules → the ``file:line`` of each import.
Imports = dict[tuple[str, str], list[str]]


def module_name(path: Path, src: Path) -> str:
    """``leasehold/fence/postgres.py`` → ``leasehold.fence.postgres``; a package's
    ``__init__.py`` is the package."""
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def module_level_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """The imports outside functions (and lambdas): at the top, in ``if``/``try``
    blocks, in class bodies."""
    found: list[ast.Import | ast.ImportFrom] = []
    todo: list[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            todo.extend(ast.iter_child_nodes(node))
    return found


def named_modules(node: ast.Import | ast.ImportFrom, here: str, is_package: bool) -> list[str]:
    """The modules an import names, absolute: each ``import a.b`` as ``a.b``; a
    ``from X import y`` as ``X.y`` (resolved against the modules later) and as ``X``."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        package = here.split(".") if is_package else here.split(".")[:-1]
        package = package[: len(package) - (node.level - 1)]
        base = ".".join(package + ([base] if base else []))
    return [f"{base}.{alias.name}" for alias in node.names] + [base]


def scan(src: Path) -> Imports:
    """Who imports whom among the modules of the package under ``src``."""
    files = sorted((src / PACKAGE).rglob("*.py"))
    modules = {module_name(f, src): f for f in files}
    imports: Imports = {}
    for here, file in modules.items():
        tree = ast.parse(file.read_text(), str(file))
        is_package = file.name == "__init__.py"
        for node in module_level_imports(tree):
            names = named_modules(node, here, is_package)
            # `from X import y` names the module X.y when there is one, else X.
            submodules = [n for n in names[:-1] if n in modules]
            targets = (submodules or names[-1:]) if isinstance(node, ast.ImportFrom) else names
            for to in targets:
                if to in modules and to != here:
                    at = f"{file.relative_to(src)}:{node.lineno}"
                    imports.setdefault((here, to), []).append(at)
    return imports


def circles(imports: Imports) -> list[str]:
    """Each set of modules that reach each other, with the imports between them."""
    following: dict[str, set[str]] = {}
    for a, b in imports:
        following.setdefault(a, set()).add(b)

    def reach(start: str) -> set[str]:
        seen: set[str] = set()
        todo = [start]
        while todo:
            for n in following.get(todo.pop(), ()):
                if n not in seen:
                    seen.add(n)
                    todo.append(n)
        return seen

    found: list[frozenset[str]] = []
    for m in sorted(following):
        circle = frozenset(n for n in reach(m) if m in reach(n))
        if circle and circle not in found:
            found.append(circle)
    return [
        f"{sorted(c)}: " + "; ".join(
            f"{a} -> {b} ({', '.join(at)})"
            for (a, b), at in sorted(imports.items())
            if a in c and b in c
        )
        for c in found
    ]


def test_no_import_circle_among_the_modules_of_the_package() -> None:
    imports = scan(SRC)
    # A scan that finds nothing would pass.
    assert ("leasehold.client", "leasehold.lease") in imports, sorted(imports)
    assert ("leasehold.lease", "leasehold._calls") in imports, sorted(imports)
    found = circles(imports)
    assert not found, (
        "import circles among the package's modules: move the item down to a module both "
        "can import, import it inside the function that needs it, or take it as a "
        "Protocol\n" + "\n".join(found)
    )


def test_an_import_circle_is_found_with_its_lines(tmp_path: Path) -> None:
    pkg = tmp_path / PACKAGE
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .a import A\n")
    (pkg / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\nA = 1\n"
    )
    (pkg / "b.py").write_text("from . import a\n\ndef late():\n    from .c import C\n")
    (pkg / "c.py").write_text("from .b import late\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "d.py").write_text("from ..a import A\nfrom leasehold.sub import e\n")
    (pkg / "sub" / "e.py").write_text("import leasehold.sub.d\n")
    found = circles(scan(tmp_path))
    assert len(found) == 2, found
    assert found[0] == (
        "['leasehold.a', 'leasehold.b']: leasehold.a -> leasehold.b (leasehold/a.py:3); "
        "leasehold.b -> leasehold.a (leasehold/b.py:1)"
    )
    assert "leasehold.sub.d -> leasehold.sub.e (leasehold/sub/d.py:2)" in found[1]
    assert "leasehold.sub.e -> leasehold.sub.d (leasehold/sub/e.py:1)" in found[1]
    # The import inside `late` closes no circle with c.
    assert not any("leasehold.c" in f for f in found)
