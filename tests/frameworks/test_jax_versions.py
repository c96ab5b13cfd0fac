"""JAX at the versions where what it reads moved, each in an environment of its own (built
by scripts/test.sh from requirements/jax-*.txt), the test environment's (``newest`` here),
and the newest JAX on the newer Python it needs (``NEWER_PYTHON``, with Keras 3):
every claim is read back from JAX itself, and every variable tfboot writes is
one that version reads.

- ``VIRTUAL_SPLIT`` without a GPU: ``JAX_NUM_CPU_DEVICES`` is read only from JAX 0.5.1; before,
  the count goes through ``--xla_force_host_platform_device_count`` in ``XLA_FLAGS``. Read
  back: ``jax.devices()``.
- ``MEMORY_LIMIT_MB``: ``XLA_CLIENT_MEM_FRACTION`` is read only from jaxlib 0.4.32; 0.4.30
  and 0.4.31 read ``XLA_PYTHON_CLIENT_MEM_FRACTION``, and from 0.4.32 both set raise. No GPU
  here, so the plan is made for an 80 GiB GPU and its variables handed to that version's
  own reader, ``jaxlib.xla_client.generate_pjrt_gpu_plugin_options`` (what JAX's CUDA plugin
  calls at the GPU's start).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from support import (
    JAX_POOL,
    NEWER_PYTHON,
    free_ports,
    last_json,
    matrix_python,
    scenario_env,
    unavailable,
)
from support import (
    configured as support_configured,
)
from tfboot import resolve
from tfboot.adapters.jax import plan_jax
from tfboot.budget import make_budget
from tfboot.node.versions import installed, parse

pytestmark = pytest.mark.tf  # real frameworks in subprocesses
GIB = 1 << 30
MATRIX = ("0.4.30", "0.4.38", "0.5.0", NEWER_PYTHON)


def python(version: str) -> str:
    return matrix_python("jax", version)


def run(version: str, code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([python(version), "-c", code], env=scenario_env(env), text=True,
                          capture_output=True, timeout=300, cwd=Path("/"))  # fmt: skip


def version_of(version: str, package: str) -> tuple[int, ...]:
    if version == "newest":
        found = installed(package)
        assert found is not None
        return found
    done = run(version, f"from tfboot.node.versions import installed\n"
                        f"print(installed({package!r}))", {})  # fmt: skip
    assert done.returncode == 0, done.stderr
    return tuple(json.loads(done.stdout.replace("(", "[").replace(")", "]").replace(",]", "]")))


@pytest.mark.parametrize("version", [*MATRIX, "newest"])
def test_a_cpu_split_reaches_jax_through_what_it_reads(version: str) -> None:
    done = run(version, "import jax; print(len(jax.devices()), jax.__version__)",
               {"VIRTUAL_SPLIT": "3"})  # fmt: skip
    assert done.returncode == 0, done.stderr
    count, reported = done.stdout.split()
    assert count == "3", done.stderr
    configured = support_configured(done.stderr, "JAX")
    carried = "JAX_NUM_CPU_DEVICES" if parse(reported) >= (0, 5, 1) else "XLA_FLAGS"
    assert f"3 CPU devices via {carried}" in configured, configured


@pytest.mark.parametrize("version", [*MATRIX, "newest"])
def test_a_user_s_xla_flags_are_kept_beside_the_count(version: str) -> None:
    code = "import jax, os; print(len(jax.devices()), os.environ['XLA_FLAGS'])"
    done = run(version, code, {"VIRTUAL_SPLIT": "2", "XLA_FLAGS": "--xla_dump_to=/tmp/none"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[:2] == ["2", "--xla_dump_to=/tmp/none"]


READ_BACK = """
import json, os
from jaxlib import xla_client
os.environ.update(json.loads({environ!r}))
try:
    print(json.dumps({{"options": {{k: str(v) for k, v in
                                    xla_client.generate_pjrt_gpu_plugin_options().items()}}}}))
