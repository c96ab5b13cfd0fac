"""TensorFlow at the versions where what tfboot sets moved, each in an environment of its own
(built by scripts/test.sh from requirements/tf-*.txt; the test environment holds the
newest): TensorFlow 2.12.1 (Keras 2), 2.15.1 (Keras 2) on Python 3.10, 2.16.2 with the
oldest Keras 3 (3.0.5), 2.17.1 keeping Keras 2 through tf-keras (``TF_USE_LEGACY_KERAS=1``),
and the newest.
Every claim of the configured line, ``tfboot show`` and ``doctor --json`` is one that
version takes, read back from TensorFlow itself (its thread pools, its logical devices,
Keras's policy, tf.data's ``GetOptions`` on a pipeline).

tf.data's ``AutotuneOptions.initial_parallelism`` exists from TensorFlow 2.17: before it,
the RAM and CPU budgets arrive and no initial parallelism is set or named.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from support import configured as support_configured
from support import last_json, matrix_python, scenario_env

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
    return matrix_python("tf", version)


VERSIONS = ["2.12", "2.15-py3.10", "2.16-keras-3.0", "2.17-tf-keras", "newest"]
# What each environment's images set besides: tf-keras is used only when asked for.
ROW_ENV = {"2.17-tf-keras": {"TF_USE_LEGACY_KERAS": "1"}}
ROWS = """
import json, sys, tensorflow as tf
print(json.dumps({"python": sys.version_info[:2], "tf": tf.__version__,
    "intra": tf.config.threading.get_intra_op_parallelism_threads(),
    "inter": tf.config.threading.get_inter_op_parallelism_threads(),
    "cpus": len(tf.config.list_logical_devices("CPU")),
    "policy": tf.keras.mixed_precision.global_policy().name}))
"""


def run(version: str, args: list[str], env: dict[str, str] | None = None,
        ) -> subprocess.CompletedProcess[str]:  # fmt: skip
    env = {**(ENV if env is None else env), **ROW_ENV.get(version, {})}
    return subprocess.run([python(version), *args], env=scenario_env(env),
                          text=True, capture_output=True, timeout=300, cwd=Path("/"))  # fmt: skip


@pytest.mark.parametrize("version", VERSIONS)
def test_the_contract_s_cpu_rows_hold(version: str) -> None:
    env = {"CPU_THREADS": "2", "VIRTUAL_SPLIT": "3", "MIXED_PRECISION": "mixed_bfloat16"}
    done = run(version, ["-c", ROWS], env)
    assert done.returncode == 0, done.stderr
    found = last_json(done.stdout)
    assert (found["intra"], found["inter"], found["cpus"]) == (2, 2, 3), found
    assert found["policy"] == "mixed_bfloat16", found
    if version.endswith("py3.10"):
        assert found["python"] == [3, 10]
    silent = run(version, ["-c", ROWS], {})
    assert silent.returncode == 0 and "tfboot" not in silent.stderr, silent.stderr
    bad = run(version, ["-c", "import tensorflow"], {"CPU_THREADS": "lots"})
    assert bad.returncode != 0 and "CPU_THREADS='lots' is invalid" in bad.stderr


@pytest.mark.parametrize("version", VERSIONS)
def test_tf_data_gets_only_the_options_that_tensorflow_has(version: str) -> None:
    done = run(version, ["-c", READ_BACK])
    assert done.returncode == 0, done.stderr
    found = last_json(done.stdout)
    configured = support_configured(done.stderr, "TensorFlow")
    # a third of the room this process's resident set (TensorFlow's runtime) leaves under
    # 60% of HOST_MEMORY_LIMIT_MB=4096, measured as the pipeline starts
    assert ((2457 - 1500) // 3) << 20 <= found["fields"]["ram_budget"] <= (2457 // 3) << 20
    assert found["fields"]["cpu_budget"] == 2
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


# Keras 3 with the JAX backend needs JAX: the newest environment has it.
@pytest.mark.parametrize("version", [v for v in VERSIONS if v != "2.16-keras-3.0"])
def test_keras_2_runs_on_tensorflow_whatever_keras_backend_says(version: str) -> None:
    """Keras 2 (bundled, or tf-keras with ``TF_USE_LEGACY_KERAS=1``) reads no KERAS_BACKEND:
    a leftover one never makes TensorFlow a data loader (which would hide its GPUs). Keras 3
    (the newest environment) does take it."""
    code = (
        "import os, importlib; keras = importlib.import_module('tf_keras' if "
        "os.environ.get('TF_USE_LEGACY_KERAS') else 'keras'); import tensorflow; "
        "print(keras.__version__)"
    )
    done = run(version, ["-c", code], {"KERAS_BACKEND": "jax", "CPU_THREADS": "2"})
    assert done.returncode == 0, done.stderr
    configured = support_configured(done.stderr, "TensorFlow")
    if done.stdout.split()[-1].startswith("2."):
        assert "data loader" not in configured and "intra-op threads 2" in configured
    else:
        assert "TensorFlow is its data loader" in configured
