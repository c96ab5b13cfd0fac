"""Host memory in real containers: ``--memory`` and ``--cpus`` become tf.data's defaults.

The limits are the Docker engine's own cgroup (v1 or v2, whichever the host runs), read by
tfboot inside the container with nothing set. Runs on every Python that has TensorFlow:
3.11 and 3.13 (TF 2.21) and 3.14 (TF 2.22.0rc0).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from container_runs import cpus, run_container

pytestmark = pytest.mark.docker

TFDATA = Path(__file__).resolve().parent.parent / "tfdata"
GIB = 1 << 30


def test_memory_and_cpus_reach_every_consumer(tf_image: str) -> None:
    outcome = run_container(
        tf_image,
        ["python3", "/probe/consumers.py"],
        mounts=[(TFDATA, "/probe")],
        mem_limit="4g",
        memswap_limit="4g",
        timeout=600,
        **cpus(2),
    ).ok()
    seen = json.loads(outcome.stdout.strip().splitlines()[-1])
    for name in ("loop", "fit", "predict", "experimental_distribute_dataset", "tf.function"):
        assert seen[name] and all(o == [GIB, 2, 2] for o in seen[name]), (name, seen)
    assert seen["own options"] == [[GIB, 7, 2]]
    assert "tf.data defaults RAM budget 1024 MiB, CPU budget 2" in outcome.stderr


def test_show_names_the_limit_and_its_file(tf_image: str) -> None:
    outcome = run_container(
        tf_image, ["tfboot", "show", "--json"], mem_limit="600m", memswap_limit="600m"
    ).ok()
    memory = json.loads(outcome.stdout)["memory"]
    assert memory["limit_mib"] == 600, memory
    assert memory["limit_source"].endswith(("memory.max", "memory.limit_in_bytes")), memory
    assert memory["tf_data"]["ram_budget_mib"] == 150


NCCL = """
import json
from tfboot.node.nccl import readiness
print(json.dumps(readiness("2 GPUs are visible").to_dict()))
"""


def test_docker_default_shm_gets_the_nccl_warning(tf_image: str) -> None:
    """``--shm-size=64m`` is Docker's default, made explicit: the real /dev/shm is measured."""
    small = run_container(tf_image, ["python3", "-c", NCCL], shm_size="64m").ok()
    found = json.loads(small.stdout.strip().splitlines()[-1])
    assert found["shm_mib"] == 64
    assert any("/dev/shm is 64 MiB, below 1024 MiB" in w for w in found["warnings"]), found
    doctor = run_container(tf_image, ["tfboot", "doctor", "--json"], shm_size="64m").ok()
    assert json.loads(doctor.stdout.strip().splitlines()[-1])["nccl"]["shm_mib"] == 64
    large = run_container(tf_image, ["python3", "-c", NCCL], shm_size="1g").ok()
    found = json.loads(large.stdout.strip().splitlines()[-1])
    assert found["shm_mib"] == 1024 and not any("shm" in w for w in found["warnings"])
