"""Interpreter start-up: cheap, stdlib-only, silent, and never failing."""

from __future__ import annotations

import string
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import run_module, run_python, scenario_env
from tfboot.settings import ALL_NAMES

ROOT = Path(__file__).resolve().parents[1]

INVALID = {
    "MEMORY_LIMIT_MB": "abc",
    "VISIBLE_GPU": "x",
    "TFBOOT_ON_ERROR": "explode",
    "TFBOOT_DISABLE": "maybe",
    "TFBOOT_LOG": "loud",
}


def imported_under_tfboot(env: dict[str, str]) -> dict[str, list[str]]:
    """Map each tfboot module imported at start-up to the modules its import pulled in."""
    run = run_python("pass", env, args=("-X", "importtime"))
    assert run.returncode == 0, run.stderr
    rows = []
    for line in run.stderr.splitlines():
        if line.startswith("import time:") and "|" in line and "imported package" not in line:
            name_field = line.rsplit("|", 1)[1]
            rows.append((len(name_field) - len(name_field.lstrip()), name_field.strip()))
    nested: dict[str, list[str]] = {}
    # -X importtime prints a module after everything its import pulled in, indented deeper.
    for position, (indent, name) in enumerate(rows):
        if name.startswith("tfboot"):
            children = []
            for child_indent, child in reversed(rows[:position]):
                if child_indent <= indent:
                    break
                children.append(child)
            nested[name] = children
    return nested


@pytest.mark.parametrize(
    "env",
    [{}, {"MEMORY_LIMIT_MB": "6144", "VIRTUAL_SPLIT": "2"}, INVALID, {"TFBOOT_DISABLE": "1"}],
    ids=["unset", "set", "invalid", "disabled"],
)
def test_startup_imports_only_the_tfboot_package(env: dict[str, str]) -> None:
    # tfboot.pth imports the package, which imports nothing (sys is loaded) and only puts a
    # trampoline on sys.meta_path; the hooks load with TensorFlow.
    assert imported_under_tfboot(env) == {"tfboot": []}


def test_hook_modules_load_only_with_tensorflow() -> None:
    code = "import sys; print(sorted(m for m in sys.modules if m.startswith('tfboot')))"
    assert run_python(code, {"VIRTUAL_SPLIT": "2"}).stdout.strip() == "['tfboot']"


@pytest.mark.parametrize(
    "command", [["-c", "pass"], ["-m", "pip", "--version"], ["-I", "-c", "pass"]]
)
def test_invalid_config_never_disturbs_processes_that_do_not_import_tensorflow(
    command: list[str],
) -> None:
    run = subprocess.run(
        [sys.executable, *command], env=scenario_env(INVALID), capture_output=True, text=True
    )
    assert run.returncode == 0
    assert run.stderr == ""


def test_the_trampoline_is_registered_once_even_in_isolated_mode() -> None:
    code = (
        "import site, sys, sysconfig, tfboot; site.addsitedir(sysconfig.get_paths()['purelib']); "
        "print(sum(f is tfboot for f in sys.meta_path))"
    )
    assert run_python(code, args=("-I",)).stdout.strip() == "1"


def test_pth_and_start_files_are_installed_at_site_packages_root() -> None:
    import sysconfig

    site = Path(sysconfig.get_paths()["purelib"])
    assert (site / "tfboot.pth").read_text() == (ROOT / "bootstrap" / "tfboot.pth").read_text()
    assert (site / "tfboot.start").read_text().strip() == "tfboot:_start"
    assert (site / "tfboot.py").read_text() == (ROOT / "bootstrap/missing/tfboot.py").read_text()


env_values = st.text(alphabet=string.printable + "é\u00a0", max_size=12)
environments = st.dictionaries(st.sampled_from(sorted(ALL_NAMES)), env_values, max_size=6)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(environments)
def test_any_environment_starts_cleanly(env: dict[str, str]) -> None:
    env = {k: v for k, v in env.items() if "\x00" not in v and k != "TFBOOT_ENV_FILE"}
    run = subprocess.run(
        [sys.executable, "-c", "pass"], env=scenario_env(env), capture_output=True, text=True
    )
    assert (run.returncode, run.stderr) == (0, "")


def test_show_and_check_do_not_import_tensorflow(tmp_path: Path) -> None:
    code = (
        "import sys; from tfboot.cli import main; main(['show']); main(['check']); "
        "print('tensorflow' in sys.modules)"
    )
    run = run_python(code, {"VIRTUAL_SPLIT": "2"})
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().endswith("False")


def test_check_exit_status(tmp_path: Path) -> None:
    good = tmp_path / "good.env"
    good.write_text("MEMORY_LIMIT_MB=6144\nVIRTUAL_SPLIT=2\n")
    bad = tmp_path / "bad.env"
    bad.write_text("MEMORY_LIMIT_MB=6144\nVIRTUAL_SPLIT=1024,1024,8192\n")
    # VIRTUAL_SPLIT is TensorFlow's: an installed PyTorch or JAX would refuse it at import
    ok = run_module(["tfboot", "check", "--framework", "tensorflow", "--env-file", str(good)])
    assert ok.returncode == 0 and "all valid" in ok.stdout
    failed = run_module(["tfboot", "check", "--env-file", str(bad)])
    assert failed.returncode == 1
    assert "VIRTUAL_SPLIT='1024,1024,8192' is invalid" in failed.stderr


def test_help_explains_the_commands() -> None:
    run = run_module(["tfboot", "--help"])
    assert run.returncode == 0
    for word in ("show", "check", "doctor", "manifests", "MEMORY_LIMIT_MB", "examples:"):
        assert word in run.stdout
