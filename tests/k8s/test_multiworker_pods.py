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
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from container_runs import QUIET_TF, Outcome
from kustomize import REPO, copy_k8s, documents, render_text, set_literal
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
EXIT_UNREACHABLE = 1  # tfboot's exit status when DIST_STARTUP_TIMEOUT runs out (faulthandler)


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

    def start(self, index: int, command: list[str], **env: str) -> Any:
        """Pod ``index`` as the Job controller and the kubelet would start it."""
        settings: dict[str, Any] = dict(self.run.docker)
        endpoint = self.client.api.create_endpoint_config(aliases=self.dns_names(index))
        container = self.client.containers.create(
            self.image,
            command,
            name=f"{self.network.name}-{index}",
            hostname=f"{self.job}-{index}",
            environment={**QUIET_TF, **self.run.env, "JOB_COMPLETION_INDEX": str(index), **env},
            network=self.network.name,
            networking_config={self.network.name: endpoint},
            volumes={str(TRAIN): {"bind": "/opt/mw_train.py", "mode": "ro"}},
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
    assert any("all 1 peer(s) answered" in line for line in tfboot_lines(outcomes[0])), outcomes[0]


def test_worker_with_another_replica_count_fails_at_import(cluster: Cluster) -> None:
    """A Pod rendered for 2 replicas per worker (nvidia.com/gpu x VIRTUAL_SPLIT = 2) on a
    node where it has 1 (no GPU: CPU:0) stops at ``import tensorflow``, naming both."""
    outcome = finish(cluster.start(1, IMPORT_CMD, DIST_REPLICAS_PER_WORKER="2"), 120)
    assert outcome.exit_code != 0, outcome
    assert "DIST_REPLICAS_PER_WORKER" in outcome.stderr, outcome
    assert "1 local replica(s)" in outcome.stderr and "must have 2" in outcome.stderr, outcome


def test_missing_peer_is_named_then_the_worker_exits(cluster: Cluster) -> None:
    """Worker 0 alone: wait lines naming worker 1, then DIST_STARTUP_TIMEOUT ends it."""
    started = time.monotonic()
    outcome = finish(cluster.start(0, TRAIN_CMD, DIST_STARTUP_TIMEOUT="8"), 120)
    assert outcome.exit_code == EXIT_UNREACHABLE, outcome
    assert time.monotonic() - started < 90
    peer = f"{cluster.dns_names(1)[0]}:{cluster.run.env['DIST_PORT']}"
    lines = tfboot_lines(outcome)
    assert any("still waiting for 1 peer(s)" in line and peer in line for line in lines), lines
    assert any("DIST_STARTUP_TIMEOUT=8 reached" in line and peer in line for line in lines), lines
