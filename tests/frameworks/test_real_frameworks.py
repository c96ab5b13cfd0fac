"""JAX, PyTorch and Keras 3 on each backend, with their real CPU wheels, each in a fresh process.

What each framework received is read back from the framework itself: its thread pools, its
devices, its dtype policy, and the environment it was given.
"""

from __future__ import annotations

import json

import pytest
from support import JAX_POOL, NEWER_PYTHON, configured, matrix_python, run_python

pytestmark = pytest.mark.slow


def run_json(code: str, env: dict[str, str], version: str = "newest") -> dict:
    """``code`` after ``JAX_POOL``, in the environment of ``version`` (the version matrix's
    JAX name, or ``newest``): its last line's JSON, and its stderr."""
    done = run_python(JAX_POOL + code, env, python=matrix_python("jax", version))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]) | {"stderr": done.stderr}


def failing(code: str, env: dict[str, str]) -> str:
    done = run_python(code, env)
    assert done.returncode != 0, done.stdout
    return done.stderr.strip().splitlines()[-1]


class TestJax:
    PROBE = """
import json, jax, jax.numpy as jnp
(jnp.ones((256, 256)) @ jnp.ones((256, 256))).block_until_ready()
print(json.dumps({"pool": jax_pool(), "devices": [d.platform for d in jax.devices()],
                  "affinity": len(os.sched_getaffinity(0)),
                  "env": {k: v for k, v in os.environ.items() if k.startswith(("JAX_", "XLA_"))}}))
"""

    def test_cpu_threads_size_jax_s_pool_without_pinning_the_process(self) -> None:
        default = run_json(self.PROBE, {})
        sized = run_json(self.PROBE, {"CPU_THREADS": "1"})
        assert default["pool"] == default["affinity"] >= 2
        assert sized["pool"] == 1 and sized["affinity"] == default["affinity"]
        assert "configured JAX: CPU client pool 1 threads (CPU_THREADS=1 (env))" in sized["stderr"]

    def test_virtual_split_is_jax_s_cpu_device_count(self) -> None:
        found = run_json(self.PROBE, {"VIRTUAL_SPLIT": "3"})
        assert found["devices"] == ["cpu"] * 3 and found["env"] == {"JAX_NUM_CPU_DEVICES": "3"}

    def test_nothing_set_gives_jax_nothing(self) -> None:
        found = run_json(self.PROBE, {})
        assert found["devices"] == ["cpu"] and found["env"] == {} and found["stderr"] == ""

    def test_gpu_settings_on_this_cpu_host_warn_by_name(self) -> None:
        found = run_json(self.PROBE, {"MEMORY_LIMIT_MB": "4096", "MEMORY_GROWTH": "true"})
        assert found["env"] == {}
        assert (
            "tfboot: warning: JAX: no GPU found, running on CPU; not applied: "
            "MEMORY_LIMIT_MB=4096 (env), MEMORY_GROWTH=true (env)" in found["stderr"]
        )

    @pytest.mark.parametrize(
        ("env", "message"),
        [
            (
                {"SOFT_PLACEMENT": "true"},
                "JAX: SOFT_PLACEMENT='true' cannot be applied: JAX places",
            ),
            (
                {
                    "DISTRIBUTED": "k8s",
                    "DIST_TASKS": "worker=2,ps=1",
                    "DIST_TASK_INDEX": "0",
                    "DIST_HOSTS": "worker=w-{i}.t;ps=p-{i}.t",
                },
                "JAX: DIST_TASKS='worker=2,ps=1' cannot be met: JAX numbers its processes",
            ),
            ({"XLA_JIT": "off"}, "JAX: XLA_JIT='off' cannot be applied: JAX always compiles"),
            ({"CPU_THREADS": "lots"}, "JAX: CPU_THREADS='lots' is invalid: expected auto, host"),
        ],
    )
    def test_refusals_fail_import_jax(self, env: dict[str, str], message: str) -> None:
        assert failing("import jax", env).startswith(f"tfboot.ConfigError: {message}")

    def test_warn_mode_keeps_jax_s_defaults(self) -> None:
        found = run_json(self.PROBE, {"VIRTUAL_SPLIT": "x", "TFBOOT_ON_ERROR": "warn"})
        assert found["devices"] == ["cpu"]
        assert (
            "tfboot: warning: invalid configuration, JAX keeps its defaults: JAX: VIRTUAL_SPLIT"
            in (found["stderr"])
        )

    def test_the_kill_switch(self) -> None:
        found = run_json(self.PROBE, {"VIRTUAL_SPLIT": "3", "TFBOOT_DISABLE": "1"})
        assert found["devices"] == ["cpu"] and found["stderr"] == ""


