"""The multi-worker overlay's Pods, emulated together on Docker: real training across them.

No cluster can run here, so the overlay is rendered with real ``kubectl kustomize`` (two
workers) and each Pod's container runs as the kubelet would start it (``test_pod_emulation``'s
env, limits and security context) on a Docker user-defined network. What Kubernetes adds
for an Indexed Job with a headless Service is emulated the way it sets it: the hostname
``<job>-<index>``, ``JOB_COMPLETION_INDEX``, and DNS names ``<job>-<index>.<service>`` and
the FQDN ``<job>-<index>.<service>.<namespace>.svc.cluster.local``, as network aliases.
Nothing else is given to the containers: tfboot builds each TF_CONFIG at import from the
manifest's variables. The training script is ``tests/cluster/mw_train.py``, a custom loop
under MultiWorkerMirroredStrategy, mounted read-only.

A Pod that gets a GPU gets the simulated one (``tests/simgpu``): the PluggableDevice plugin,
built on the host against the very TensorFlow 2.21 the image carries (checked: the same
``libtensorflow_framework.so.2``, and a glibc no newer than the image's), mounted read-only
and named by ``TF_PLUGGABLE_DEVICE_LIBRARY_PATH``, where a device plugin would hand the
container a GPU.

Docker's embedded DNS has no upstream resolver here, so looking up a name no container
holds takes about 10 s: the missing-peer scenario also checks that the wait line and the
``DIST_STARTUP_TIMEOUT`` exit do not wait for DNS.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from container_runs import QUIET_TF, Outcome
from kustomize import REPO, copy_k8s, documents, render_text, set_literal
from simgpu.scenarios import STABLE_PYTHON, ready_plugin
from test_pod_emulation import pod_run

import docker

pytestmark = [
    pytest.mark.docker,
    pytest.mark.k8s,
    pytest.mark.multiworker,
    pytest.mark.xdist_group("multiworker-pods"),
]

WORKERS = 2
NAMESPACE = "default"
LATE_S = 20  # the second worker starts this much later
TRAIN = REPO / "tests" / "cluster" / "mw_train.py"
TRAIN_CMD = ["python3", "/opt/mw_train.py", "multi"]
IMPORT_CMD = ["python3", "-c", "import tensorflow"]
EXIT_UNREACHABLE = 1  # tfboot's exit status when DIST_STARTUP_TIMEOUT runs out
GPU_LIBRARY = "/opt/simgpu/simgpu.so"
GPU_ENV = {"TF_PLUGGABLE_DEVICE_LIBRARY_PATH": GPU_LIBRARY, "SIMGPU_MEMORY_MB": "4096"}
GPUS_CMD = [
    "python3", "-c",
    "import json, tensorflow as tf; print(json.dumps(len(tf.config.list_physical_devices('GPU'))))",
]  # fmt: skip
# Which TensorFlow an interpreter has, found without importing it, and its glibc.
TF_BUILD = """
import hashlib, importlib.util, json, os, pathlib
tf = pathlib.Path(importlib.util.find_spec("tensorflow").origin).parent
framework = (tf / "libtensorflow_framework.so.2").read_bytes()
print(json.dumps({"framework": hashlib.sha256(framework).hexdigest(),
                  "glibc": os.confstr("CS_GNU_LIBC_VERSION")}))
