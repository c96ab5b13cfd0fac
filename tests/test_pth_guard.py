"""A ``tfboot.pth`` whose package is gone keeps every interpreter start silent, exit 0.

A partial uninstall, or an image layer that deleted the ``tfboot`` folder, leaves the
``.pth`` behind; ``site`` runs its import line at every start. The wheel installs a
one-file stand-in, ``tfboot.py``, beside the folder: Python prefers the package while its
folder exists, and imports the stand-in only when it is gone. Each test builds a bare
virtual environment holding the release's ``tfboot.pth`` and ``tfboot.py`` (the package
folder absent, or present as the control) and runs ``python -c pass`` in it. Run on this
test environment's Python and on every other ``python3.N`` found on PATH (the 3.13 to
3.15 images run the same start-up files in tests/docker).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from support import scenario_env

ROOT = Path(__file__).resolve().parents[1]
PTH = (ROOT / "bootstrap" / "tfboot.pth").read_text()
PACKAGE = Path(sysconfig.get_paths()["purelib"]) / "tfboot"
STANDIN = PACKAGE.parent / "tfboot.py"  # installed by the wheel next to the folder


def other_pythons() -> list[str]:
    """Other CPythons 3.9+ here, one per version: ``python3.N`` on PATH and pyenv's."""
    candidates = [shutil.which(f"python3.{minor}") for minor in range(9, 16)]
    if shutil.which("pyenv"):
        root = subprocess.run(["pyenv", "root"], capture_output=True, text=True).stdout.strip()
        candidates += [str(p) for p in sorted(Path(root, "versions").glob("3.*/bin/python"))]
    found: dict[tuple[int, ...], str] = {}
    for path in filter(None, candidates):
        probe = subprocess.run(
            [path, "-c", "import sys; print(*sys.version_info[:2])"], capture_output=True, text=True
        )
        version = tuple(map(int, probe.stdout.split())) if probe.returncode == 0 else ()
        if version >= (3, 9) and version != sys.version_info[:2]:
            found.setdefault(version, path)
    return [found[v] for v in sorted(found)]


PYTHONS = [sys.executable, *other_pythons()]


def bare_venv(
    python: str, where: Path, pth: str, *, with_package: bool, with_standin: bool = True
) -> str:
    """A venv with no pip, holding ``pth`` as tfboot.pth, the stand-in and the package."""
    subprocess.run([python, "-m", "venv", "--without-pip", str(where)], check=True)
    interpreter = str(where / "bin" / "python")
    site = subprocess.run(
        [interpreter, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(site) / "tfboot.pth").write_text(pth)
    if with_standin:
        shutil.copy(STANDIN, Path(site) / "tfboot.py")
    if with_package:
        shutil.copytree(PACKAGE, Path(site) / "tfboot", ignore=shutil.ignore_patterns("*.pyc"))
    return interpreter


def start(python: str, code: str = "pass") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [python, "-c", code], env=scenario_env(), capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("python", PYTHONS)
def test_pth_without_its_package_is_silent(python: str, tmp_path: Path) -> None:
    venv = bare_venv(python, tmp_path / "venv", PTH, with_package=False)
    run = start(venv)
    assert (run.returncode, run.stdout, run.stderr) == (0, "", "")


@pytest.mark.parametrize("python", PYTHONS)
def test_pth_with_its_package_installs_the_trampoline(python: str, tmp_path: Path) -> None:
    """From CPython 3.10, which tfboot runs on; an older one stands aside, silently."""
    venv = bare_venv(python, tmp_path / "venv", PTH, with_package=True)
    run = start(venv, "import sys; print(sys.modules['tfboot'] in sys.meta_path)")
    supported = "python3.9" not in Path(python).name and "/3.9." not in python
    assert (run.returncode, run.stdout.strip(), run.stderr) == (0, str(supported), "")


def test_without_the_standin_the_line_would_print(tmp_path: Path) -> None:
    # The control: with the stand-in gone too, the import line fails at every start.
    venv = bare_venv(sys.executable, tmp_path / "venv", PTH, with_package=False, with_standin=False)
    run = start(venv)
    assert run.returncode == 0
    assert "ModuleNotFoundError" in run.stderr


def test_the_standin_says_what_is_wrong_when_used(tmp_path: Path) -> None:
    venv = bare_venv(sys.executable, tmp_path / "venv", PTH, with_package=False)
    run = start(venv, "import tfboot; tfboot.apply()")
    assert run.returncode == 1
    assert "the tfboot package folder is missing" in run.stderr
