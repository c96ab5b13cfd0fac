"""The seams: tfboot reads what each framework reads, as it reads it, and knows what it
wrote itself. One regression test per defect an outside probe found (each failed on the
previous release); real child processes where a child is the point.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from support import REPO, run_python, scenario_env, tf_plan, unavailable
from tfboot import ConfigError, resolve
from tfboot.adapters import Call
from tfboot.adapters.jax import plan_jax
from tfboot.adapters.torch import plan_torch
from tfboot.budget import NO_LIMIT, make_budget
from tfboot.cluster.engines import identify
from tfboot.manifests import Report, check_text
from tfboot.node.cgroup import memory_limit
from tfboot.node.cpu import CpuBudget
from tfboot.node.hostmem import MemoryBudget
from tfboot.node.kerasconfig import keras_backend
from tfboot.node.xla import plan_toolchain
from tfboot.node.xlaflags import tokens
from tfboot.provenance import RECORD, user_value, with_write

TREES = Path(__file__).parent / "testdata" / "cgroup"
CPU = CpuBudget(affinity=8, quota=None, quota_source="")
GIB = 1 << 30


def jax_env_plan(env: dict[str, str], gpus: int = 1):  # type: ignore[no-untyped-def]
    budget = make_budget(resolve(env, "jax"), env, cpu=CPU, memory=NO_LIMIT)
    return plan_jax(budget, (80 * GIB,) * gpus)


# 1. Keras's config, read as Keras reads it.


def keras_json(folder: Path, backend: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "keras.json").write_text(json.dumps({"backend": backend}))


def test_keras_home_with_a_tilde_is_expanded_as_keras_does(tmp_path: Path) -> None:
    keras_json(tmp_path / "kh", "jax")
    assert keras_backend({"HOME": str(tmp_path), "KERAS_HOME": "~/kh"}, {}) == "jax"


def test_keras_itself_decides_once_it_has(tmp_path: Path) -> None:
    class Config:
        _BACKEND = "torch"

    assert keras_backend({"KERAS_BACKEND": "jax"}, {"keras.src.backend.config": Config}) == "torch"


def _as_nobody() -> None:
    os.setgid(65534)
    os.setuid(65534)


@pytest.mark.slow
def test_unwritable_home_tfboot_and_keras_agree_on_the_backend(tmp_path: Path) -> None:
    """With a read-only home (a read-only mount, as readOnlyRootFilesystem gives) naming JAX
    in ~/.keras: Keras falls back to /tmp/.keras, and TensorFlow's role follows the backend
    Keras really took."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        unavailable("a read-only mount in a mount namespace needs unshare and root")
    home = tmp_path / "home"
    keras_json(home / ".keras", "jax")
    code = (
        "import os, json\n"
        "from tfboot.node.kerasconfig import keras_backend\n"
        "assert not os.access(os.environ['HOME'], os.W_OK)\n"
        "mirror = keras_backend(os.environ, {})\n"
        "import keras, tfboot\n"
        "result = tfboot.last_result()\n"
        "print(json.dumps({'mirror': mirror, 'keras': keras.config.backend(),\n"
        "  'dir': keras.src.backend.config.keras_home(),\n"
        "  'decisions': result.plan.decisions if result and result.plan else []}))\n"
    )
    python = REPO / ".venv" / "bin" / "python"
    script = (f"mount --bind {home} {home} && mount -o remount,bind,ro {home} && "
              f"exec {python} -c \"$0\"")  # fmt: skip
    result = subprocess.run(
        ["unshare", "-m", "sh", "-c", script, code],
        env={k: v for k, v in scenario_env({"HOME": str(home)}).items()
             if k not in ("KERAS_BACKEND", "KERAS_HOME")},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["mirror"] == seen["keras"] and seen["dir"] == "/tmp/.keras", seen
    loader = any("data loader" in d for d in seen["decisions"])
    assert loader == (seen["keras"] in ("jax", "torch")), seen


# 2. Provenance: tfboot's own writes are never the user's.


def test_a_value_tfboot_wrote_is_not_the_users_until_changed() -> None:
    env = {"JAX_NUM_CPU_DEVICES": "2"}
    env[RECORD] = with_write(env, "JAX_NUM_CPU_DEVICES", "2", "tfboot", None)
    assert user_value(env, "JAX_NUM_CPU_DEVICES") is None
    assert user_value({**env, "JAX_NUM_CPU_DEVICES": "3"}, "JAX_NUM_CPU_DEVICES") == "3"


def test_an_inherited_jax_variable_is_no_contradiction() -> None:
    parent = {"JAX_NUM_CPU_DEVICES": "2"}
    parent[RECORD] = with_write(parent, "JAX_NUM_CPU_DEVICES", "2", "tfboot", None)
    plan = jax_env_plan({**parent, "VIRTUAL_SPLIT": "4"}, gpus=0)
    assert plan.environ["JAX_NUM_CPU_DEVICES"] == "4"


@pytest.mark.slow
def test_a_child_with_its_own_split_gets_its_own_jax_devices() -> None:
    code = (
        "import os, subprocess, sys\n"
        "import jax\n"
        "assert len(jax.devices()) == 2\n"
        "child = 'import jax; print(len(jax.devices()), flush=True)'\n"
        "env = {**os.environ, 'VIRTUAL_SPLIT': '4'}\n"
        "out = subprocess.run([sys.executable, '-c', child], env=env, capture_output=True,\n"
        "                     text=True)\n"
        "print(out.returncode, out.stdout.strip(), repr(out.stderr[-500:]))\n"
    )
    result = run_python(code, {"VIRTUAL_SPLIT": "2"})
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1].startswith("0 4"), result.stdout


