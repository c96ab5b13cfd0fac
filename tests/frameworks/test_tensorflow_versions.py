"""TensorFlow at the versions where what tfboot sets moved, each in an environment of its own
(built by scripts/test.sh from requirements/tf-*.txt; the test environment holds the
newest): every claim of the configured line, ``tfboot show`` and ``doctor --json`` is one
that version takes, read back from TensorFlow's own ``GetOptions`` on a pipeline.

tf.data's ``AutotuneOptions.initial_parallelism`` exists from TensorFlow 2.17: before it,
the RAM and CPU budgets arrive and no initial parallelism is set or named.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO, last_json, scenario_env, unavailable

pytestmark = pytest.mark.tf
ENV = {"CPU_THREADS": "2", "HOST_MEMORY_LIMIT_MB": "4096"}
READ_BACK = """
import json, tensorflow as tf
from tensorflow.core.framework import dataset_options_pb2
from tensorflow.python.ops import gen_dataset_ops
ds = tf.data.Dataset.range(8).map(lambda x: x * 2, num_parallel_calls=tf.data.AUTOTUNE)
ran = ds._apply_debug_options()  # the path every consumer takes; tfboot's hook is on it
tune = dataset_options_pb2.Options.FromString(
    gen_dataset_ops.get_options(ran._variant_tensor).numpy()).autotune_options
names = [f.name for f in tune.DESCRIPTOR.fields]
print(json.dumps({"version": tf.__version__, "fields": {
    n: getattr(tune, n) for n in ("ram_budget", "cpu_budget", "initial_parallelism")
    if n in names and tune.WhichOneof(f"optional_{n}")}}))
"""


def python(version: str) -> str:
    if version == "newest":
        return sys.executable
    found = REPO / f".venv-tf-{version}" / "bin" / "python"
    if not found.exists():
        unavailable(f"no {found.parent.parent.name} (scripts/test.sh builds the TensorFlow matrix)")
    return str(found)


def run(version: str, args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([python(version), *args], env=scenario_env(ENV), text=True,
                          capture_output=True, timeout=300, cwd=Path("/"))  # fmt: skip


@pytest.mark.parametrize("version", ["2.12", "newest"])
def test_tf_data_gets_only_the_options_that_tensorflow_has(version: str) -> None:
    done = run(version, ["-c", READ_BACK])
    assert done.returncode == 0, done.stderr
    found = last_json(done.stdout)
    configured = next(x for x in done.stderr.splitlines() if "configured TensorFlow" in x)
    assert found["fields"]["ram_budget"] == 1024 << 20 and found["fields"]["cpu_budget"] == 2
    if tuple(map(int, found["version"].split(".")[:2])) >= (2, 17):
        assert found["fields"]["initial_parallelism"] == 2
        assert "initial parallelism 2" in configured
        return
    assert "initial_parallelism" not in found["fields"]
    assert "initial parallelism 2" not in configured
    assert f"TensorFlow {'.'.join(found['version'].split('.')[:2])} has no such option" in (
        configured
    )
    shown = run(version, ["-m", "tfboot", "show"])
    assert "initial parallelism" not in shown.stdout and "CPU budget 2" in shown.stdout
    doctor = last_json(run(version, ["-m", "tfboot", "doctor", "--json"]).stdout)
    assert doctor["host_memory"]["tf_data"]["initial_parallelism"] is None
    assert not any("initial parallelism 2" in d for d in doctor["decisions"])
    assert json.dumps(doctor).count("initial parallelism 2") == 0
