"""Shared helpers for tests: run a fresh Python process with a controlled environment."""

from __future__ import annotations

import calendar
import contextlib
import json
import os
import random
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

# Every variable of the env contract, plus the ones that change TF's behaviour.
# A scenario starts from the runner's environment minus all of these.
CONTRACT_PREFIXES = ("TFBOOT_", "DIST_", "MALLOC_")
CONTRACT_VARS = frozenset(
    {
        "VISIBLE_GPU",
        "MEMORY_LIMIT_MB",
        "VIRTUAL_SPLIT",
        "MEMORY_GROWTH",
        "CPU_THREADS",
        "SOFT_PLACEMENT",
        "LOG_DEVICE_PLACEMENT",
        "XLA_JIT",
        "MIXED_PRECISION",
        "REQUIRE_GPU",
        "DISTRIBUTED",
        "TF_CONFIG",
        "TF_NUM_INTRAOP_THREADS",
        "TF_NUM_INTEROP_THREADS",
        "TF_FORCE_GPU_ALLOW_GROWTH",
        "TF_GPU_ALLOCATOR",
        "TF_PLUGGABLE_DEVICE_LIBRARY_PATH",
        "CUDA_DEVICE_MEMORY_LIMIT",
        "ALIYUN_COM_GPU_MEM_CONTAINER",
        "ALIYUN_COM_GPU_MEM_DEV",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
        "CUDA_MPS_PIPE_DIRECTORY",
        "NVIDIA_GPU_MEMORY_LIMITS",
        "GPU_PORTION",
        "MEMORY_HEADROOM_MB",
        "HOST_MEMORY_RELEASE",
        "GLIBC_TUNABLES",
        "LD_PRELOAD",
        "PYTHONPATH",
        "LOADER_GPU",
        "KERAS_BACKEND",
        "KERAS_HOME",
        "JAX_PLATFORMS",
        "JAX_NUM_CPU_DEVICES",
        "JAX_CUDA_VISIBLE_DEVICES",
        "XLA_CLIENT_MEM_FRACTION",
        "XLA_PYTHON_CLIENT_MEM_FRACTION",
        "XLA_PYTHON_CLIENT_PREALLOCATE",
        "XLA_PYTHON_CLIENT_ALLOCATOR",
        "OMP_NUM_THREADS",
    }
)


def scenario_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The current environment without any contract variable, plus ``extra``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in CONTRACT_VARS
        and not k.startswith(CONTRACT_PREFIXES)
        and not k.startswith("CUDA_DEVICE_MEMORY_LIMIT_")
    }
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env.update(extra or {})
    return env


