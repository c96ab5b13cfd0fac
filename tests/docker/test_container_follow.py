"""The CPU quota moved while the job runs, by ``docker update --cpus`` (cgroup v1, the Docker
engine's): PyTorch's intra-op threads follow it down and up; TensorFlow's and JAX's pools
cannot, and the ``used:`` line says so. PyTorch and JAX come from the test environment's
site-packages, mounted behind the image's own."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from container_runs import MOUNTED_SITE, QUIET_TF, SITE, image_site

import docker

pytestmark = pytest.mark.docker

PROBE = Path(__file__).resolve().parent / "follow"


def _wait_for(container, word: str, count: int = 1, seconds: float = 180) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        container.reload()
        if container.logs(stderr=False).decode().split().count(word) >= count:
            return
        if container.status == "exited":
            break
        time.sleep(0.2)
    pytest.fail(f"no {word!r} from the probe:\n{container.logs().decode()[-4000:]}")


def moved(image: str, framework: str) -> tuple[dict, str]:
    """The probe under ``--cpus=2``, moved to 1 and back to 2; its record and stderr."""
    container = docker.from_env().containers.run(
        image, ["python3", "/probe/follow_probe.py", framework], detach=True,
        environment={**QUIET_TF, "PYTHONPATH": f"{image_site(image)}:{MOUNTED_SITE}"},
        volumes={str(PROBE): {"bind": "/probe", "mode": "ro"},
                 str(SITE): {"bind": MOUNTED_SITE, "mode": "ro"}},
        cpu_period=100000, cpu_quota=200000, mem_limit="4g",
    )  # fmt: skip
    try:
        _wait_for(container, "started")
        container.update(cpu_quota=100000, cpu_period=100000)
        _wait_for(container, "moved")
        container.update(cpu_quota=200000, cpu_period=100000)
        assert int(container.wait(timeout=180)["StatusCode"]) == 0, container.logs().decode()
        return (json.loads(container.logs(stderr=False).decode().strip().splitlines()[-1]),
                container.logs(stdout=False).decode())  # fmt: skip
    finally:
        container.remove(force=True)


def test_pytorch_follows_a_live_resize_down_and_up(tfboot_image: str) -> None:
    found, stderr = moved(tfboot_image, "torch")
    assert found["threads"] == [2, 1, 2], (found, stderr[-3000:])
    assert "rounded up; followed while the job runs)" in stderr


@pytest.mark.parametrize(("framework", "name"), [("tensorflow", "TensorFlow"), ("jax", "JAX")])
def test_pools_that_cannot_follow_are_said(tfboot_image: str, framework: str, name: str) -> None:
    """Moved to 1 CPU and back to 2: the pools sized for 2 fit again at the end, so the line
    pairs its count with the quota it was sized for; moved to 1 alone, it says what kept 2."""
    container = docker.from_env().containers.run(
        tfboot_image,
        ["python3", "-c", f"import {framework}, time; print('started', flush=True); time.sleep(4)"],
        detach=True, environment={**QUIET_TF, "PYTHONPATH": f"{image_site(tfboot_image)}:"
                                  f"{MOUNTED_SITE}"},
        volumes={str(SITE): {"bind": MOUNTED_SITE, "mode": "ro"}}, cpu_period=100000,
        cpu_quota=200000,
        mem_limit="4g",
    )  # fmt: skip
    try:
        _wait_for(container, "started")  # configured at the import, under 2 CPUs
        container.update(cpu_quota=100000, cpu_period=100000)
        assert int(container.wait(timeout=180)["StatusCode"]) == 0, container.logs().decode()
        used = next(x for x in container.logs(stdout=False).decode().splitlines()
                    if "tfboot: used:" in x)  # fmt: skip
    finally:
        container.remove(force=True)
    assert "the CPU quota moved from 2 to 1 at " in used, used
    assert f"{name}'s thread pools kept 2 thread(s), sized for the quota at the import; a " \
        "restart applies the new one" in used, used  # fmt: skip
