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


# Freed elements back to the kernel (budget.malloc): a tf.data pipeline of large elements in
# a container with a real memory limit, as the kernel's cgroup counts it. With glibc's
# dynamic mmap threshold, the elements tf.data frees stay in the process; with the threshold
# tfboot fixes, they are unmapped. Both consumer rhythms, two element sizes, two limits.
CASES = {
    "bursty 24 MiB elements, 700 MiB": ("24", "60", "10", "1.5", "700m"),
    "steady 8 MiB elements, 700 MiB": ("8", "150", "0", "0", "700m"),
    "bursty 16 MiB elements, 600 MiB": ("16", "60", "10", "1.5", "600m"),
}
MARGIN = 0.75  # the working set's peak stays within three quarters of the limit


def bursty(image: str, case: str, env: dict[str, str]) -> tuple[int, dict | None, str]:
    *args, memory = CASES[case]
    outcome = run_container(
        image,
        ["python3", "/probe/bursty.py", *args],
        env,
        mounts=[(TFDATA, "/probe")],
        mem_limit=memory,
        memswap_limit=memory,
        timeout=600,
        **cpus(2),
    )
    found = outcome.json() if outcome.exit_code == 0 else None
    return outcome.exit_code, found, outcome.stderr


@pytest.mark.parametrize("case", list(CASES))
def test_freed_elements_go_back_to_the_kernel(tfboot_image: str, case: str) -> None:
    code, found, stderr = bursty(tfboot_image, case, {})
    assert code == 0 and found is not None, stderr[-3000:]
    assert found["working_set_mib"] <= MARGIN * found["limit_mib"], found
    assert "freed host memory returned to the kernel: glibc 2.36 mallopt M_MMAP_THRESHOLD" in stderr
    # The same budgets with glibc's malloc as it is: killed, or a higher peak.
    code, kept, _ = bursty(tfboot_image, case, {"HOST_MEMORY_RELEASE": "false"})
    assert code != 0 or kept is None or kept["working_set_mib"] > found["working_set_mib"], kept


def test_the_users_allocator_choice_is_left_alone(tfboot_image: str) -> None:
    outcome = run_container(
        tfboot_image,
        ["python3", "-c", "import tensorflow"],
        {"MALLOC_ARENA_MAX": "2"},
        mem_limit="1g",
        memswap_limit="1g",
    ).ok()
    assert "malloc left to the user's MALLOC_ARENA_MAX=2" in outcome.stderr
