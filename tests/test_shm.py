"""``/dev/shm`` as tfboot reads it: the mount's type from mountinfo, and how it is said."""

from __future__ import annotations

import os

from tfboot.node.shm import PLAUSIBLE_MIB, SharedMemory, mount_type, read_shm

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


def test_this_machine_s_is_read_as_statvfs_gives_it() -> None:
    found = read_shm()
    if not os.path.isdir("/dev/shm"):
        assert found.size_mib is None
        return
    stat = os.statvfs("/dev/shm")
    assert found.size_mib == stat.f_blocks * stat.f_frsize >> 20


def test_a_root_without_dev_shm_reads_as_absent(tmp_path) -> None:
    assert read_shm(str(tmp_path)) == SharedMemory(None, None)