"""


class Cluster:
    """The rendered Job's Pods on one Docker network; removes all it started."""

    def __init__(self, image: str, docs: list[dict[str, Any]]) -> None:
        self.image, self.run = image, pod_run(docs)
        job = next(doc for doc in docs if doc["kind"] == "Job")
        service = next(doc for doc in docs if doc["kind"] == "Service")
        self.job, self.service = job["metadata"]["name"], service["metadata"]["name"]
        assert job["spec"]["template"]["spec"]["subdomain"] == self.service
        self.client = docker.from_env()
        self.network = self.client.networks.create(f"tfboot-mw-{uuid.uuid4().hex[:8]}")
        self.containers: list[Any] = []

    def dns_names(self, index: int) -> list[str]:
        pod = f"{self.job}-{index}.{self.service}"
        return [pod, f"{pod}.{NAMESPACE}.svc.cluster.local"]

    def start(self, index: int, command: list[str], gpu: Path | None = None, **env: str) -> Any:
        """Pod ``index`` as the Job controller and the kubelet would start it (``gpu``: the
        simulated GPU's plugin, given the way a device plugin gives the container a GPU)."""
        settings: dict[str, Any] = dict(self.run.docker)
        volumes = {str(TRAIN): {"bind": "/opt/mw_train.py", "mode": "ro"}}
        if gpu is not None:
            volumes[str(gpu)] = {"bind": GPU_LIBRARY, "mode": "ro"}
            env = {**GPU_ENV, **env}
        endpoint = self.client.api.create_endpoint_config(aliases=self.dns_names(index))
        container = self.client.containers.create(
            self.image,
            command,
            name=f"{self.network.name}-{index}",
            hostname=f"{self.job}-{index}",
            environment={**QUIET_TF, **self.run.env, "JOB_COMPLETION_INDEX": str(index), **env},
            network=self.network.name,
            networking_config={self.network.name: endpoint},
            volumes=volumes,
            tmpfs=dict.fromkeys(settings.pop("tmpfs"), ""),
            **settings,
        )
        self.containers.append(container)
        container.start()
        return container

    def close(self) -> None:
        for container in self.containers:
            container.remove(force=True)
        self.network.remove()


def finish(container: Any, timeout: float = 240) -> Outcome:
    status = container.wait(timeout=timeout)
    stdout = container.logs(stdout=True, stderr=False).decode()
    stderr = container.logs(stdout=False, stderr=True).decode()
    return Outcome(int(status["StatusCode"]), stdout, stderr)


@pytest.fixture
def cluster(tfboot_image: str, kubectl: str, tmp_path: Path) -> Iterator[Cluster]:
    """The multi-worker overlay rendered for two workers, ready to start its Pods."""
    k8s = copy_k8s(tmp_path)
    overlay = k8s / "overlays" / "multi-worker"
    set_literal(overlay / "workers.env", "WORKERS", str(WORKERS))
    docs = documents(render_text(kubectl, overlay))
    job = next(doc for doc in docs if doc["kind"] == "Job")
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == WORKERS
    made = Cluster(tfboot_image, docs)
    assert made.run.env["DIST_TASKS"] == str(WORKERS)
    try:
        yield made
    finally:
        made.close()


def tf_build(outcome: Outcome) -> dict[str, Any]:
    """``TF_BUILD``'s answer, with glibc's version as a tuple to compare."""
    found = outcome.ok().json()
    return {**found, "glibc": tuple(int(n) for n in found["glibc"].split()[-1].split("."))}