def run_python(
    code: str | Path,
    env: Mapping[str, str] | None = None,
    *,
    python: str | os.PathLike[str] = sys.executable,
    args: tuple[str, ...] = (),
    cwd: str | os.PathLike[str] | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` (a string, or a script's path) in a fresh interpreter."""
    source = [str(code)] if isinstance(code, Path) else ["-c", code]
    cmd = [str(python), *args, *source]
    return subprocess.run(
        cmd,
        env=scenario_env(env),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_module(
    module_args: list[str],
    env: Mapping[str, str] | None = None,
    *,
    python: str | os.PathLike[str] = sys.executable,
    cwd: str | os.PathLike[str] | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m <module_args>`` in a fresh interpreter with ``scenario_env(env)``."""
    return subprocess.run(
        [str(python), "-m", *module_args],
        env=scenario_env(env),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def problem_text(env: Mapping[str, str]) -> str:
    """The message of the ``ConfigError`` that resolving ``env`` must raise."""
    import pytest
    from tfboot import ConfigError, resolve

    with pytest.raises(ConfigError) as info:
        resolve(env)
    return str(info.value)


def stamp(text: str) -> int:
    """A usage record's moment (``started``, ``at``: UTC, in whole seconds, cut down) as
    seconds since the epoch."""
    from tfboot.usage.measure import STAMP

    return calendar.timegm(time.strptime(text, STAMP))


def last_json(stdout: str) -> dict:
    """The last line of ``stdout`` that parses as a JSON object."""
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise AssertionError(f"no JSON object in output:\n{stdout}")


def unavailable(reason: str) -> None:
    """A tool or environment is missing: fail under ``CI=true``, else skip with the reason."""
    import pytest

    if os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}:
        pytest.fail(reason)
    print(f"skipping: {reason}", file=sys.stderr)
    pytest.skip(reason)


def cluster_plan(mode: str, env: Mapping[str, str], plan: Any = None) -> Any:
    """The cluster plan for ``DISTRIBUTED=mode`` over ``env``, resolved as at import.

    With ``plan`` (a ``tfboot.adapters.Plan``), the local-replica check runs as after
    TensorFlow listed the plan's GPUs.
    """
    from tfboot import resolve
    from tfboot.adapters.tensorflow import LAUNCH
    from tfboot.cluster.plan import plan_cluster

    settings = resolve({**env, "DISTRIBUTED": mode})
    assert settings.cluster is not None
    devices = {} if plan is None else {"replicas": plan.local_replicas(),
                                       "cpu_split": plan.cpu_logical}  # fmt: skip
    return plan_cluster(LAUNCH, "TensorFlow", mode, settings.cluster, env, devices)


WORKING_MIB = 500  # the working set of cgroup_limits' tree


def cgroup_limits(root: Path, memory: str = "4294967296", cpu: str = "200000 100000") -> str:
    """A fake cgroup v2 tree with ``memory.max`` and ``cpu.max``, for ``TFBOOT_CGROUP_ROOT``,
    and a working set of ``WORKING_MIB`` (``memory.current``, ``memory.stat``) that a test
    may rewrite while its process runs."""
    (root / "proc" / "self").mkdir(parents=True)
    (root / "proc" / "self" / "cgroup").write_text("0::/\n")
    (root / "proc" / "self" / "mountinfo").write_text(
        "30 25 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
    )
    (root / "sys" / "fs" / "cgroup").mkdir(parents=True)
    (root / "sys" / "fs" / "cgroup" / "memory.max").write_text(memory + "\n")
    (root / "sys" / "fs" / "cgroup" / "cpu.max").write_text(cpu + "\n")
    (root / "sys" / "fs" / "cgroup" / "memory.current").write_text(f"{WORKING_MIB << 20}\n")
    (root / "sys" / "fs" / "cgroup" / "memory.stat").write_text("anon 0\ninactive_file 0\n")
    return str(root)


def tf_plan(
    env: Mapping[str, str], gpus: int, cpu: Any = None, memory: Any = None, settings: Any = None
) -> Any:
    """TensorFlow's plan for ``env`` on a host where TensorFlow lists ``gpus`` GPUs, with the
    CPU budget ``cpu`` (default: 8 CPUs, no quota) and the memory budget ``memory`` (none)."""
    from tfboot import resolve
    from tfboot.adapters.tensorflow import make_plan
    from tfboot.budget import NO_LIMIT, make_budget
    from tfboot.node.cpu import CpuBudget

    cpu = CpuBudget(affinity=8, quota=None, quota_source="") if cpu is None else cpu
    settings = resolve(env) if settings is None else settings
    return make_plan(make_budget(settings, env, cpu=cpu, memory=memory or NO_LIMIT), gpus)


def called(plan: Any, name: str) -> list[tuple[Any, ...]]:
    """The arguments of each of the plan's calls named ``name`` (``set_memory_growth``)."""
    return [call.args for call in plan.calls if getattr(call, "name", None) == name]


def threads(plan: Any, pool: str = "intra") -> int | None:
    """The thread count the plan gives TensorFlow's ``intra`` or ``inter`` pool (None: none)."""
    found = called(plan, f"set_{pool}_op_parallelism_threads")
    return found[0][0] if found else None


def data_defaults(plan: Any) -> Any:
    """The tf.data defaults the plan gives every pipeline (None: TensorFlow's)."""
    return plan.host.data if plan.host is not None else None


def decision(plan: Any, start: str) -> str:
    """The plan's decision that starts with ``start``."""
    return next(d for d in plan.decisions if d.startswith(start))


_held: list[socket.socket] = []  # the ports free_ports holds until the test ends


def free_ports(count: int) -> list[int]:
    """``count`` consecutive TCP ports that nothing holds, held by this process until the
    test ends (``release_ports``), so that no other process takes one between this check
    and the bind of the server the test starts on it.

    Each is bound alone first (no ``SO_REUSEADDR``: the check, refused where any socket
    holds the port, on any address of either family), then keeps its socket, bound and not
    listening, with ``SO_REUSEADDR`` set. Linux then lets a server that sets
    ``SO_REUSEADDR`` too bind and listen there (TensorFlow's and JAX's gRPC servers,
    PyTorch's TCPStore, Python's ``socket.create_server`` and ``http.server``, Go's
    servers), while another process's check, which binds without it (this one, another
    suite's beside it), is refused. A client's connection is refused until the server
    listens, as on a port nothing holds. The ports lie below the kernel's ephemeral range,
    where no outgoing connection takes one."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    for _ in range(200):
        base = random.randrange(10000, low - count)
        held = []
        try:
            for port in range(base, base + count):
                held.append(_hold(port))
        except OSError:
            for sock in held:
                sock.close()
            continue
        _held.extend(held)
        return list(range(base, base + count))
    raise AssertionError(f"no {count} free consecutive ports below {low}")


def _hold(port: int) -> socket.socket:
    """``port`` bound alone on every address (IPv6's wildcard with IPv4 mapped, else IPv4's),
    then opened to servers that set ``SO_REUSEADDR``; OSError where anything holds it."""
    try:
        sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        address: tuple[str, int] = ("::", port)
    except OSError:  # no IPv6 here
        sock, address = socket.socket(socket.AF_INET, socket.SOCK_STREAM), ("0.0.0.0", port)
    try:
        sock.bind(address)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    except OSError:
        sock.close()
        raise
    return sock


def release_ports() -> None:
    """Close the sockets that hold the ports ``free_ports`` gave (at each test's end)."""
    while _held:
        _held.pop().close()


# The version matrix's environment of the newest JAX, on a newer Python than the test
# environment's (JAX 0.11 and later need Python 3.12 or later), with Keras 3.
NEWER_PYTHON = "0.12-py3.13"
# Code that counts the threads in JAX's CPU client pool (named tf_XLAEigen from JAX 0.8.3):
# ``jax_pool()``, after a computation.
JAX_POOL = """
import os
def _name(task):
    try:  # a thread may end between the listing and the read
        with open(f"/proc/self/task/{task}/comm") as comm:
            return comm.read()
    except FileNotFoundError:
        return ""
def jax_pool():
    return sum(_name(t).startswith("tf_XLAEigen") for t in os.listdir("/proc/self/task"))
"""


def matrix_python(framework: str, version: str) -> str:
    """The interpreter of the version-matrix environment ``.venv-FRAMEWORK-VERSION`` that
    scripts/test.sh builds; the test environment's own for ``newest``."""
    if version == "newest":
        return sys.executable
    found = REPO / f".venv-{framework}-{version}" / "bin" / "python"
    if not found.exists():
        unavailable(f"no {found.parent.parent.name} (scripts/test.sh builds the version matrix)")
    return str(found)


@contextlib.contextmanager
def started(script: Path, limit_s: float, defaults: Mapping[str, str] | None = None
            ) -> Iterator[Callable[..., subprocess.Popen[str]]]:  # fmt: skip
    """``start(env, *args, launcher=(), python=sys.executable)``: ``script`` as a task of its
    own (``launcher``, such as ``-m torch.distributed.run``, before it), SIGKILLed after
    ``limit_s`` and on leaving: TensorFlow swallows SIGTERM under MultiWorkerMirroredStrategy."""
    processes: list[subprocess.Popen[str]] = []

    def start(env: dict[str, str], *args: str, launcher: tuple[str, ...] = (),
              python: str = sys.executable) -> subprocess.Popen:  # fmt: skip
        process = subprocess.Popen(
            ["timeout", "-s", "KILL", str(limit_s), python, *launcher, str(script), *args],
            env=scenario_env({**(defaults or {}), **env}),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        processes.append(process)
        return process

    try:
        yield start
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
            process.wait()


def configured(stderr: str, framework: str) -> str:
    """What tfboot said it configured for ``framework`` at its import, as one string: the
    ``configured`` line and the decisions under it (a line each), joined by "; "."""
    lines = stderr.splitlines()
    start = next(i for i, line in enumerate(lines) if f"configured {framework}" in line)
    block = [lines[start]]
    for line in lines[start + 1 :]:
        if not line.startswith("tfboot:   "):
            break
        block.append(line.removeprefix("tfboot:   "))
    return "; ".join(block)
