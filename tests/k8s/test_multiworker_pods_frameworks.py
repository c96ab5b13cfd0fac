"""PyTorch, JAX and Keras 3 jobs across the multi-worker overlay's Pods, emulated on Docker.

The Pods are ``test_multiworker_pods``'s: the overlay rendered with real ``kubectl
kustomize`` (three workers here), each Pod's container started as the kubelet would start it
on a Docker user-defined network, with the hostname ``<job>-<index>``,
``JOB_COMPLETION_INDEX`` and the headless Service's DNS names as network aliases, as for an
Indexed Job. Each container runs ``tests/cluster/dp_train.py`` (mounted read-only), which
calls ``init_process_group("gloo")``, ``jax.distributed.initialize()`` or
``keras.distribution.initialize()`` with no arguments: tfboot forms the job at the
framework's import from the manifest's variables alone. PyTorch's all-reduce is gloo's over
TCP, JAX's ``process_allgather`` its multi-process CPU collectives; every rank must end with
the weights of one process training on the whole batches (the same script's ``single``
mode, run on the host).

The overlay is one Pod template for every framework: each Pod gets the rendered
manifest's env unchanged, ``DIST_REPLICAS_PER_WORKER=1`` and ``DIST_STARTUP_TIMEOUT=600``
included (checked at import for PyTorch, when ``initialize`` returns for JAX; PyTorch's
``init_process_group`` bounded, JAX's ``initialization_timeout``).

The one stand-in: the image carries TensorFlow only, and no registry can be reached to
install PyTorch or JAX into it. The test environment's own site-packages, which has them,
is mounted read-only into each container and put on ``PYTHONPATH`` behind the image's own
site-packages, so tfboot, NumPy and everything else the image has stay the image's, and
only what it lacks (PyTorch, JAX, SciPy, ...) comes from the mount. Their compiled modules
need the same CPython minor version in the image, which is checked first.

A lost task: one rank prints ``lost at T`` and SIGKILLs itself mid-run; the others must
exit non-zero within TensorFlow's bound, ``DIST_TERM_GRACE`` (default 5 s) + 5 s. A
container's PID 1 cannot SIGKILL itself (the kernel drops a signal to a namespace's init
that the init has no handler for), so those Pods run under the engine's init (``docker run
--init``), as a Pod with ``shareProcessNamespace: true`` runs under its pause container.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from container_runs import MOUNTED_SITE, QUIET_TF, SITE, Outcome
from container_runs import image_site as site_of
from kustomize import REPO, copy_k8s, documents, render_text, set_literal
from support import last_json, scenario_env
from test_multiworker_pods import Cluster, finish

pytestmark = [
    pytest.mark.docker,
    pytest.mark.k8s,
    pytest.mark.multiworker,
    pytest.mark.slow,
    pytest.mark.xdist_group("multiworker-pods"),
]

WORKERS = 3
CONTRACT_PORT = "2222"  # DIST_PORT's default on Kubernetes, and the overlay's
TERM_GRACE_S = 5  # DIST_TERM_GRACE's default
LOST_LIMIT_S = TERM_GRACE_S + 5  # TensorFlow's bound for a lost task ending the others
DP_TRAIN = REPO / "tests" / "cluster" / "dp_train.py"
SCRIPT = "/opt/dp_train.py"
SCRIPT_ENV = {"torch": {}, "jax": {}, "keras": {"KERAS_BACKEND": "jax"}}
LOG_NAME = {"torch": "PyTorch", "jax": "JAX", "keras": "JAX"}
LONG_RUN = {"STEPS": "100000", "STEP_S": "0.05", "LOSE_RANK": "2", "LOSE_STEP": "5"}
# What the survivors' stderr says when a peer is gone.
LOST_PEER = {
    # gloo says "closed" or "reset" for the same loss, as the peer's socket went
    "torch": re.compile(r"RuntimeError: .*gloo.* Connection (closed|reset) by peer"),
    "jax": re.compile(
        r"Task 2 heartbeat timeout|Gloo \w+ failed: .* Connection (closed|reset) by peer"
    ),
}


class FrameworkPods(Cluster):
    """``Cluster``, its containers also given the training script, the mounted
    site-packages on ``PYTHONPATH``, and (``init``) the engine's init as PID 1."""

    def __init__(self, image: str, docs: list[dict[str, Any]], image_site: str) -> None:
        super().__init__(image, docs)
        self.python_path = f"{image_site}:{MOUNTED_SITE}"
        self.init = False

    def start(self, index: int, command: list[str], gpu: Path | None = None, **env: str) -> Any:
        assert gpu is None, "these Pods run on a node without a GPU"
        settings: dict[str, Any] = dict(self.run.docker)
        volumes = {
            str(DP_TRAIN): {"bind": SCRIPT, "mode": "ro"},
            str(SITE): {"bind": MOUNTED_SITE, "mode": "ro"},
        }
        endpoint = self.client.api.create_endpoint_config(aliases=self.dns_names(index))
        environment = {**QUIET_TF, **self.run.env, "JOB_COMPLETION_INDEX": str(index)}
        environment |= {"PYTHONPATH": self.python_path, **env}
        container = self.client.containers.create(
            self.image,
            command,
            name=f"{self.network.name}-{index}",
            hostname=f"{self.job}-{index}",
            environment=environment,
            network=self.network.name,
            networking_config={self.network.name: endpoint},
            volumes=volumes,
            tmpfs=dict.fromkeys(settings.pop("tmpfs"), ""),
            init=self.init,
            **settings,
        )
        self.containers.append(container)
        container.start()
        return container