@pytest.fixture(scope="module")
def gpu_plugin(tfboot_image: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The simulated GPU's plugin for the image's TensorFlow, readable by the Pod's user."""
    built = ready_plugin(STABLE_PYTHON)
    cmd = [str(STABLE_PYTHON), "-c", TF_BUILD]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    host = tf_build(Outcome(proc.returncode, proc.stdout, proc.stderr))
    logs = docker.from_env().containers.run(tfboot_image, ["python3", "-c", TF_BUILD], remove=True)
    image = tf_build(Outcome(0, logs.decode(), ""))
    assert host["framework"] == image["framework"], "the image carries another TensorFlow build"
    assert host["glibc"] <= image["glibc"], f"plugin built for glibc {host}, image has {image}"
    copy = tmp_path_factory.mktemp("simgpu") / "simgpu.so"
    shutil.copyfile(built, copy)
    os.chmod(copy, 0o644)  # the build leaves it to its owner; the Pod runs as another user
    return copy


def tfboot_lines(outcome: Outcome) -> list[str]:
    return [line for line in outcome.stderr.splitlines() if line.startswith("tfboot:")]


def test_training_across_pods_with_a_late_worker(cluster: Cluster) -> None:
    """Worker 1 starts 20 s after worker 0, which waits for it (and says so); both train."""
    first = cluster.start(0, TRAIN_CMD)
    time.sleep(LATE_S)
    first.reload()
    assert first.status == "running", finish(first)
    second = cluster.start(1, TRAIN_CMD)
    outcomes = [finish(first, 300), finish(second, 300)]
    results = [outcome.ok().json() for outcome in outcomes]
    assert [r["rank"] for r in results] == [0, 1]
    assert all(r["replicas"] == WORKERS for r in results), results
    assert results[0]["weights"] == pytest.approx(results[1]["weights"], abs=1e-6)
    assert any(abs(w) > 0.05 for w in results[0]["weights"]), "the loop did not train"
    peer = f"{cluster.dns_names(1)[0]}:{cluster.run.env['DIST_PORT']}"
    assert f'"{peer}"' in results[0]["tf_config"], results[0]["tf_config"]
    waits = [line for line in tfboot_lines(outcomes[0]) if "still waiting for 1 peer(s)" in line]
    assert waits and peer in waits[0], outcomes[0]
    # The watcher's closing "all 1 peer(s) answered" line is not asserted: a job this short
    # can end before the watcher's next probe round, and the watcher then exits silently.


def test_worker_with_another_split_fails_at_import(cluster: Cluster, gpu_plugin: Path) -> None:
    """Both Pods get one (simulated) GPU, as the manifest's ``nvidia.com/gpu: 1`` asks, and
    the manifest says DIST_REPLICAS_PER_WORKER=1. Worker 1 also gets MEMORY_LIMIT_MB and
    VIRTUAL_SPLIT=2: tfboot's plan counts 2 logical GPUs there, so ``import tensorflow``
    stops with the replicas error naming both numbers, while worker 0 imports.

    TensorFlow 2.21's PluggableDevice path ignores the split at runtime (this device would
    stay one replica), but tfboot's check runs on its own plan, before the runtime starts,
    and that plan is what a CUDA runtime applies: the simulated GPU reaches the check as a
    real one would.
    """
    assert cluster.run.env["DIST_REPLICAS_PER_WORKER"] == "1"
    same = cluster.start(0, GPUS_CMD, gpu_plugin)
    split = cluster.start(1, IMPORT_CMD, gpu_plugin, MEMORY_LIMIT_MB="2048", VIRTUAL_SPLIT="2")
    control, outcome = finish(same, 180), finish(split, 180)
    assert json.loads(control.ok().stdout) == 1, control
    assert outcome.exit_code != 0, outcome
    assert "DIST_REPLICAS_PER_WORKER='1' cannot be met on this host" in outcome.stderr, outcome
    assert "has 2 local replica(s)" in outcome.stderr, outcome
    assert "every worker must have 1" in outcome.stderr, outcome


def test_missing_peer_is_named_then_the_worker_exits(cluster: Cluster) -> None:
    """Worker 0 alone: wait lines naming worker 1, then DIST_STARTUP_TIMEOUT ends it."""
    outcome = finish(cluster.start(0, TRAIN_CMD, DIST_STARTUP_TIMEOUT="8"), 120)
    assert outcome.exit_code == EXIT_UNREACHABLE, outcome  # tfboot's end, named below
    peer = f"{cluster.dns_names(1)[0]}:{cluster.run.env['DIST_PORT']}"
    lines = tfboot_lines(outcome)
    waits = [line for line in lines if "still waiting for 1 peer(s)" in line and peer in line]
    assert len(waits) >= 2 and "DIST_STARTUP_TIMEOUT" not in waits[0], lines
    assert f"{peer} (DNS: " in waits[-1] and "DIST_STARTUP_TIMEOUT=8 reached" in waits[-1], lines
