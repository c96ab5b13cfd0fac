"""The house's rules, read from the source: layers, no circles, one list per fact.

``scripts/check_layers.py`` is run on the real package and on small made-up packages that
break each rule, so the check itself is known to fail when it should.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import tfboot
from tfboot.node.deviceplugin import PLUGINS

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "check_layers.py"


def check(package: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(package)], capture_output=True, text=True, check=False
    )


def test_the_package_imports_only_downward_without_circles() -> None:
    result = check(ROOT / "bootstrap" / "tfboot")
    assert result.returncode == 0 and result.stdout == "", result.stdout


def write(root: Path, files: dict[str, str]) -> Path:
    package = root / "tfboot"
    for name, text in {"__init__.py": "", **files}.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return package


@pytest.mark.parametrize(
    ("files", "fault"),
    [
        (
            {"errors.py": "def f():\n    from .settings import X\n", "settings.py": ""},
            "tfboot.errors (foundations) imports tfboot.settings (contract), a higher layer",
        ),
        (
            {"adapters/__init__.py": "", "adapters/jax.py": "from .torch import A\n",
             "adapters/torch.py": ""},
            "tfboot.adapters.jax imports tfboot.adapters.torch: an adapter imports another",
        ),
        (
            {"errors.py": "from . import values\n", "values.py": "from .errors import E\n"},
            "import circle: tfboot.errors -> tfboot.values -> tfboot.errors",
        ),
        (  # the package itself imports nothing of its own at module level
            {"__init__.py": "from .settings import X\n", "settings.py": ""},
            "tfboot (package) imports tfboot.settings (contract), a higher layer",
        ),
        (  # what inject and the checker share lives in kube/, a layer below both
            {"inject/__init__.py": "", "inject/patch.py": "from ..manifests.claims import C\n",
             "manifests/__init__.py": "", "manifests/claims.py": ""},
            "tfboot.inject.patch imports tfboot.manifests.claims: two folders of the tools "
            "layer import each other",
        ),
    ],
)  # fmt: skip
def test_the_check_finds_each_fault(tmp_path: Path, files: dict[str, str], fault: str) -> None:
    result = check(write(tmp_path, files))
    assert result.returncode == 1 and fault in result.stdout, result.stdout


def test_any_module_reads_the_package_which_calls_up_only_from_its_functions(
    tmp_path: Path,
) -> None:
    """The package is the lowest layer: a module of any layer reads its table, and its own
    imports inside a function (the trampoline's, the lazy names') make no circle."""
    files = {
        "__init__.py": "TABLE = {}\ndef find_spec():\n    from ._startup import go\n",
        "_startup.py": "from .errors import E\n",
        "errors.py": "from . import TABLE\n",
    }
    result = check(write(tmp_path, files))
    assert result.returncode == 0 and result.stdout == "", result.stdout


def test_a_module_outside_every_layer_is_named(tmp_path: Path) -> None:
    result = check(write(tmp_path, {"newthing.py": ""}))
    assert result.returncode == 1 and "tfboot.newthing is in no layer" in result.stdout


def test_the_docs_list_the_one_table_of_frameworks() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    rows = re.findall(r"^\| `(\w+)` \| `adapters/(\w+)\.py` \| ([^|]+) \|$", text, re.M)
    assert [(module, (adapter, name)) for module, adapter, name in rows] == list(
        tfboot.FRAMEWORKS.items()
    )


def test_the_docs_name_every_device_plugin_variable_and_resource() -> None:
    readme = (ROOT / "docs" / "gpu-memory.md").read_text()
    kubernetes = (ROOT / "docs" / "kubernetes.md").read_text()
    for plugin in PLUGINS:
        for variable in re.findall(r"[A-Z][A-Z_]+[A-Z]", plugin.variables):
            assert variable in readme, variable
        if plugin.resource:
            assert plugin.resource in readme + kubernetes, plugin.resource


def _table() -> dict[str, list[str]]:
    """docs/architecture.md's layer table: layer -> the files and folders its modules
    column names."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    start = text.index("| layer | modules | owns |")
    rows = {}
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        layer, modules = (cell.strip() for cell in line.strip("|").split("|")[:2])
        rows[layer] = [n for n in re.findall(r"`([^`]+)`", modules) if n.endswith((".py", "/"))]
    return rows


def test_the_architecture_table_is_the_layers_the_check_enforces() -> None:
    """Every layer of ``LAYERS``, in its order, with every module it holds: a folder named
    alone, or each of its modules listed."""
    sys.path.insert(0, str(SCRIPT.parent))
    from check_layers import LAYERS

    table = _table()
    assert list(table) == [label for label, _ in LAYERS]
    package = ROOT / "bootstrap" / "tfboot"
    for label, members in LAYERS:
        listed = table[label]
        for member in members:
            folder = package / member
            if member and folder.is_dir():
                assert f"{member}/" in listed, (label, member, listed)
                files = [n for n in listed if n.endswith(".py") and "/" not in n]
                if files and listed.index(f"{member}/") == 0 and len(members) == 1:
                    found = {p.name for p in folder.glob("*.py")} - {"__init__.py"}
                    assert found <= set(files), (label, sorted(found - set(files)))
                    assert set(files) - {"__init__.py"} <= found, (label, files)
            else:
                assert f"{member or '__init__'}.py" in listed, (label, member, listed)


def test_the_architecture_table_names_every_module_of_the_tree() -> None:
    """Every module of the package, read from the tree (not from ``LAYERS``), is named in
    the table: a top-level file by its name, a module of a folder after ``folder/``."""
    table = _table()
    package = ROOT / "bootstrap" / "tfboot"
    named: set[str] = set()
    for listed in table.values():
        folder = ""
        for name in listed:
            if name.endswith("/"):
                folder = name
            else:
                named.add(f"{folder}{name}" if folder and "/" not in name else name)
    modules = {p.relative_to(package).as_posix() for p in package.rglob("*.py")}
    assert modules <= named, sorted(modules - named)