@pytest.fixture(scope="module")
def image_site(tfboot_image: str) -> str:
    """The image's site-packages, once its CPython is checked to be this one's version."""
    return site_of(tfboot_image)


@pytest.fixture
def pods(
    tfboot_image: str, kubectl: str, image_site: str, tmp_path: Path
) -> Iterator[Callable[[str], FrameworkPods]]:
    """Gives the overlay's Pods for three workers, with the manifest's env; removes all it
    started."""
    k8s = copy_k8s(tmp_path)
    overlay = k8s / "overlays" / "multi-worker"
    set_literal(overlay / "workers.env", "WORKERS", str(WORKERS))
    rendered = render_text(kubectl, overlay)
    made: list[FrameworkPods] = []

    def make(framework: str) -> FrameworkPods:
        docs = documents(rendered)
        job = next(doc for doc in docs if doc["kind"] == "Job")
        assert job["spec"]["completions"] == job["spec"]["parallelism"] == WORKERS
        (container,) = job["spec"]["template"]["spec"]["containers"]
        names = {item["name"] for item in container["env"]}
        assert {"DIST_REPLICAS_PER_WORKER", "DIST_STARTUP_TIMEOUT"} <= names, names
        cluster = FrameworkPods(tfboot_image, docs, image_site)
        made.append(cluster)
        env = cluster.run.env
        assert env["DISTRIBUTED"] == "k8s" and env["DIST_TASKS"] == str(WORKERS), env
        assert env["DIST_HOSTS"] == f"worker={cluster.job}-{{i}}.{cluster.service}", env
        assert env["DIST_PORT"] == CONTRACT_PORT, env
        return cluster

    try:
        yield make
    finally:
        for cluster in made:
            cluster.close()