class TestTorch:
    PROBE = """
import json, torch
print(json.dumps({"intra": torch.get_num_threads(), "inter": torch.get_num_interop_threads(),
                  "cuda": torch.cuda.is_available()}))
"""

    def test_cpu_threads_set_both_pools(self) -> None:
        found = run_json(self.PROBE, {"CPU_THREADS": "1"})
        assert (found["intra"], found["inter"]) == (1, 1)
        assert "configured PyTorch: intra-op threads 1" in found["stderr"]

    def test_omp_num_threads_keeps_the_intra_op_pool(self) -> None:
        found = run_json(self.PROBE, {"CPU_THREADS": "1", "OMP_NUM_THREADS": "2"})
        assert (found["intra"], found["inter"]) == (2, 1)

    def test_an_omp_num_threads_pytorch_ignores_does_not_keep_the_pool(self) -> None:
        """``1abc`` is not a count to OpenMP or MKL: PyTorch ignores it, so tfboot applies
        CPU_THREADS instead of leaving the pool to it."""
        found = run_json(self.PROBE, {"CPU_THREADS": "1", "OMP_NUM_THREADS": "1abc"})
        assert (found["intra"], found["inter"]) == (1, 1)
        assert "configured PyTorch: intra-op threads 1" in found["stderr"]
        ignored = run_json(self.PROBE, {"OMP_NUM_THREADS": "1abc"})
        assert ignored["intra"] == run_json(self.PROBE, {})["intra"]  # PyTorch's own reading

    def test_nothing_set_keeps_pytorch_s_defaults(self) -> None:
        default = run_json(self.PROBE, {})
        assert default["stderr"] == "" and default["intra"] >= 1

    @pytest.mark.parametrize(
        ("env", "message"),
        [
            (
                {"VIRTUAL_SPLIT": "2"},
                "PyTorch: VIRTUAL_SPLIT='2' cannot be applied: PyTorch has no",
            ),
            ({"MEMORY_GROWTH": "false"}, "PyTorch: MEMORY_GROWTH='false' cannot be applied"),
            ({"XLA_JIT": "true"}, "PyTorch: XLA_JIT='true' cannot be applied"),
            ({"LOG_DEVICE_PLACEMENT": "1"}, "PyTorch: LOG_DEVICE_PLACEMENT='1' cannot be applied"),
            (
                {"DISTRIBUTED": "slurm", "DIST_TERM_GRACE": "3"},
                "PyTorch: DIST_TERM_GRACE='3' cannot be applied: PyTorch ends on SIGTERM itself",
            ),
        ],
    )
    def test_refusals_fail_import_torch_before_its_code_runs(
        self, env: dict[str, str], message: str
    ) -> None:
        last = failing("import torch", env)
        assert last.startswith(f"tfboot.ConfigError: {message}")

    def test_a_program_that_imports_no_framework_is_never_affected(self) -> None:
        done = run_python(
            "import numpy; print('ok')", {"MEMORY_LIMIT_MB": "abc", "VIRTUAL_SPLIT": "2"}
        )
        assert done.returncode == 0 and done.stdout.strip() == "ok" and done.stderr == ""


