"""``/dev/shm``, where PyTorch's DataLoader workers pass their batches: its size, what is free,
and what kind of mount it is.

Docker gives a container a tmpfs of 64 MiB there unless ``--shm-size``; Kubernetes has no
such setting, and the usual cure, an ``emptyDir`` with ``medium: Memory``, is a tmpfs too.
A tmpfs's pages are charged to the memory cgroup of the process that first writes them, so
whatever the workers hold there counts against the container's memory limit. The size and
free space come from ``statvfs``; the mount (a tmpfs of its own, its ``size=``) from
``/proc/self/mountinfo``. Nothing here raises: an unreadable fact is None.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

PATH = "/dev/shm"
DOCKER_DEFAULT_MIB = 64  # Docker's (and containerd's) size without --shm-size
# A loader of 4 workers, prefetch_factor 2 and batches of 32 MiB holds 256 MiB there (a
# batch of 32 images of 3 x 224 x 224 float32 is 18 MiB): less is said at `import torch`.
PLAUSIBLE_MIB = 256
ROUND_MIB = 64  # a size tfboot names is a whole multiple of this
MIB = 1 << 20


@dataclass(frozen=True)
class SharedMemory:
    """What ``/dev/shm`` holds; None where it could not be read."""

    size_mib: int | None
    free_mib: int | None
    fstype: str | None = None  # its mount's file system type; None: no mount of its own

    @property
    def small(self) -> bool:
        return self.size_mib is not None and self.size_mib < PLAUSIBLE_MIB

    def describe(self) -> str:
        """``/dev/shm 64 MiB (Docker's default size, a tmpfs of its own), 63 MiB free``."""
        if self.size_mib is None:
            return f"{PATH} absent"
        kinds = []
        if self.size_mib == DOCKER_DEFAULT_MIB:
            kinds.append("Docker's default size")
        if self.fstype is None:
            kinds.append("not a mount of its own")
        else:
            kinds.append(
                "a tmpfs of its own" if self.fstype == "tmpfs" else f"a {self.fstype} mount"
            )
        return f"{PATH} {self.size_mib} MiB ({', '.join(kinds)}), {self.free_mib} MiB free"


def mount_type(mountinfo: str, point: str = PATH) -> str | None:
    """The file system type of the last mount at ``point`` in ``mountinfo``'s text (the
    format of ``/proc/self/mountinfo``: fields, ``-``, type, source, options), or None."""
    found = None
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) > 4 and fields[4] == point and "-" in fields[5:]:
            after = fields[fields.index("-", 5) + 1 :]
            found = after[0] if after else None
    return found


def size_for(mib: float) -> int:
    """The size, in MiB, tfboot names for a need of ``mib`` MiB there: rounded up to whole
    ``ROUND_MIB``, never less than that."""
    return max(ROUND_MIB, math.ceil(mib / ROUND_MIB) * ROUND_MIB)


def size_under(limit: float) -> int | None:
    """The ``/dev/shm`` size, in MiB, tfboot suggests under a memory limit of ``limit`` bytes
    (its pages count against it): a quarter of it, in whole 64 MiB; None where that is not
    more than the 64 MiB a container has without one (a limit under 512 MiB): then there is
    nothing to gain within the limit."""
    size = int(limit / 4 / MIB / ROUND_MIB) * ROUND_MIB
    return size if size > DOCKER_DEFAULT_MIB else None


def memory_volume(size: str | None = None) -> str:
    """How to give a Kubernetes container a ``/dev/shm`` of its own, for a message: ``an
    emptyDir with medium: Memory and sizeLimit: 1Gi at /dev/shm`` (``size``: a quantity;
    None: no size named)."""
    sized = f" and sizeLimit: {size}" if size else ""
    return f"an emptyDir with medium: Memory{sized} at {PATH}"


def docker_flag(mib: int) -> str:
    """``docker run``'s option that gives ``/dev/shm`` ``mib`` MiB (1 GiB as ``1g``)."""
    return "--shm-size=1g" if mib == 1024 else f"--shm-size={mib}m"


def give_more(mib: int, docker: bool) -> str:
    """How to give ``/dev/shm`` ``mib`` MiB outside an engine that says its own
    (``cluster.engines.shm_fix``; ``docker``: the process is in a Docker container)."""
    flag = docker_flag(mib)
    if docker:
        return f"docker run {flag} (Compose: shm_size: {flag.partition('=')[2]})"
    return f"docker run {flag}; on Kubernetes {memory_volume(f'{mib}Mi')}"


def in_docker() -> bool:
    """This process runs in a Docker container (Docker's ``/.dockerenv``)."""
    return os.path.exists("/.dockerenv")


def _stat(path: str) -> os.statvfs_result | None:
    try:
        return os.statvfs(path)
    except OSError:
        return None


def size_mib(path: str = PATH) -> int | None:
    """``path``'s file system's size in MiB (None: unreadable)."""
    found = _stat(path)
    return None if found is None else found.f_blocks * found.f_frsize // MIB


def used_bytes(path: str = PATH) -> int | None:
    """What ``path``'s file system holds now, in bytes (None: unreadable)."""
    found = _stat(path)
    return None if found is None else (found.f_blocks - found.f_bfree) * found.f_frsize


def read_shm(root: str = "/") -> SharedMemory:
    """``/dev/shm`` under ``root`` (``/``: this process's own)."""
    found = _stat(os.path.join(root, PATH.lstrip("/")))
    if found is None:
        return SharedMemory(None, None)
    size = found.f_blocks * found.f_frsize // MIB
    free = found.f_bavail * found.f_frsize // MIB
    try:
        with open(os.path.join(root, "proc/self/mountinfo"), encoding="utf-8") as text:
            fstype = mount_type(text.read(1 << 20))
    except (OSError, UnicodeDecodeError):
        fstype = None
    return SharedMemory(size, free, fstype)