def reference(framework: str) -> subprocess.Popen[str]:
    """``dp_train.py FRAMEWORK single`` on the host, with no contract variable."""
    return subprocess.Popen(
        ["timeout", "-s", "KILL", "240", sys.executable, str(DP_TRAIN), framework, "single"],
        env=scenario_env(SCRIPT_ENV[framework]),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def cluster_line(outcome: Outcome, framework: str) -> str:
    """tfboot's one line saying which rank this process is and where rank 0 is."""
    prefix = f"tfboot: cluster: {LOG_NAME[framework]} rank "
    lines = [line for line in outcome.stderr.splitlines() if line.startswith(prefix)]
    assert len(lines) == 1, outcome
    return lines[0]


def exited(container: Any, deadline: float) -> float:
    """When ``container`` was seen to have exited (a Unix time), polling until ``deadline``."""
    while time.time() < deadline:
        container.reload()
        if container.status == "exited":
            return time.time()
        time.sleep(0.1)
    raise AssertionError(f"{container.name} still runs {time.time() - deadline:.0f} s late")


def finished_at(container: Any) -> float:
    """When the engine saw the container's process exit, as a Unix time."""
    container.reload()
    stamp = container.attrs["State"]["FinishedAt"]  # RFC 3339, UTC, in nanoseconds
    whole, _, fraction = stamp.rstrip("Z").partition(".")
    moment = datetime.fromisoformat(whole).replace(tzinfo=timezone.utc)
    return moment.timestamp() + float(f"0.{fraction or '0'}")


@pytest.mark.parametrize("framework", ["torch", "jax", "keras"])
def test_data_parallel_training_across_pods(pods, framework: str) -> None:
    """Three Pods form one job from the manifest's variables; each rank is its Pod's index
    and ends with the weights of one process on the whole batches."""
    cluster = pods(framework)
    single = reference(framework)
    command = ["python3", SCRIPT, framework, "multi"]
    started = [cluster.start(i, command, **SCRIPT_ENV[framework]) for i in range(WORKERS)]
    outcomes = [finish(container, 180) for container in started]
    out, err = single.communicate(timeout=240)
    assert single.returncode == 0, err[-3000:]
    expected = last_json(out)
    addresses = [f"{cluster.dns_names(i)[0]}:{CONTRACT_PORT}" for i in range(WORKERS)]
    coordinator = addresses[0]
    results = [outcome.ok().json() for outcome in outcomes]
    for index, (result, outcome) in enumerate(zip(results, outcomes, strict=True)):
        assert result["rank"] == index and result["world"] == WORKERS, result
        assert result["weights"] == results[0]["weights"], results  # the same on every rank
        np.testing.assert_allclose(result["weights"], expected["weights"], rtol=1e-12)
        line = cluster_line(outcome, framework)
        assert f"rank {index} of {WORKERS} (k8s; worker {index}, index from " in line, line
        assert f"JOB_COMPLETION_INDEX={index})" in line, line
        assert f"rank 0 at {coordinator}" in line, line
        if framework == "torch":
            assert result["local"] == ["0", "1"], result  # one task per Pod's host
            host, port = coordinator.split(":")
            assert f"MASTER_ADDR={host} MASTER_PORT={port} WORLD_SIZE={WORKERS} " in line
            assert f"RANK={index} LOCAL_RANK=0 LOCAL_WORLD_SIZE=1" in line, line
        else:
            assert f"coordinator_address={coordinator!r}" in line, line
            assert f"num_processes={WORKERS}, process_id={index}" in line, line
            assert f"heartbeat_timeout_seconds={TERM_GRACE_S}" in line, line
            keras = f"KERAS_DISTRIBUTION_JOB_ADDRESSES={coordinator} "
            keras += f"KERAS_DISTRIBUTION_NUM_PROCESSES={WORKERS} "
            assert f"{keras}KERAS_DISTRIBUTION_PROCESS_ID={index}" in line, line
    assert any(abs(w) > 0.05 for w in expected["weights"]), "the steps did not train"


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_lost_task_ends_the_others(pods, framework: str) -> None:
    """Rank 2 is SIGKILLed mid-run: ranks 0 and 1 exit non-zero after the loss, naming the
    failure (how long after is said on failure, never asserted: a loaded machine only
    delays it)."""
    cluster = pods(framework)
    cluster.init = True
    command = ["python3", SCRIPT, framework, "multi"]
    started = [cluster.start(i, command, **LONG_RUN) for i in range(WORKERS)]
    lost = finish(started[2], 180)
    match = re.search(r"^rank 2 lost at (\d+\.\d+)$", lost.stdout, re.MULTILINE)
    assert match and lost.exit_code == 137, lost  # 128 + SIGKILL
    at = float(match.group(1))
    for index in (0, 1):
        seen = exited(started[index], at + LOST_LIMIT_S + 30) - at
        outcome = finish(started[index], 10)
        took = finished_at(started[index]) - at
        when = f"rank {index} ended {took:.2f} s after the loss (seen after {seen:.2f} s)"
        assert outcome.exit_code != 0, f"{when}\n{outcome}"
        assert took >= 0, f"{when}\n{outcome}"  # after the loss, by it (named below)
        assert LOST_PEER[framework].search(outcome.stderr), f"{when}\n{outcome}"
