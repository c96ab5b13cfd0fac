"""A user's error is the user's: an exception the program's own code raises through one of
tfboot's wrappers (a DataLoader's, tf.data's, the start-up deadline, the peer watcher's
bracket) shows exactly what it shows without tfboot, and no frame of tfboot's.

Each program (``torch_program.py``, ``tensorflow_program.py``) runs its cases once with
tfboot and once with ``TFBOOT_DISABLE=1``, in the same environment: a two-task cluster
(``DIST_*``: PyTorch's start-up deadline, TensorFlow's peer watcher) and a fake cgroup with
a memory limit and a CPU quota (tf.data's defaults, the DataLoader's checks), so every
wrapper is in place. What each case's error shows is compared whole: its type, its
message (with the worker's traceback PyTorch puts there) and every frame of its
traceback (file, line, function), its causes' as well. An error of the framework's own
import is ``tests/test_import_error.py``'s.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from support import cgroup_limits, free_ports, run_python

HERE = Path(__file__).parent
# What TensorFlow numbers or names anew in each process: a dataset's and a function's
# counter (tfboot's options add datasets), autograph's generated file. Masked, as nothing
# of tfboot's can hide in them.
RENAMED = (
    (re.compile(r"(Dataset):\d+"), r"\1:N"),
    (re.compile(r"(__inference_\w+?)_\d+\b"), r"\1_N"),
    (re.compile(r"__autograph_generated_file\w+\.py"), "__autograph_generated_file.py"),
)
TORCH_CASES = [
    "collate, no worker", "dataset, no worker", "collate, 2 forked workers",
    "dataset, 2 forked workers", "sampler, 2 forked workers", "collate, a spawned worker",
    "init_process_group",
]  # fmt: skip
TENSORFLOW_CASES = [
    "map at trace", "map in a loop", "map in get_single_element", "map in a tf.function",
    "a tf.function given a dataset", "connect_to_cluster",
]  # fmt: skip


def shown(program: str, env: dict[str, str], cases: list[str]) -> dict:
    run = run_python(HERE / program, env, cwd=HERE)
    assert run.returncode == 0, run.stderr[-3000:]
    text = run.stdout.strip().splitlines()[-1]
    for pattern, replacement in RENAMED:
        text = pattern.sub(replacement, text)
    seen = json.loads(text)
    assert sorted(seen) == sorted([*cases, "tfboot"])  # every case of the program checked
    return seen


@pytest.fixture(scope="module")
def environment(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    hosts = ",".join(f"127.0.0.1:{port}" for port in free_ports(2))
    return {
        "TFBOOT_CGROUP_ROOT": cgroup_limits(tmp_path_factory.mktemp("cgroup")),
        "DISTRIBUTED": "k8s", "DIST_TASKS": "2", "DIST_HOSTS": f"worker={hosts}",
        "DIST_TASK_TYPE": "worker", "DIST_TASK_INDEX": "0", "DIST_STARTUP_TIMEOUT": "300",
        "TFBOOT_LOG": "quiet",
    }  # fmt: skip


@pytest.fixture(scope="module")
def torch_shown(environment: dict[str, str]) -> tuple[dict, dict]:
    off = environment | {"TFBOOT_DISABLE": "1"}
    return shown("torch_program.py", environment, TORCH_CASES), \
        shown("torch_program.py", off, TORCH_CASES)  # fmt: skip


@pytest.fixture(scope="module")
def tensorflow_shown(environment: dict[str, str]) -> tuple[dict, dict]:
    off = environment | {"TFBOOT_DISABLE": "1"}
    return shown("tensorflow_program.py", environment, TENSORFLOW_CASES), \
        shown("tensorflow_program.py", off, TENSORFLOW_CASES)  # fmt: skip


def same(case: str, seen: tuple[dict, dict]) -> None:
    """The case's error shows with tfboot what it shows without, and nothing of tfboot's."""
    hooked, plain = seen
    assert plain[case] is not None, f"{case}: the program's error was not raised"
    assert hooked[case] == plain[case], case
    folder = hooked["tfboot"]
    assert folder is not None and plain["tfboot"] == folder  # the same tfboot, on and off
    for kind, message, frames in hooked[case]:
        assert folder not in message, (case, kind)
        assert not [f for f in frames if f[0].startswith(folder + "/")], (case, kind, frames)


@pytest.mark.slow
@pytest.mark.parametrize("case", TORCH_CASES)
def test_a_pytorch_program_s_error_shows_as_without_tfboot(case: str, torch_shown) -> None:
    same(case, torch_shown)


@pytest.mark.tf
@pytest.mark.slow
@pytest.mark.parametrize("case", TENSORFLOW_CASES)
def test_a_tensorflow_program_s_error_shows_as_without_tfboot(case: str, tensorflow_shown) -> None:
    same(case, tensorflow_shown)
