"""Imports of the project's own modules inside functions (issue 19's count: <= 25, each for an optional dependency).

    python benchmarks/house/imports_in_functions.py

Walks every function body of the package's folders (``pivot_envs/`` and the folders linked into it) with ``ast`` and prints one row per
file that has such an import, then the total. An import in a nested function is counted once.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def own_import(node: ast.AST) -> bool:
    """An ``import``/``from`` statement that names ``pivot_envs`` (or a relative module)."""
    if isinstance(node, ast.ImportFrom):
        return node.level > 0 or (node.module or "").startswith("pivot_envs")
    return isinstance(node, ast.Import) and any(a.name.startswith("pivot_envs") for a in node.names)


def count(path: Path) -> set[int]:
    """Line numbers of the in-function imports of the project in one file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {sub.lineno for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            for sub in ast.walk(node) if own_import(sub)}


def main() -> None:
    package = ROOT / "pivot_envs"
    folders = [package, *(p.resolve() for p in package.iterdir() if p.is_symlink())]  # rglob skips the links
    files = {p for folder in folders for p in folder.rglob("*.py")}
    found = {str(p.relative_to(ROOT)): lines for p in files if (lines := count(p))}
    print("| file | imports in functions | lines |\n|---|---|---|")
    for name, lines in sorted(found.items()):
        print(f"| {name} | {len(lines)} | {', '.join(map(str, sorted(lines)))} |")
    print(f"| total | {sum(len(lines) for lines in found.values())} | |")


if __name__ == "__main__":
    main()