except ValueError as exc:
    print(json.dumps({{"error": str(exc)}}))
"""


@pytest.mark.parametrize(
    "user", [None, "XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_CLIENT_MEM_FRACTION"]
)
@pytest.mark.parametrize("version", [*MATRIX, "newest"])
def test_the_memory_cap_is_the_fraction_that_jaxlib_reads(version: str, user: str | None) -> None:
    jaxlib = version_of(version, "jaxlib")
    env = {"MEMORY_LIMIT_MB": "8192"}
    fraction = "0.100000"  # 8 GiB of 80 GiB
    if user is not None:
        env[user] = fraction  # the same meaning: kept, and tfboot writes no other name
    budget = make_budget(resolve(env), env)
    plan = plan_jax(budget, (80 * GIB,), jaxlib=jaxlib)
    reads_new = jaxlib >= (0, 4, 32)
    expected = "XLA_CLIENT_MEM_FRACTION" if reads_new else "XLA_PYTHON_CLIENT_MEM_FRACTION"
    if user is None or (user == "XLA_CLIENT_MEM_FRACTION" and not reads_new):
        # Nothing set, or only a name this jaxlib ignores: tfboot writes the one it reads.
        assert plan.environ == {expected: fraction}
    else:
        assert plan.environ == {}  # the user's name is read: kept, no second name written
        assert f"{user}={fraction} (yours)" in plan.decisions[0]
    environ = {**{k: v for k, v in env.items() if k != "MEMORY_LIMIT_MB"}, **plan.environ}
    done = run(version, READ_BACK.format(environ=json.dumps(environ)), {})
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found == {"options": found.get("options")}, found  # never jaxlib's ValueError
    assert float(found["options"]["memory_fraction"]) == pytest.approx(0.1)


def test_a_jax_older_than_supported_is_left_alone_and_said_once() -> None:
    """JAX 0.4.26, below the window's 0.4.30: nothing written, one warning naming the
    version and the window, and the import works as without tfboot."""
    found = python("0.4.26")
    code = "import jax, os; print(len(jax.devices()), os.environ.get('JAX_NUM_CPU_DEVICES'))"
    done = subprocess.run([found, "-c", code], env=scenario_env({"VIRTUAL_SPLIT": "2",
                          "CPU_THREADS": "1"}), text=True, capture_output=True, timeout=300,
                          cwd=Path("/"))  # fmt: skip
    assert done.returncode == 0 and done.stdout.split() == ["1", "None"], done.stderr
    lines = [x for x in done.stderr.splitlines() if x.startswith("tfboot")]
    assert lines == ["tfboot: warning: tfboot configures nothing in JAX 0.4.26 (jax): it "
                     "supports 0.4.30 and newer; its own defaults hold"]  # fmt: skip


@pytest.mark.parametrize("version", ["0.4.30", "newest", NEWER_PYTHON])
def test_visible_gpus_reach_jax_s_own_flag(version: str, tmp_path: Path) -> None:
    """No GPU here: two GPUs come from the NVML stand-in (``fake_nvml``, a fake, named as
    such) and a stand-in CUDA plugin package (a fake: an empty ``jax_plugins.xla_cuda12``),
    so tfboot plans for them; what JAX then holds is read back from JAX itself."""
    import shutil

    if shutil.which("gcc") is None:
        unavailable("gcc is needed to build the NVML stand-in")
    library = tmp_path / "libnvidia-ml-fake.so"
    source = Path(__file__).parent / "fake_nvml" / "nvml.c"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    plugin = tmp_path / "plugins" / "jax_plugins" / "xla_cuda12"
    plugin.mkdir(parents=True)
    (plugin / "__init__.py").write_text("def initialize():\n    pass\n")
    env = {
        "VISIBLE_GPU": "1",
        "TFBOOT_NVML_LIBRARY": str(library),
        "FAKE_NVML_MIB": "81559:0,81559:0",
        "PYTHONPATH": str(tmp_path / "plugins"),
    }
    code = (
        "import jax; from jax._src import xla_bridge; print(xla_bridge.CUDA_VISIBLE_DEVICES.value)"
    )
    done = run(version, code, env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1"], done.stderr
    assert "GPUs [1] visible via jax.config jax_cuda_visible_devices" in done.stderr


CLUSTER = """
import json, warnings
warnings.simplefilter("error")  # JAX's warning about a missing kubernetes package fails it
import jax
jax.distributed.initialize()
print(json.dumps([jax.process_count(), jax.process_index(), jax.device_count()]))
"""


@pytest.mark.parametrize("version", [*MATRIX, "newest"])
def test_initialize_with_no_arguments_forms_the_cluster_at_every_version(version: str) -> None:
    """The seam ``jax.distributed.initialize``: the wrapper fills only what that version's
    signature takes, and a one-task cluster forms, with Kubernetes' variables present and
    no ``kubernetes`` package (where JAX has ``deactivate``, its detection is off)."""
    port = free_ports(1)[0]
    env = {"DISTRIBUTED": "k8s", "DIST_TASKS": "1", "DIST_HOSTS": f"worker=127.0.0.1:{port}",
           "JOB_COMPLETION_INDEX": "0", "KUBERNETES_SERVICE_HOST": "10.0.0.1",
           "TFBOOT_LOG": "debug"}  # fmt: skip
    done = run(version, CLUSTER, env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1]) == [1, 0, 1]
    filled = "jax.distributed.initialize fills unset coordinator_address, num_processes"
    assert filled in done.stderr
    jax = version_of(version, "jax")  # the heartbeat from JAX 0.7, "deactivate" from 0.4.36
    assert ("heartbeat_timeout_seconds" in done.stderr) is (jax >= (0, 7))
    assert ("cluster_detection_method" in done.stderr) is (jax >= (0, 4, 36))


POOL = (
    JAX_POOL
    + """