class TestKeras:
    FIT = """
import json, os, sys, numpy as np, keras
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
history = model.fit(np.ones((32, 8)), np.ones((32, 1)), epochs=1, batch_size=8, verbose=0)
backend = keras.backend.backend()
found = {"backend": backend, "policy": keras.mixed_precision.global_policy().name,
         "compute": model.layers[0].compute_dtype, "loss": float(history.history["loss"][0]),
         "modules": sorted(m for m in ("tensorflow", "jax", "torch") if m in sys.modules)}
if backend == "jax":
    found["threads"] = jax_pool()
elif backend == "torch":
    import torch
    found["threads"] = torch.get_num_threads()
else:
    import tensorflow as tf
    found["threads"] = tf.config.threading.get_intra_op_parallelism_threads()
print(json.dumps(found))
"""

    @pytest.mark.parametrize(
        ("backend", "version"),
        [("jax", "newest"), ("torch", "newest"), ("tensorflow", "newest"),
         ("jax", NEWER_PYTHON)],
    )  # fmt: skip
    def test_fit_on_each_backend_with_the_policy_and_threads(
        self, backend: str, version: str
    ) -> None:
        """Also on the newest JAX and its Python (no TensorFlow nor PyTorch there)."""
        env = {"KERAS_BACKEND": backend, "MIXED_PRECISION": "mixed_bfloat16", "CPU_THREADS": "1"}
        found = run_json(self.FIT, env, version)
        assert found["backend"] == backend and found["policy"] == "mixed_bfloat16"
        assert found["compute"] == "bfloat16" and found["threads"] == 1
        assert found["loss"] == found["loss"]  # trained, not NaN
        name = {"jax": "JAX", "torch": "PyTorch", "tensorflow": "TensorFlow"}[backend]
        assert f"tfboot: configured {name}: " in found["stderr"]

    def test_a_bad_value_fails_the_backend_that_would_apply_it_not_tensorflow(self) -> None:
        code = (
            "import sys\ntry:\n    import keras\nexcept Exception as e:\n"
            "    print(type(e).__name__, e, 'tensorflow' in sys.modules)"
        )
        done = run_python(code, {"KERAS_BACKEND": "jax", "MEMORY_LIMIT_MB": "abc"})
        assert done.stdout.startswith("ConfigError JAX: MEMORY_LIMIT_MB='abc' is invalid")
        assert done.stdout.strip().endswith("False")

    def test_keras_fails_only_on_its_own_variable(self) -> None:
        last = failing("import keras", {"KERAS_BACKEND": "jax", "MIXED_PRECISION": "fp8"})
        assert last.startswith("tfboot.ConfigError: Keras: MIXED_PRECISION='fp8' is invalid")


class TestTwoFrameworks:
    LOADER = """
import json, keras, tensorflow as tf
print(json.dumps({"visible": [d.device_type for d in tf.config.get_visible_devices()]}))
"""

    def test_tensorflow_beside_jax_is_the_data_loader_and_each_line_names_its_framework(
        self,
    ) -> None:
        found = run_json(self.LOADER, {"KERAS_BACKEND": "jax", "CPU_THREADS": "1"})
        lines = [x for x in found["stderr"].splitlines() if x.startswith("tfboot: configured")]
        assert lines[0].startswith("tfboot: configured JAX: CPU client pool 1 threads")
        said = configured(found["stderr"], "TensorFlow")
        assert said.startswith(
            "tfboot: configured TensorFlow: no GPU: JAX runs the model; "
            "TensorFlow is its data loader"
        ), said
        assert found["visible"] == ["CPU"]

    def test_loader_gpu_gives_tensorflow_its_gpus_back(self) -> None:
        found = run_json(self.LOADER, {"KERAS_BACKEND": "jax", "LOADER_GPU": "true"})
        assert "data loader" not in found["stderr"]

    def test_keras_json_names_the_backend_as_keras_reads_it(self, tmp_path) -> None:
        (tmp_path / "keras.json").write_text(json.dumps({"backend": "torch"}))
        found = run_json(self.LOADER, {"KERAS_HOME": str(tmp_path), "CPU_THREADS": "1"})
        assert "TensorFlow: no GPU: PyTorch runs the model" in found["stderr"]

    def test_jax_that_came_along_with_tensorflow_is_not_refused_nor_logged(self) -> None:
        code = "import sys, tensorflow; print('jax' in sys.modules)"
        done = run_python(
            code, {"SOFT_PLACEMENT": "true", "DISTRIBUTED": "off", "CPU_THREADS": "1"}
        )
        assert done.returncode == 0 and done.stdout.strip() == "True", done.stderr
        assert "configured JAX" not in done.stderr
        debug = run_python(code, {"SOFT_PLACEMENT": "true", "TFBOOT_LOG": "debug"})
        came_along = "configured JAX (came along with TensorFlow's import): "
        assert came_along + "SOFT_PLACEMENT=true (env) not applied" in debug.stderr
