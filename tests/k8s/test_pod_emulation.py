"""Each overlay's Pod, emulated on the Docker engine: what tfboot applies matches the manifest.

No cluster can run here, so the container of each rendered Pod template runs as the kubelet
would start it, on a node without a GPU: the same env (``resourceFieldRef`` resolved the
kubelet's way, the amount divided by the divisor, rounded up; plus the variables the GPU
device plugin adds), the same CPU quota (CFS period 100 ms, quota from limits.cpu) and
memory limit, and the same security context (user, read-only root with the emptyDir
volumes as tmpfs, capabilities dropped, no new privileges, the runtime's default seccomp
profile). Inside, ``tfboot doctor --json`` must report the threads limits.cpu gives, the
split, and, for GPU settings on this GPU-less node, what REQUIRE_GPU dictates; and
``tfboot.resolve()`` the cap the manifest sets.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from container_runs import DOCTOR_CMD, QUIET_TF, Outcome
from kustomize import OVERLAYS, copy_k8s, documents, render_text, set_literal
from testcontainers.core.container import DockerContainer
from tfboot.budget.caps import with_nccl
from tfboot.frameworks import HEADROOMS
from tfboot.manifests import gpu_grant, quantity

pytestmark = [pytest.mark.docker, pytest.mark.k8s]

CFS_PERIOD_US = 100_000
GPU_ONLY = ("VISIBLE_GPU", "MEMORY_LIMIT_MB", "MEMORY_GROWTH")
RESOLVE_CMD = [
    "python3", "-c",
    "import json, tfboot; s = tfboot.resolve(); print(json.dumps({'cap': s.memory_limit_mb, "
    "'split': s.virtual_split, 'threads': s.cpu_threads}))",
]  # fmt: skip


@dataclass(frozen=True)
class PodRun:
    """How the kubelet would start one container: its env and the engine's settings."""

    env: dict[str, str]
    docker: dict[str, Any]
    limits: dict[str, Any]


def downward(containers: list[dict[str, Any]], own: str, ref: dict[str, Any]) -> str:
    """The kubelet's value for a ``resourceFieldRef``: amount / divisor, rounded up."""
    kind, _, name = ref["resource"].partition(".")
    target = next(c for c in containers if c["name"] == ref.get("containerName", own))
    amount = quantity(target["resources"][kind][name])
    divisor = quantity(ref.get("divisor", "1"))
    assert amount is not None and divisor, ref
    return str(math.ceil(amount / divisor))


def kubelet_env(pod: dict[str, Any], container: dict[str, Any]) -> dict[str, str]:
    env: dict[str, str] = {}
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = item["value"]
        else:
            ref = item["valueFrom"]["resourceFieldRef"]
            env[item["name"]] = downward(pod["containers"], container["name"], ref)
    env.update(gpu_grant(container["resources"]["limits"]).plugin_env)
    return env


def engine_settings(pod: dict[str, Any], container: dict[str, Any]) -> dict[str, Any]:
    """Docker API settings equal to the Pod's limits and security context."""
    limits = container["resources"]["limits"]
    own, pod_sc = container["securityContext"], pod["securityContext"]
    empty_dirs = {v["name"] for v in pod.get("volumes", []) if "emptyDir" in v}
    tmpfs = [m["mountPath"] for m in container["volumeMounts"] if m["name"] in empty_dirs]
    millicores = quantity(limits["cpu"]) * 1000
    return {
        "cpu_period": CFS_PERIOD_US,
        "cpu_quota": max(1000, math.ceil(millicores * CFS_PERIOD_US / 1000)),
        "mem_limit": int(quantity(limits["memory"])),
        "user": f"{own.get('runAsUser', pod_sc['runAsUser'])}:"
        f"{own.get('runAsGroup', pod_sc['runAsGroup'])}",
        "read_only": own["readOnlyRootFilesystem"],
        "tmpfs": tmpfs,
        "cap_drop": own["capabilities"]["drop"],
        "security_opt": [] if own["allowPrivilegeEscalation"] else ["no-new-privileges:true"],
    }


def pod_run(docs: list[dict[str, Any]]) -> PodRun:
    (job,) = [doc for doc in docs if doc["kind"] == "Job"]
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    return PodRun(
        kubelet_env(pod, container),
        engine_settings(pod, container),
        container["resources"]["limits"],
    )


def start(image: str, run: PodRun, command: list[str]) -> Outcome:
    """Run ``command`` in a container started as the kubelet would start this Pod's.

    Like ``container_runs.run_container``, plus tmpfs mounts for the emptyDir volumes.
    """
    settings = dict(run.docker)
    container = DockerContainer(image).with_command(command)
    for path in settings.pop("tmpfs"):
        container.with_tmpfs_mount(path)
    for key, value in {**QUIET_TF, **run.env}.items():
        container.with_env(key, value)
    container.with_kwargs(**settings)
    with container:
        status = container.get_wrapped_container().wait(timeout=300)
        stdout, stderr = container.get_logs()
    return Outcome(int(status["StatusCode"]), stdout.decode(), stderr.decode())