import json, sys, threading, jax, jax.numpy as jnp
from tfboot.executor import governor
(jnp.ones((256, 256)) @ jnp.ones((256, 256))).block_until_ready()
print(json.dumps({"python": sys.version_info[:2], "jax": jax.__version__, "pool": jax_pool(),
                  "affinity": len(os.sched_getaffinity(0)), "governor": governor.current() is
                  not None and "tfboot-memory" in [t.name for t in threading.enumerate()]}))
"""
)


# The pool's threads are named from JAX 0.8.3 only: the newest two are counted.
@pytest.mark.parametrize("version", ["newest", NEWER_PYTHON])
def test_cpu_threads_and_the_host_memory_budget_reach_the_newest_jax(version: str) -> None:
    """``CPU_THREADS=1``: one thread in JAX's CPU client pool (all of the CPUs without it);
    ``HOST_MEMORY_LIMIT_MB``: the memory governor runs against that figure."""
    default = run(version, POOL, {})
    assert default.returncode == 0, default.stderr
    found = last_json(default.stdout)
    assert found["pool"] == found["affinity"], found
    if version == NEWER_PYTHON:  # the newer Python and JAX it stands for
        assert found["python"] >= [3, 12] and parse(found["jax"]) >= (0, 11), found
    done = run(version, POOL, {"CPU_THREADS": "1", "HOST_MEMORY_LIMIT_MB": "4096"})
    assert done.returncode == 0, done.stderr
    found = last_json(done.stdout)
    assert found["pool"] == 1 and found["governor"], (found, done.stderr)
    configured = support_configured(done.stderr, "JAX")
    assert "CPU client pool 1 threads (CPU_THREADS=1 (env))" in configured
    assert "host memory limit 4096 MiB (HOST_MEMORY_LIMIT_MB=4096 (env))" in configured
