"""What a PyTorch DataLoader needs of the container, and what is said (``budget.dataloader``),
pure: given the sizes and limits the executor reads as a loader starts. The figures are
those of the real loaders in real containers (``tests/docker/test_container_loader.py``);
the fix for the engine is ``node.shm.give_more``'s, here Docker's."""

from __future__ import annotations

import pytest
from tfboot.budget.dataloader import (
    Batches,
    full_error,
    full_give,
    judge,
    over_quota,
    shown,
)  # fmt: skip
from tfboot.node.shm import MIB, SharedMemory, give_more, size_for

SHM_64 = SharedMemory(64, 64, "tmpfs")
SHM_2G = SharedMemory(2048, 2048, "tmpfs")
BATCHES_30 = Batches(workers=2, prefetch=2, size=30 * MIB)  # 150 MiB with the one in use


def docker(mib: int) -> str:
    return give_more(mib, docker=True)


def test_workers_over_the_cpu_quota_are_said_once_per_quota() -> None:
    verdict = over_quota(2, 1.0, "/sys/fs/cgroup/cpu.max")
    assert verdict is not None and verdict.key == "cpu 1" and verdict.give_mib is None
    assert verdict.said() == (
        "DataLoader: num_workers=2 and the main process are 3 processes on a CPU quota of 1 "
        "(/sys/fs/cgroup/cpu.max): they take turns on it; num_workers=1 fits it (kept as given)"
    )
    assert "num_workers=3 fits it" in over_quota(8, 4.5, "cpu.max").said()
    assert over_quota(3, 4.0, "cpu.max") is None  # 4 processes on 4 CPUs
    assert over_quota(64, None, "") is None  # no quota


def test_batches_over_dev_shm_s_size_name_the_need_and_the_fix() -> None:
    assert BATCHES_30.need == 150 * MIB
    verdict = judge(BATCHES_30, SHM_64, None, None)
    assert verdict is not None and verdict.key == "shm 64" and verdict.give_mib == 192
    assert verdict.said(docker(verdict.give_mib)) == (
        "DataLoader: its 2 worker(s) hold up to 2 x prefetch_factor 2 batches of 30 MiB in "
        "/dev/shm, 150 MiB with the one in use, but /dev/shm 64 MiB (Docker's default size, "
        "a tmpfs of its own), 64 MiB free: docker run --shm-size=192m (Compose: shm_size: "
        "192m); or fewer workers, a lower prefetch_factor or a smaller batch"
    )


def test_batches_over_what_the_memory_limit_leaves_are_said_against_it() -> None:
    """A memory-backed /dev/shm of 2 GiB under a 1 GiB limit: 750 MiB of batches do not fit
    beside the job's 300 MiB."""
    batches = Batches(workers=2, prefetch=2, size=150 * MIB)
    verdict = judge(batches, SHM_2G, 1024, 300)
    assert verdict is not None and verdict.key == "memory 1024" and verdict.give_mib is None
    said = verdict.said()
    assert "batches of 150 MiB in /dev/shm, 750 MiB with the one in use, and its pages count " \
        "against the memory limit of 1024 MiB, of which 300 MiB are in use" in said  # fmt: skip
    assert said.endswith("the OOM killer would end a worker; raise the memory limit by 768 MiB "
                         "with /dev/shm's size; or fewer workers, a lower prefetch_factor or a "
                         "smaller batch")  # fmt: skip


@pytest.mark.parametrize(
    ("shm", "limit", "working"),
    [
        (SHM_2G, 1024, 274),  # 750 + 274 = 1024: fits, just
        (SHM_2G, None, 300),  # no memory limit
        (SHM_2G, 1024, None),  # the working set unread
        (SharedMemory(None, None), 4096, 100),  # no /dev/shm read: the limit alone
    ],
)
def test_batches_that_fit_say_nothing(shm: SharedMemory, limit, working) -> None:
    assert judge(Batches(2, 2, 150 * MIB), shm, limit, working) is None


def test_dev_shm_is_judged_before_the_memory_limit() -> None:
    verdict = judge(Batches(2, 2, 150 * MIB), SHM_64, 1024, 1000)
    assert verdict is not None and verdict.key == "shm 64"


def test_a_full_dev_shm_names_what_was_needed_and_the_size_to_give_it() -> None:
    fix = docker(192)
    assert full_give(2, 2, 30 * MIB, 64) == 192  # 4 batches held, one in use, one failed
    assert full_error(2, 2, 30 * MIB, SHM_64, fix) == (
        "tfboot: /dev/shm is full: 30 MiB more for a batch, but /dev/shm 64 MiB (Docker's "
        "default size, a tmpfs of its own), 64 MiB free; a DataLoader's 2 worker(s) hold up to "
        "2 x prefetch_factor 2 batches there; give it at least 192 MiB: docker run "
        "--shm-size=192m (Compose: shm_size: 192m); or use fewer workers, a lower "
        "prefetch_factor or a smaller batch"
    )
    sent = full_error(2, 2, 30 * MIB, SHM_64, fix, sending=True)
    assert sent.startswith("tfboot: /dev/shm is full: a batch of 30 MiB could not be sent to "
                           "the main process, but /dev/shm 64 MiB")  # fmt: skip


def test_a_worker_dead_of_sigbus_asks_for_twice_dev_shm_s_size() -> None:
    assert full_give(4, 2, None, 512) == 1024
    assert full_give(4, 2, None, None) == 128  # unread: twice the least
    said = full_error(4, 2, None, SharedMemory(512, 0, "tmpfs"), docker(1024))
    assert "is full: a worker died of SIGBUS writing a batch, but /dev/shm 512 MiB" in said
    assert "give it at least 1024 MiB: docker run --shm-size=1g" in said


def test_sizes_are_said_and_rounded_as_every_message_gives_them() -> None:
    assert (shown(4 * MIB), shown(12 * MIB), shown(MIB // 2)) == ("4.0", "12", "0.5")
    assert [size_for(mib) for mib in (0, 1, 64, 64.5, 150, 180)] == [64, 64, 64, 128, 192, 192]


def test_the_fix_is_the_engine_s_where_its_launcher_runs() -> None:
    """A Pod's fix is a memory emptyDir, a Slurm job's the node's /dev/shm; a Slurm node in
    a Pod gets the Pod's; elsewhere no engine has its own (Docker's is said then)."""
    from tfboot.cluster.engines import shm_fix

    pod = shm_fix(512, {"KUBERNETES_SERVICE_HOST": "10.96.0.1"})
    assert pod is not None and "emptyDir with medium: Memory and sizeLimit: 512Mi" in pod
    slurm = shm_fix(512, {"SLURM_JOB_ID": "7"})
    assert slurm is not None and "/dev/shm is the node's on Slurm" in slurm
    assert "--shm-size=512m" in slurm
    assert shm_fix(512, {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "SLURM_JOB_ID": "7"}) == pod
    assert shm_fix(512, {"OMPI_COMM_WORLD_RANK": "0"}) is None
