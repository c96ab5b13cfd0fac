"""``/dev/shm`` as tfboot reads it: the mount's type from mountinfo, and how it is said."""

from __future__ import annotations

import os

from tfboot.node.shm import (
    MIB,
    PLAUSIBLE_MIB,
    SharedMemory,
    memory_volume,
    mount_type,
    read_shm,
    size_under,
)

# /proc/self/mountinfo lines as Docker (its own tmpfs, named shm), a Kubernetes emptyDir with
# medium: Memory (mounted over the runtime's), and a host bind mount give them.
DOCKER = "1067 1062 0:90 / /dev/shm rw,nosuid,nodev,noexec,relatime - tmpfs shm rw,size=65536k\n"
EMPTYDIR = DOCKER + (
    "1080 1062 0:95 / /dev/shm rw,relatime master:1 - tmpfs tmpfs rw,size=2097152k\n"
)
BOUND = "1067 1062 8:1 /var/lib/x /dev/shm rw,relatime shared:2 - ext4 /dev/sda1 rw\n"


def test_the_last_mount_at_dev_shm_is_its_type() -> None:
    assert mount_type(DOCKER) == "tmpfs"
    assert mount_type(EMPTYDIR) == "tmpfs"
    assert mount_type(BOUND) == "ext4"
    assert mount_type("25 24 0:23 / /dev rw - devtmpfs udev rw\n") is None
    assert mount_type("garbage\n\n1 2 3\n") is None


def test_how_it_is_said() -> None:
    docker = SharedMemory(64, 63, "tmpfs")
    assert docker.describe() == (
        "/dev/shm 64 MiB (Docker's default size, a tmpfs of its own), 63 MiB free"
    )
    assert docker.small and not SharedMemory(PLAUSIBLE_MIB, 1, "tmpfs").small
    assert SharedMemory(512, 500, None).describe() == (
        "/dev/shm 512 MiB (not a mount of its own), 500 MiB free"
    )
    assert (
        SharedMemory(None, None).describe() == "/dev/shm absent"
        and not SharedMemory(None, None).small
    )


def test_the_size_suggested_under_a_limit_is_more_than_the_runtime_s_or_none() -> None:
    """A quarter of the limit in whole 64 MiB; None where that is no more than 64 MiB."""
    sizes = {mib: size_under(mib * MIB) for mib in (64, 256, 511, 512, 600, 4096, 8192)}
    assert sizes == {64: None, 256: None, 511: None, 512: 128, 600: 128, 4096: 1024, 8192: 2048}


def test_the_kubernetes_fix_is_written_once() -> None:
    assert memory_volume("1Gi") == "an emptyDir with medium: Memory and sizeLimit: 1Gi at /dev/shm"
    assert memory_volume() == "an emptyDir with medium: Memory at /dev/shm"


def test_this_machine_s_is_read_as_statvfs_gives_it() -> None:
    found = read_shm()
    if not os.path.isdir("/dev/shm"):
        assert found.size_mib is None
        return
    stat = os.statvfs("/dev/shm")
    assert found.size_mib == stat.f_blocks * stat.f_frsize >> 20


def test_a_root_without_dev_shm_reads_as_absent(tmp_path) -> None:
    assert read_shm(str(tmp_path)) == SharedMemory(None, None)


def test_the_usage_report_gives_dev_shm_s_peak_and_its_size(tmp_path) -> None:
    """A real DataLoader with 2 forked workers and 12 MiB batches in a process tfboot
    configured (CPU_THREADS: the report covers configured processes): the record holds
    /dev/shm's peak beside the memory peak, and the suggestion a /dev/shm size with it."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    from support import scenario_env

    usage = tmp_path / "usage.json"
    job = Path(__file__).parent / "docker" / "loader" / "loader_job.py"
    run = subprocess.run([sys.executable, str(job), "4", "3", "2", "fork"],
                         env=scenario_env({"TFBOOT_USAGE_FILE": str(usage), "CPU_THREADS": "2"}),
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    record = json.loads(usage.read_text())
    assert 12 <= record["shm"]["peak_mib"] <= record["host_memory"]["peak_mib"], record["shm"]
    size = record["suggest"]["shm"]["size_mib"]
    assert size % 64 == 0 and size >= record["shm"]["peak_mib"] * 1.15, record["suggest"]
    used = next(x for x in run.stderr.splitlines() if x.startswith("tfboot: used:"))
    assert f"/dev/shm peak {record['shm']['peak_mib']:g} MiB of " in used, used
    assert f"/dev/shm {size}Mi (within limits.memory)" in used, used


IN_WORKER = """
import json, sys, torch
from torch.utils.data import DataLoader, Dataset
from tfboot.executor.loader import in_worker

class Seen(Dataset):
    def __len__(self): return 2
    def __getitem__(self, index): return int(in_worker())

if __name__ == "__main__":
    loader = DataLoader(Seen(), batch_size=1, num_workers=2, multiprocessing_context=sys.argv[1])
    print(json.dumps({"main": in_worker(), "workers": sorted(int(b) for b in loader)}))
"""


def test_a_dataloader_worker_knows_it_is_one(tmp_path) -> None:
    """What keeps the main process's GPU cap out of a worker that starts CUDA: a real
    worker (fork, spawn) sees itself as one, the main process does not."""
    import json
    import subprocess
    import sys

    from support import scenario_env

    script = tmp_path / "in_worker.py"
    script.write_text(IN_WORKER)
    for context in ("fork", "spawn"):
        done = subprocess.run([sys.executable, str(script), context], env=scenario_env({}),
                              capture_output=True, text=True, timeout=300)  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        assert json.loads(done.stdout.splitlines()[-1]) == {"main": False, "workers": [1, 1]}
