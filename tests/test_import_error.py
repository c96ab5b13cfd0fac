"""An error at import is the error: a bad value ends ``import tensorflow`` (jax, torch) with
the ``ConfigError`` and its message, after the importer's own frames only; it stays an
exception the program catches as ``ConfigError`` or ``Exception`` (never as ``ImportError``),
and every other exception looks as it did."""

from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path

import pytest
from support import run_python

MESSAGE = (
    "MEMORY_LIMIT_MB='abc' is invalid: expected a number of MiB from 1 to 1048576 "
    "(1 TiB, more than any GPU has) such as 6144, or auto"
)
BAD = {"MEMORY_LIMIT_MB": "abc"}


def installed(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed in this environment")


@pytest.mark.parametrize(
    ("module", "named"), [("tensorflow", ""), ("jax", "JAX: "), ("torch", "PyTorch: ")]
)
def test_a_bad_value_ends_the_import_with_the_error_alone(module: str, named: str) -> None:
    installed(module)
    run = run_python(f"import {module}", BAD)
    assert run.returncode == 1
    assert run.stderr == (
        "Traceback (most recent call last):\n"
        '  File "<string>", line 1, in <module>\n'
        f"tfboot.ConfigError: {named}{MESSAGE}\n"
    )


def test_the_importer_s_own_frames_are_kept(tmp_path: Path) -> None:
    (tmp_path / "model.py").write_text("import tensorflow as tf\n")
    (tmp_path / "train.py").write_text("import os\nimport model\n")
    run = run_python(tmp_path / "train.py", BAD, cwd=tmp_path)
    assert run.returncode == 1
    assert run.stderr == (
        "Traceback (most recent call last):\n"
        f'  File "{tmp_path / "train.py"}", line 2, in <module>\n'
        "    import model\n"
        f'  File "{tmp_path / "model.py"}", line 1, in <module>\n'
        "    import tensorflow as tf\n"
        f"tfboot.ConfigError: {MESSAGE}\n"
    )


@pytest.mark.parametrize(
    "code",
    [
        'import importlib; importlib.import_module("tensorflow")',
        "import keras",
        "import threading\n"
        't = threading.Thread(target=__import__, args=("tensorflow",)); t.start(); t.join()',
    ],
    ids=["import_module", "keras", "thread"],
)
def test_no_frame_of_tfboot_or_importlib_is_shown(code: str) -> None:
    run = run_python(code, BAD)
    assert run.stderr.endswith(f"tfboot.ConfigError: {MESSAGE}\n"), run.stderr
    assert "tfboot/" not in run.stderr and "<frozen importlib" not in run.stderr, run.stderr


def test_the_error_is_caught_as_config_error_never_as_import_error() -> None:
    code = textwrap.dedent(
        """
        import traceback
        import tfboot
        for catch in (tfboot.ConfigError, ValueError, Exception):
            try:
                try:
                    import tensorflow
                except ImportError:
                    print("caught as ImportError")
            except catch as exc:
                frames = traceback.extract_tb(exc.__traceback__)
                print(catch.__name__, type(exc).__name__, [f.filename for f in frames])
        """
    )
    run = run_python(code, BAD)
    assert run.returncode == 0 and run.stderr == "", run.stderr
    lines = run.stdout.splitlines()
    assert [line.split(" [")[0] for line in lines] == [
        "ConfigError ConfigError", "ValueError ConfigError", "Exception ConfigError"
    ]  # fmt: skip
    # Caught, its traceback is the importer's line and the hook's one frame: no importlib.
    for line in lines:
        where = line.split(" [", 1)[1]
        assert where.startswith("'<string>', '") and where.endswith("tfboot/_hook.py']"), line


def test_other_exceptions_look_as_they_did() -> None:
    # After a config error the program caught, an uncaught error is Python's own text.
    code = "try:\n    import tensorflow\nexcept Exception:\n    pass\n1 / 0"
    run = run_python(code, BAD)
    assert run.stderr == (
        "Traceback (most recent call last):\n"
        '  File "<string>", line 5, in <module>\n'
        "ZeroDivisionError: division by zero\n"
    )


def test_an_error_in_the_framework_s_own_import_looks_as_without_tfboot(tmp_path: Path) -> None:
    """A broken install (a stand-in: a ``torch`` package whose ``__init__`` raises, as one
    missing a library does) shows the frames and message it shows without tfboot: no frame
    of tfboot's between the importer and the framework, so the report names the framework."""
    package = tmp_path / "torch"
    package.mkdir()
    (package / "__init__.py").write_text('x = 1\nraise KeyError("broken install")\n')
    (tmp_path / "train.py").write_text("import os\nimport torch\n")
    env = {"PYTHONPATH": str(tmp_path)}
    for code in ("import torch", tmp_path / "train.py"):
        plain = run_python(code, env | {"TFBOOT_DISABLE": "1"}).stderr
        hooked = run_python(code, env).stderr
        assert hooked == plain and plain.endswith("KeyError: 'broken install'\n"), hooked
        assert "tfboot" not in hooked
