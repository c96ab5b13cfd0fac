"""tf.data defaults under a container's limits, with real TensorFlow (2.21 and the pinned nightly).

The limits come from a fake cgroup tree (``TFBOOT_CGROUP_ROOT``): 4 GiB of memory, a
working set of 500 MiB and a 2-CPU quota, so every pipeline must run with a 652 MiB RAM
budget (a third of the room under 60% of the limit), a CPU budget of 2 and an initial
parallelism of 2, unless it set its own; a pipeline started when the working set has grown
gets the smaller room left then. ``consumers.py`` iterates a dataset
every way a program does and records the options of the dataset each consumer ran.
TensorFlow 2.22.0rc0 runs the same script in its container test
(``tests/docker/test_container_config.py``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import REPO, cgroup_limits, run_python

CONSUMERS = Path(__file__).with_name("consumers.py")
NIGHTLY = REPO / ".venv-nightly" / "bin" / "python"
RAM = 652 << 20  # (0.6 * 4096 - 500) // 3 MiB
DEFAULTS = [RAM, 2, 2]
CONSUMED = [
    "loop", "fit", "evaluate", "predict", "experimental_distribute_dataset",
    "distribute_datasets_from_function", "tf.function",
]  # fmt: skip


def consumed(python: Path | str, env: dict[str, str]) -> tuple[dict, str]:
    result = run_python(CONSUMERS, env, python=python, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1]), result.stderr


def check_every_consumer(seen: dict) -> None:
    for name in CONSUMED:
        assert seen.get(name), f"{name} ran no dataset through the injection point: {seen}"
        assert all(options == DEFAULTS for options in seen[name]), (name, seen[name])
    assert seen["own options"] == [[RAM, 7, 2]]  # the pipeline's cpu_budget wins


@pytest.mark.tf
def test_every_consumer_runs_with_the_defaults(tmp_path: Path) -> None:
    seen, err = consumed(
        REPO / ".venv" / "bin" / "python", {"TFBOOT_CGROUP_ROOT": cgroup_limits(tmp_path)}
    )
    check_every_consumer(seen)
    assert "tf.data defaults RAM budget 652 MiB now, measured per pipeline, CPU budget 2, " \
        "initial parallelism 2" in err  # fmt: skip
    assert "HOST_MEMORY_LIMIT_MB=auto: 4096 MiB from /sys/fs/cgroup/memory.max" in err
    assert "Changing the value of option" not in err  # the pipeline's own field is not merged


@pytest.mark.nightly
def test_every_consumer_runs_with_the_defaults_on_the_nightly(tmp_path: Path) -> None:
    seen, _ = consumed(NIGHTLY, {"TFBOOT_CGROUP_ROOT": cgroup_limits(tmp_path)})
    check_every_consumer(seen)


@pytest.mark.tf
def test_host_leaves_every_pipeline_alone(tmp_path: Path) -> None:
    env = {"TFBOOT_CGROUP_ROOT": cgroup_limits(tmp_path), "HOST_MEMORY_LIMIT_MB": "host"}
    seen, err = consumed(REPO / ".venv" / "bin" / "python", env)
    assert seen["loop"] == [[None, None, None]], seen
    assert "tf.data defaults" not in err


GROWN = """
import os
import tensorflow as tf
current = os.path.join(os.environ["TFBOOT_CGROUP_ROOT"], "sys/fs/cgroup/memory.current")
def budget():  # the options of the dataset a consumer would run
    return tf.data.Dataset.range(3)._apply_debug_options().options().autotune.ram_budget >> 20
first = budget()
open(current, "w").write(str(1500 << 20))  # the model and another pipeline took 1 GiB more
print(first, budget())
"""


@pytest.mark.tf
def test_each_pipeline_gets_the_room_left_when_it_starts(tmp_path: Path) -> None:
    root = cgroup_limits(tmp_path)
    result = run_python(GROWN, {"TFBOOT_CGROUP_ROOT": root}, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == [str(RAM >> 20), str((2457 - 1500) // 3)]


MISSING = """
import tfboot
tfboot.uninstall()
import tensorflow as tf
from tensorflow.python.data.ops import dataset_ops
del dataset_ops.DatasetV2._apply_debug_options  # a TensorFlow without the injection point
result = tfboot.apply(tf)
print(result.error, len(result.calls))
"""


@pytest.mark.tf
def test_a_tensorflow_without_the_injection_point_warns_once(tmp_path: Path) -> None:
    """The real TensorFlow with ``_apply_debug_options`` removed stands in for a version
    that renamed it."""
    result = run_python(MISSING, {"TFBOOT_CGROUP_ROOT": cgroup_limits(tmp_path)}, timeout=300)
    # Two thread pools, pinned host memory and the allocator: no tf.data patch.
    assert result.returncode == 0 and result.stdout.strip() == "None 4", result.stderr[-3000:]
    warnings = [line for line in result.stderr.splitlines() if "tf.data defaults (" in line]
    assert len(warnings) == 1, result.stderr[-3000:]
    assert "not applied: TensorFlow 2.21.0 has no Dataset._apply_debug_options" in warnings[0]
    assert "Traceback" not in result.stderr
    assert "tf.data defaults RAM budget" not in result.stderr  # not claimed in the log line


PATHS = Path(__file__).with_name("paths.py")


@pytest.mark.tf
def test_every_path_runs_with_the_defaults_under_the_pipelines_own_options(tmp_path: Path) -> None:
    """Read from TensorFlow's own ``GetOptions`` op on the dataset each path runs: a
    ``tf.function`` argument and ``get_single_element`` included (both lost the pipeline's
    options, or ran without defaults, in the previous release)."""
    result = run_python(PATHS, {"TFBOOT_CGROUP_ROOT": cgroup_limits(tmp_path)}, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    paths = ["loop", "reduce", "get_single_element", "tf.function argument",
             "get_single_element in a tf.function", "save"]  # fmt: skip
    assert {p: seen[p] for p in paths} == {p: DEFAULTS for p in paths}
    own = {p: seen[f"{p} (own cpu_budget)"] for p in paths}
    assert own == {p: [RAM, 7, 2] for p in paths}
    assert "Changing the value of option" not in result.stderr


RESIZED = """
import os
import tensorflow as tf
limit = os.path.join(os.environ["TFBOOT_CGROUP_ROOT"], "sys/fs/cgroup/memory.max")
def budget():  # the options of the dataset a consumer would run
    return tf.data.Dataset.range(3)._apply_debug_options().options().autotune.ram_budget >> 20
first = budget()
open(limit, "w").write(str(2 << 30))  # an in-place resize: 4 GiB -> 2 GiB
second = budget()
open(limit, "w").write("max")  # the limit lifted: the last one stays
print(first, second, budget())
"""


@pytest.mark.tf
def test_a_pipeline_started_after_a_resize_gets_the_room_under_the_new_limit(
    tmp_path: Path,
) -> None:
    root = cgroup_limits(tmp_path)
    result = run_python(RESIZED, {"TFBOOT_CGROUP_ROOT": root}, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    resized = (int(2048 * 0.6) - 500) // 3
    assert result.stdout.split() == [str(RAM >> 20), str(resized), str(resized)]