SPAWNED = """
import multiprocessing as mp, os, subprocess, sys
import tensorflow


def pinned(queue):
    import tensorflow  # noqa: F401 - a spawned child imports it afresh
    queue.put(os.environ["TF_GPU_HOST_MEM_LIMIT_IN_MB"])


if __name__ == "__main__":
    print("parent", os.environ["TF_GPU_HOST_MEM_LIMIT_IN_MB"], flush=True)
    os.environ["HOST_MEMORY_LIMIT_MB"] = "800"  # the child's own setting
    queue = mp.get_context("spawn").Queue()
    child = mp.get_context("spawn").Process(target=pinned, args=(queue,))
    child.start()
    print("spawned", queue.get(timeout=120), flush=True)
    child.join()
    code = "import os, tensorflow; print(os.environ['TF_GPU_HOST_MEM_LIMIT_IN_MB'])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    print("subprocess", out.stdout.strip(), flush=True)
    print(out.stderr, file=sys.stderr)
"""


@pytest.mark.slow
@pytest.mark.tf
def test_a_child_with_less_host_memory_gets_its_own_pinned_limit(tmp_path: Path) -> None:
    """A parent's pinned limit, inherited, is not the user's: a spawned child and a
    subprocess with their own HOST_MEMORY_LIMIT_MB get their own."""
    script = tmp_path / "spawned.py"
    script.write_text(SPAWNED)
    result = run_python(script, {"HOST_MEMORY_LIMIT_MB": "4000", "CPU_THREADS": "1"})
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.split("\n")
    assert {"parent 1000", "spawned 200", "subprocess 200"} <= set(lines), result.stdout
    assert "left to TF_GPU_HOST_MEM_LIMIT_IN_MB" not in result.stderr


@pytest.mark.slow
def test_keras_on_jax_sets_tensorflows_growth_and_that_is_no_contradiction() -> None:
    code = "import keras, tensorflow; print('ok')"
    result = run_python(code, {"KERAS_BACKEND": "jax", "MEMORY_GROWTH": "false"})
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr[-2000:]
    assert "contradicts TF_FORCE_GPU_ALLOW_GROWTH" not in result.stderr


# 3. Second-guessing the framework.


@pytest.mark.parametrize(
    ("growth", "value"), [("true", "0"), ("true", "False"), ("false", "1"), ("false", "True")]
)
def test_jax_preallocate_spellings_jax_reads_agree(growth: str, value: str) -> None:
    plan = jax_env_plan({"MEMORY_GROWTH": growth, "XLA_PYTHON_CLIENT_PREALLOCATE": value})
    assert "XLA_PYTHON_CLIENT_PREALLOCATE" not in plan.environ  # the user's spelling is kept
    assert any(f"XLA_PYTHON_CLIENT_PREALLOCATE={value}" in d for d in plan.decisions)


def test_jax_preallocate_that_means_the_opposite_is_refused() -> None:
    with pytest.raises(ConfigError, match="contradicts XLA_PYTHON_CLIENT_PREALLOCATE='1'"):
        jax_env_plan({"MEMORY_GROWTH": "true", "XLA_PYTHON_CLIENT_PREALLOCATE": "1"})


def test_mkl_num_threads_is_pytorchs_own_setting() -> None:
    env = {"CPU_THREADS": "2", "MKL_NUM_THREADS": "3"}
    budget = make_budget(resolve(env), env, cpu=CPU, memory=NO_LIMIT)
    plan = plan_torch(budget, [])
    names = [c.name for c in plan.calls if isinstance(c, Call)]
    assert "set_num_threads" not in names and "set_num_interop_threads" in names
    assert "intra-op threads left to MKL_NUM_THREADS=3 (explicit)" in plan.decisions


