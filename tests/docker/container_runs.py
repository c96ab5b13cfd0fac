"""Run one-shot commands in containers through testcontainers, and read what they printed.

Each scenario is a fresh container given only ``-e`` variables, resource limits and
(read-only) mounts, exactly as a user would start one. The probe below measures what
TensorFlow really did inside the container, independently of what tfboot reports.
"""

from __future__ import annotations

import json
import sys
import sysconfig
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
from support import last_json
from testcontainers.core.config import testcontainers_config
from testcontainers.core.container import DockerContainer

# The Ryuk reaper is an image from a registry, which these machines cannot reach; every
# container here is removed by the context manager instead.
testcontainers_config.ryuk_disabled = True

# The test environment's site-packages, with PyTorch and JAX, which the images lack and no
# registry can give them: mounted read-only behind the image's own (``with_frameworks``).
SITE = Path(sysconfig.get_paths()["purelib"])
MOUNTED_SITE = "/opt/test-site-packages"
IMAGE_PYTHON = (
    "import json, sys, sysconfig; "
    "print(json.dumps([list(sys.version_info[:2]), sysconfig.get_paths()['purelib']]))"
)

# Quiet TensorFlow's C++ start-up chatter, so a failing test shows the relevant stderr.
QUIET_TF = {"TF_CPP_MIN_LOG_LEVEL": "2"}

# Starts TensorFlow's runtime and reports the thread pools it actually created: the
# inter-op pool's threads are named tf_Compute; the intra-op (Eigen) pool's threads are the
# new unnamed ones. Also reports logical CPUs, the uid and where `sitecustomize` comes from.
PROBE = """
import collections, importlib.util, json, os
def census():
    names = {}
    for tid in os.listdir('/proc/self/task'):
        with open(f'/proc/self/task/{tid}/comm') as fh:
            names[tid] = fh.read().strip()
    return names
import tensorflow as tf
before = census()
x = tf.random.normal((64, 64))
tf.matmul(x, x).numpy()
new = collections.Counter(n for t, n in census().items() if t not in before)
spec = importlib.util.find_spec('sitecustomize')
print(json.dumps({
    'intra_pool': sum(c for n, c in new.items() if not n.startswith('tf_')),
    'inter_pool': new.get('tf_Compute', 0),
    'logical_cpus': len(tf.config.list_logical_devices('CPU')),
    'affinity': len(os.sched_getaffinity(0)),
    'uid': os.getuid(),
    'sitecustomize': spec.origin if spec else None,
    'tfboot_loaded': 'tfboot' in __import__('sys').modules,
}))
"""

PROBE_CMD = ["python3", "-c", PROBE]
DOCTOR_CMD = ["python3", "-m", "tfboot", "doctor", "--json"]


@dataclass(frozen=True)
class Outcome:
    """What a container left behind: ``exit_code`` None where it was still running when the
    wait ended (hung), with ``processes``, its process list then (state, kernel wait)."""

    exit_code: int | None
    stdout: str
    stderr: str
    processes: str = ""

    def json(self) -> dict[str, Any]:
        """The last JSON object the command printed on stdout."""
        return last_json(self.stdout)

    def ok(self) -> Outcome:
        """``self``, after checking the command succeeded."""
        assert self.exit_code == 0, f"container exited {self.exit_code}\n{self}"
        return self

    def __str__(self) -> str:
        hung = f"--- still running; its processes ---\n{self.processes}\n" if self.processes else ""
        return f"{hung}--- stdout ---\n{self.stdout[-3000:]}\n--- stderr ---\n{self.stderr[-3000:]}"


def cpus(n: float) -> dict[str, int]:
    """Keyword arguments for ``docker run --cpus=n``."""
    return {"nano_cpus": int(n * 1e9)}


def run_container(
    image: str,
    command: list[str],
    env: Mapping[str, str] | None = None,
    *,
    mounts: Iterable[tuple[Path, str]] = (),
    timeout: float = 300,
    **docker_kwargs: Any,
) -> Outcome:
    """Run ``command`` in a new container of ``image`` and wait for it to exit, at most
    ``timeout`` seconds (then the outcome says it hung, with its processes).

    ``env`` becomes ``-e`` variables (on top of ``QUIET_TF``), ``mounts`` are
    ``(host path, container path)`` read-only bind mounts, and ``docker_kwargs`` go to the
    Docker API (``nano_cpus=...``, ``mem_limit=...``). The container is always removed.
    """
    container = DockerContainer(image).with_command(command)
    for key, value in {**QUIET_TF, **(env or {})}.items():
        container.with_env(key, value)
    for host, target in mounts:
        container.with_volume_mapping(host, target, "ro")
    if docker_kwargs:
        container.with_kwargs(**docker_kwargs)
    with container:
        running = container.get_wrapped_container()
        try:
            code: int | None = int(running.wait(timeout=timeout)["StatusCode"])
        except (requests.exceptions.ConnectionError, requests.exceptions.Timeout):  # timed out
            code = None
            top = running.top(ps_args="-o pid,ppid,stat,wchan:32,args")
            processes = "\n".join(
                " ".join(map(str, row)) for row in [top["Titles"], *top["Processes"]]
            )
        stdout, stderr = container.get_logs()
    return Outcome(code, stdout.decode(), stderr.decode(), processes if code is None else "")


def image_site(image: str) -> str:
    """``image``'s site-packages, once its CPython is checked to be this one's version (the
    mounted site-packages' compiled modules need it)."""
    import pytest

    import docker

    logs = docker.from_env().containers.run(image, ["python3", "-c", IMAGE_PYTHON], remove=True)
    version, site = json.loads(logs.decode())
    if tuple(version) != sys.version_info[:2]:
        pytest.fail(
            f"the image has CPython {'.'.join(map(str, version))}, the tests run on "
            f"{sys.version_info[0]}.{sys.version_info[1]}: the mounted site-packages' "
            "compiled modules (PyTorch, JAX) need the same version"
        )
    return str(site)
