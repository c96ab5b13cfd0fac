#!/usr/bin/env python3
"""Check tfboot's layers from its source: every import goes down (or stays in its layer),
no framework adapter imports another, and no import makes a circle.

Run: python scripts/check_layers.py [bootstrap/tfboot]; exit 1 with one line per fault.
Every ``import`` counts, at module level or inside a function. The layers, lowest first,
are ``LAYERS``; docs/architecture.md draws them.

The package itself (``tfboot/__init__.py``: the one table of frameworks and the trampoline)
is the lowest layer: Python runs it before any of its modules, so every module may read it.
Its own imports inside functions (the trampoline's hand-over, the public names it loads on
first use) run only after it has loaded, when it is called: they are calls into the
package, not what loading it needs, and are not counted. At module level it may import
nothing of the package (nothing lies below it).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = "tfboot"
# Lowest first: a module may import its own layer and the layers before it.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("package", ("",)),
    ("foundations", ("errors", "values", "provenance", "frames")),
    ("node", ("node",)),
    ("cluster", ("cluster",)),
    ("contract", ("envfile", "settings", "typos")),
    ("budget", ("budget",)),
    ("adapters", ("adapters",)),
    ("frameworks", ("frameworks",)),
    ("executor", ("executor",)),
    ("usage", ("usage",)),
    ("start-up", ("_startup", "_hook")),
    ("kubernetes", ("kube",)),
    (
        "tools",
        ("__main__", "cli", "doctor", "verify", "selftest", "manifests", "inject", "suggestcmd"),
    ),
)
ADAPTERS = "adapters"
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, name: str, modules: set[str]) -> set[str]:
    """The tfboot modules ``path`` (module ``name``) imports, by full name: for ``from P
    import x``, the submodule ``P.x`` where there is one, else ``P`` itself."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in _module_level(tree) if name == PACKAGE else ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == PACKAGE}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != PACKAGE:
                continue
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                found.add(submodule if submodule in modules else target)
    return found


def _module_level(tree: ast.Module) -> list[ast.AST]:
    """Every node of ``tree`` outside the functions it defines (the package's own imports
    inside a function are calls into the package, run after it has loaded)."""
    found: list[ast.AST] = []
    pending: list[ast.AST] = [tree]
    while pending:
        node = pending.pop()
        found.append(node)
        pending += [c for c in ast.iter_child_nodes(node) if not isinstance(c, FUNCTIONS)]
    return found


def layer(name: str) -> int | None:
    """The index of ``name``'s layer (by its first part under the package); None: none."""
    head = name.split(".")[1] if "." in name else ""
    return next((i for i, (_label, members) in enumerate(LAYERS) if head in members), None)


def _folder(name: str, modules: dict[str, Path]) -> bool:
    """True when ``name`` lies in a sub-package (a folder) of tfboot, not a top-level file."""
    head = ".".join(name.split(".")[:2])
    return head in modules and modules[head].name == "__init__.py"


def check(root: Path) -> list[str]:
    modules = {module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    faults = [
        f"{name} is in no layer: add it to LAYERS in scripts/check_layers.py"
        for name in modules
        if layer(name) is None
    ]
    if faults:
        return faults
    for name, path in modules.items():
        targets = {t for t in imports(path, name, set(modules)) if t in modules and t != name}
        graph[name] = targets
        for target in sorted(targets):
            mine, theirs = layer(name) or 0, layer(target) or 0
            if theirs > mine:
                faults.append(
                    f"{name} ({LAYERS[mine][0]}) imports {target} ({LAYERS[theirs][0]}), "
                    "a higher layer"
                )
            parts, other = name.split("."), target.split(".")
            if parts[1:2] == other[1:2] == [ADAPTERS] and len(parts) > 2 and len(other) > 2:
                faults.append(f"{name} imports {target}: an adapter imports another adapter")
            elif mine == theirs and _folder(name, modules) and _folder(target, modules) and \
                    parts[1] != other[1]:  # fmt: skip
                faults.append(f"{name} imports {target}: two folders of the {LAYERS[mine][0]} "
                              "layer import each other; what they share belongs a layer "
                              "below")  # fmt: skip
    faults += [f"import circle: {' -> '.join(c)}" for c in circles(graph)]
    return faults


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One path for each circle found by a depth-first walk."""
    found: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def walk(node: str, path: list[str]) -> None:
        state[node] = 1
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                found.append([*path[path.index(target) :], target])
            elif target not in state:
                walk(target, [*path, target])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            walk(node, [node])
    return found


def main(argv: list[str]) -> int:
    root = Path(argv[0] if argv else Path(__file__).parent.parent / "bootstrap" / PACKAGE)
    faults = check(root.resolve())
    for fault in faults:
        print(fault)
    return 1 if faults else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