def test_xla_host_device_count_against_virtual_split_is_refused() -> None:
    env = {"VIRTUAL_SPLIT": "2", "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    with pytest.raises(ConfigError, match="xla_force_host_platform_device_count=4 in XLA_FLAGS"):
        jax_env_plan(env, gpus=0)


def test_a_toolchain_path_with_a_space_is_quoted_as_xla_reads_it(tmp_path: Path) -> None:
    found = str(tmp_path / "site packages" / "nvidia" / "cuda_nvcc")
    toolchain = plan_toolchain({"XLA_FLAGS": "--xla_dump_to=/tmp/d"}, found, "/nonexistent")
    assert toolchain.xla_flags is not None
    assert dict(tokens(toolchain.xla_flags))["--xla_gpu_cuda_data_dir"] == found


@pytest.mark.parametrize("on_error", ["raise", "warn", ""])
@pytest.mark.parametrize(
    ("module", "env"),
    [("torch", {"CPU_THREADS": "1"}), ("tf_keras", {"MIXED_PRECISION": "mixed_float16"})],
)
def test_a_stub_module_is_left_alone(
    tmp_path: Path, module: str, env: dict[str, str], on_error: str
) -> None:
    (tmp_path / f"{module}.py").write_text("VALUE = 1\n")
    settings = {**env, "TFBOOT_ON_ERROR": on_error, "TFBOOT_LOG": "debug",
                "PYTHONPATH": str(tmp_path)}  # fmt: skip
    result = run_python(f"import {module}; print({module}.VALUE)", settings, cwd=tmp_path)
    assert result.returncode == 0 and result.stdout.strip() == "1", result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.startswith("tfboot:")]
    assert len(lines) == 1 and "left alone" in lines[0], lines


# 5. Untrusted YAML in `tfboot manifests`.


def aliased_bomb() -> str:
    text = "c: &c {name: c, image: i}\nl: &l [" + ", ".join(["*c"] * 1000) + "]\n"
    text += ("d: &d {apiVersion: apps/v1, kind: Deployment, metadata: {name: x},"
             " spec: {template: {spec: {containers: *l}}}}\n")  # fmt: skip
    return text + "kind: List\nitems: [" + ", ".join(["*d"] * 1000) + "]\n"


def test_excessive_aliasing_is_refused_with_a_finding() -> None:
    code = (
        "import sys; sys.path.insert(0, 'tests')\n"
        "from test_seams import aliased_bomb\n"
        "from tfboot.manifests import Report, check_text\n"
        "report = Report(); check_text('bomb.yaml', aliased_bomb(), report)\n"
        "print([(f.rule, f.message) for f in report.findings])\n"
    )
    result = run_python(code, cwd=REPO, timeout=20)  # the bound: never the 30 s it took
    assert result.returncode == 0, result.stderr[-2000:]
    assert "'unreadable'" in result.stdout and "excessive aliasing" in result.stdout


def test_a_duplicate_key_is_a_finding() -> None:
    report = Report()
    check_text("dup.yaml", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n  name: b\n", report)
    (found,) = [f for f in report.findings if f.rule == "duplicate-key"]
    assert "line 5" in found.message and "'name'" in found.message


def test_an_unknown_kind_with_a_pod_template_is_checked() -> None:
    text = (
        "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata: {name: pt}\nspec:\n"
        "  pytorchReplicaSpecs:\n    Worker:\n      template:\n        spec:\n"
        "          containers:\n          - name: pytorch\n            image: r/i:1\n"
        "            env: [{name: MEMORY_LIMIT_MB, value: abc}]\n"
    )
    report = Report()
    check_text("pt.yaml", text, report)
    (found,) = [f for f in report.findings if f.rule == "config-invalid"]
    assert found.container == "pytorchReplicaSpecs.Worker/pytorch"


# 6. The host's memory and messages.


def test_memory_high_below_memory_max_is_the_limit() -> None:
    found = memory_limit(str(TREES / "v2-memory-high"))
    assert found is not None and found.bytes == 600 << 20
    assert found.source.endswith("memory.high")


def test_an_explicit_host_memory_above_the_containers_warns() -> None:
    memory = MemoryBudget(600, "/sys/fs/cgroup/memory.max")
    plan = tf_plan({"HOST_MEMORY_LIMIT_MB": "65536"}, 0, CPU, memory)
    assert any("more than the container's memory limit of 600 MiB" in w for w in plan.warnings)


def test_a_one_mib_limit_is_not_called_its_own_quarter() -> None:
    plan = tf_plan({"HOST_MEMORY_LIMIT_MB": "1"}, 0, CPU)
    assert not any("a quarter of HOST_MEMORY_LIMIT_MB=1 (env))" in d for d in plan.decisions)
    assert any("1 MiB, the least" in d for d in plan.decisions)


def test_a_plane_size_of_zero_is_named_as_invalid_not_missing() -> None:
    env = {"DISTRIBUTED": "slurm", "SLURM_PROCID": "0", "SLURM_STEP_NODELIST": "n[1-2]",
           "SLURM_STEP_TASKS_PER_NODE": "1(x2)", "SLURM_DISTRIBUTION": "plane",
           "SLURM_DIST_PLANESIZE": "0", "SLURMD_NODENAME": "n1", "SLURM_LOCALID": "0"}  # fmt: skip
    settings = resolve(env)
    assert settings.cluster is not None
    with pytest.raises(ConfigError) as info:
        identify("slurm", settings.cluster, env)
    assert "SLURM_DIST_PLANESIZE='0' is invalid" in str(info.value)
    assert "without SLURM_DIST_PLANESIZE" not in str(info.value)