def expected_cap(run: PodRun) -> int | None:
    """MEMORY_LIMIT_MB as the manifest sets it: a number, or under auto the plugin's share
    minus TensorFlow's headroom (NCCL's too with several GPUs)."""
    value = run.env.get("MEMORY_LIMIT_MB")
    if value is None:
        return None
    if value != "auto":
        return int(value)
    grant = gpu_grant(run.limits)
    assert grant.share_mib is not None, "auto needs a share"
    nccl = "several GPUs" if grant.count > 1 else ""
    return grant.share_mib - with_nccl(HEADROOMS["tensorflow"], nccl).mib


def expect_doctor(run: PodRun, outcome: Outcome) -> None:
    """What doctor must say on a GPU-less node for this Pod's env and limits."""
    report = outcome.json()
    warnings = [line for line in outcome.stderr.splitlines() if line.startswith("tfboot: warning")]
    if run.env.get("REQUIRE_GPU", "").lower() == "true":
        assert outcome.exit_code == 1, outcome
        assert "REQUIRE_GPU" in report["error"] and "a GPU is required" in report["error"]
        return
    assert outcome.exit_code == 0, outcome
    assert report["error"] is None and report["applied"], report
    gpu_only = [name for name in GPU_ONLY if name in run.env]
    if gpu_only:
        assert len(warnings) == 1 and "no GPU found" in warnings[0], outcome
        assert all(name in warnings[0] for name in gpu_only), warnings
        assert report["warnings"] == [warnings[0].split("warning: ", 1)[1]]
    else:
        assert warnings == [] and report["warnings"] == [], outcome
    split = int(run.env.get("VIRTUAL_SPLIT", "1"))
    assert len(report["logical_devices"]["CPU"]) == split, report
    cpus = quantity(run.limits["cpu"])
    assert report["cpu"]["quota"] == pytest.approx(float(cpus))
    threads = run.env.get("CPU_THREADS", "auto")
    expected = math.ceil(cpus) if threads == "auto" else int(threads)
    expected = min(expected, report["cpu"]["schedulable"]) if threads == "auto" else expected
    assert report["threads"]["intra_op"] == expected, report["threads"]
    assert report["threads"]["intra_op_source"] == "tf.config.threading"


def emulate(image: str, docs: list[dict[str, Any]]) -> PodRun:
    run = pod_run(docs)
    expect_doctor(run, start(image, run, DOCTOR_CMD))
    resolved = start(image, run, RESOLVE_CMD).ok().json()
    assert resolved["cap"] == expected_cap(run), (resolved, run.env)
    assert resolved["split"] == int(run.env.get("VIRTUAL_SPLIT", "1"))
    return run


# multi-worker's Pods need their peers: test_multiworker_pods.py runs them together.
@pytest.mark.parametrize("overlay", [name for name in OVERLAYS if name != "multi-worker"])
def test_overlay_pod_on_a_node_without_gpu(
    tfboot_image: str, rendered_docs: dict[str, list[dict[str, Any]]], overlay: str
) -> None:
    emulate(tfboot_image, rendered_docs[overlay])


def test_cpu_literal_drives_threads(tfboot_image: str, kubectl: str, tmp_path: Path) -> None:
    """cpu-only with CPUS=1: one literal, the quota, and the thread pools all follow it."""
    k8s = copy_k8s(tmp_path)
    set_literal(k8s / "overlays" / "cpu-only" / "runner.env", "CPUS", "1")
    run = emulate(tfboot_image, documents(render_text(kubectl, k8s / "overlays" / "cpu-only")))
    assert run.docker["cpu_quota"] == CFS_PERIOD_US


def test_downward_api_cpu_threads(tfboot_image: str, kubectl: str, tmp_path: Path) -> None:
    """The Downward API component: limits.cpu 500m with divisor 1 gives CPU_THREADS=1."""
    k8s = copy_k8s(tmp_path)
    set_literal(k8s / "overlays" / "cpu-only" / "runner.env", "CPUS", "500m")
    overlay = k8s / "overlays" / "downward"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        "resources: [../cpu-only]\ncomponents: [../../components/cpu-threads-from-limit]\n"
    )
    run = pod_run(documents(render_text(kubectl, overlay)))
    assert run.env["CPU_THREADS"] == "1" and run.env["CPU_LIMIT_MILLICORES"] == "500"
    outcome = start(tfboot_image, run, DOCTOR_CMD)
    expect_doctor(run, outcome)
    report = outcome.json()
    assert report["settings"]["CPU_THREADS"] == {"value": "1", "source": "env"}
    assert report["threads"]["intra_op"] == report["threads"]["inter_op"] == 1
