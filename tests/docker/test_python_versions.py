"""The start-up hook on every CPython an image may carry: 3.11, 3.13, 3.14 and 3.15.

On 3.11 to 3.14, ``site`` runs the import line of ``tfboot.pth``, which only puts the
trampoline in place. Python 3.15 implements PEP 829: the presence of ``tfboot.start`` makes
``site`` skip the import lines of the matching ``tfboot.pth`` and call the entry point
``tfboot:_start`` instead, which imports the same package, so the trampoline is put in
place once, not twice. Start-up stays silent on every version, also when only the
package folder was deleted. No TensorFlow exists for 3.15, so there the hook is shown
applying the configuration to a stand-in ``tensorflow`` package (a fake, recording the
``tf.config`` calls it receives: ``standin/tensorflow_standin``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from container_runs import Outcome, run_container

pytestmark = pytest.mark.docker

STANDIN = Path(__file__).resolve().parent / "standin"
PROBE = [(STANDIN / "startup_probe.py", "/probe/startup_probe.py")]
FAKE_TENSORFLOW = [(STANDIN / "tensorflow_standin", "/standin")]
FAKE_TENSORFLOW_ENV = {"PYTHONPATH": "/standin"}
START_FILES = "3.15"  # the first CPython that reads PEP 829 .start files
CPU = {"name": "/physical_device:CPU:0", "device_type": "CPU"}
NO_LIMIT = {"memory_limit": None}


def test_site_runs_tfboot_exactly_once(any_python_image: tuple[str, str]) -> None:
    python, image = any_python_image
    counts = run_container(image, ["python3", "-S", PROBE[0][1]], mounts=PROBE).ok().json()
    assert counts["version"] == python, counts
    assert counts["package_bodies"] == 1, counts
    if python == START_FILES:
        # The .start entry point ran once and the .pth import line not at all.
        assert (counts["pth_import_lines"], counts["start_calls"]) == (0, 1), counts
    else:
        assert (counts["pth_import_lines"], counts["start_calls"]) == (1, 0), counts
    # Either way the hook itself waits for TensorFlow: the trampoline alone is in place.
    assert (counts["install_calls"], counts["hook_loaded"]) == (0, False), counts
    assert counts["tfboot_finders"] == ["tfboot"], counts


def test_site_says_the_start_file_replaced_the_pth_import_line(
    image_of: Callable[[str], str],
) -> None:
    """Python 3.15's own ``site`` trace (``python -v``) names both files."""
    trace = run_container(image_of(START_FILES), ["python3", "-v", "-c", "pass"]).ok().stderr
    site_packages = f"/usr/local/lib/python{START_FILES}/dist-packages"
    pth, start = f"{site_packages}/tfboot.pth", f"{site_packages}/tfboot.start"
    assert f"import lines in {pth} are suppressed due to matching {start} file." in trace
    assert f"Executing entry point: tfboot:_start from {start}" in trace
    assert f"Exec'ing from {pth}" not in trace


def test_start_after_only_the_package_folder_was_deleted(
    any_python_image: tuple[str, str],
) -> None:
    """A partial uninstall (an image layer deleting ``tfboot/``) leaves start-up silent."""
    python, image = any_python_image

    def start_without(*names: str) -> Outcome:
        site_packages = f"/usr/local/lib/python{python}/dist-packages"
        script = f"cd {site_packages} && rm -r {' '.join(names)} && exec python3 -c pass"
        return run_container(image, ["sh", "-c", script], user="0")

    # The stand-in tfboot.py the wheel installs beside the folder answers the import of
    # tfboot.pth (and tfboot.start's entry point on 3.15); without it, start-up would print.
    outcome = start_without("tfboot")
    assert (outcome.exit_code, outcome.stdout, outcome.stderr) == (0, "", ""), outcome
    outcome = start_without("tfboot", "tfboot.py")
    assert outcome.exit_code == 0, outcome
    assert "tfboot" in outcome.stderr, outcome  # the control: site reports the failed import
    outcome = start_without("tfboot", "tfboot.py", "tfboot.pth", "tfboot.start")
    assert (outcome.exit_code, outcome.stdout, outcome.stderr) == (0, "", ""), outcome


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        pytest.param(
            {"VIRTUAL_SPLIT": "2", "CPU_THREADS": "3"},
            [
                ["set_logical_device_configuration", [CPU, [NO_LIMIT, NO_LIMIT]]],
                ["set_intra_op_parallelism_threads", [3]],
            ],
            id="split-and-threads",
        ),
        pytest.param({"VIRTUAL_SPLIT": "2", "TFBOOT_DISABLE": "1"}, [], id="disabled"),
    ],
)
def test_hook_applies_to_the_standin_tensorflow_at_import(
    image_of: Callable[[str], str], env: dict[str, str], expected: list[Any]
) -> None:
    code = (
        "import json, tensorflow as tf, tfboot; result = tfboot.last_result(); "
        "print(json.dumps({'file': tf.__file__, 'calls': tf.CALLS, "
        "'applied': result.calls if result else None}))"
    )
    run = run_container(
        image_of(START_FILES), ["python3", "-c", code], {**FAKE_TENSORFLOW_ENV, **env},
        mounts=FAKE_TENSORFLOW,
    ).ok()  # fmt: skip
    # tfboot's one line on stderr says what it applied; nothing when disabled.
    assert ("tfboot: configured TensorFlow" in run.stderr) == bool(expected), run
    outcome = run.json()
    assert outcome["file"] == "/standin/tensorflow/__init__.py", outcome
    configured = [call for call in outcome["calls"] if call[0] != "list_physical_devices"]
    for call in expected:
        assert call in configured, outcome
    assert len(outcome["applied"] or []) == len(configured), outcome
    if not expected:
        assert configured == [], outcome


def test_invalid_value_fails_the_standin_tensorflow_import_only(
    image_of: Callable[[str], str],
) -> None:
    env = {**FAKE_TENSORFLOW_ENV, "MEMORY_LIMIT_MB": "abc"}
    image = image_of(START_FILES)
    tf_import = run_container(
        image, ["python3", "-c", "import tensorflow"], env, mounts=FAKE_TENSORFLOW
    )
    assert tf_import.exit_code != 0, tf_import
    assert "ConfigError" in tf_import.stderr and "MEMORY_LIMIT_MB" in tf_import.stderr, tf_import
    other = run_container(image, ["python3", "-c", "import json"], env, mounts=FAKE_TENSORFLOW)
    assert (other.exit_code, other.stderr) == (0, ""), other


@pytest.mark.parametrize("env", [{}, {"MEMORY_LIMIT_MB": "abc"}], ids=["unset", "invalid"])
def test_interpreter_start_is_silent(any_python_image: tuple[str, str], env: dict) -> None:
    _, image = any_python_image
    for command in (["python3", "-c", "pass"], ["python3", "-I", "-c", "pass"]):
        outcome = run_container(image, command, env)
        assert (outcome.exit_code, outcome.stdout, outcome.stderr) == (0, "", ""), outcome
