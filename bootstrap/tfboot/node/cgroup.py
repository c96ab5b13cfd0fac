"""The container's limits from its cgroup: the CPU quota and the memory limit.

CPU: cgroup v2 ``cpu.max`` or v1 ``cpu.cfs_quota_us``. Memory: v2 ``memory.max`` or v1
``memory.limit_in_bytes``.

The cgroup directory is found through ``/proc/self/cgroup`` and ``/proc/self/mountinfo``
(a container sees its own cgroup as the mount's root, so paths are resolved against the
mount's root, not joined naively). Every level from the process's cgroup up to the mount
point is read, and the smallest limit wins. ``root`` points the reader at a fake tree.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass

from ..values import HUGE, digits


@dataclass(frozen=True)
class Quota:
    """A CPU quota in CPUs (1.5 = one and a half CPUs), the file it came from, and whose it
    is where not the process's own cgroup's (``shared``)."""

    cpus: float
    source: str
    shared: str = ""


@dataclass(frozen=True)
class MemoryLimit:
    """A memory limit in bytes, the file it came from, and whose it is where not the
    process's own cgroup's (``shared``)."""

    bytes: int
    source: str
    shared: str = ""

    @property
    def mib(self) -> int:
        return self.bytes // (1 << 20)


# cgroup v1 writes "no limit" as LONG_MAX rounded down to a page (9223372036854771712).
# Any limit of 10**18 bytes (888 PiB) or more reads as none.
UNLIMITED_BYTES = HUGE


@dataclass(frozen=True)
class _Mount:
    root: str
    mountpoint: str
    version: int
    controllers: frozenset[str]


class CgroupError(Exception):
    """A cgroup or proc file cannot be read, or does not say what it should.

    Messages name the file and, for a malformed one, the line; never its content.
    """


class Missing(CgroupError):
    """The file does not exist (no such cgroup level, controller or fake tree)."""


# A kernel file larger than this is not a cgroup or proc file tfboot knows; mountinfo on a
# node with thousands of mounts stays far below it.
MAX_BYTES = 4 * 1024 * 1024
_OCTAL = re.compile(r"\\([0-7]{3})")


def shown(path: str) -> str:
    """A path read from a kernel file, printable: undecodable bytes as backslash escapes."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def read_text(root: str, path: str) -> str:
    """A kernel file's text: the one reader of cgroup and proc files.

    Kernel files are bytes: they are decoded as file names are (undecodable bytes kept as
    surrogates, so a path read here opens the same file). Raises only ``CgroupError``
    (``Missing`` when the file does not exist).
    """
    full = os.path.join(root, path.lstrip("/"))
    try:
        with open(full, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except (FileNotFoundError, NotADirectoryError):
        raise Missing(f"{shown(path)}: no such file") from None
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "strerror", None) or type(exc).__name__
        raise CgroupError(f"{shown(path)}: cannot be read ({reason})") from None
    if len(data) > MAX_BYTES:
        raise CgroupError(f"{shown(path)}: larger than {MAX_BYTES} bytes")
    return os.fsdecode(data)


def _unescape(field: str) -> str:
    """A mountinfo path: the kernel writes space, tab, newline and backslash as octal."""
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), field)


def _memberships(root: str) -> list[tuple[int, frozenset[str], str]]:
    """``/proc/self/cgroup`` lines as (hierarchy id, controllers, path)."""
    found = []
    for number, text in enumerate(read_text(root, "/proc/self/cgroup").splitlines(), 1):
        parts = text.split(":", 2)
        hierarchy = digits(parts[0]) if len(parts) == 3 else None
        if hierarchy is None:
            raise CgroupError(f"/proc/self/cgroup: line {number} is not HIERARCHY:CONTROLLERS:PATH")
        found.append((hierarchy, frozenset(filter(None, parts[1].split(","))), parts[2]))
    return found


def _mounts(root: str) -> list[_Mount]:
    """cgroup and cgroup2 mounts from ``/proc/self/mountinfo``."""
    mounts = []
    for text in read_text(root, "/proc/self/mountinfo").splitlines():
        left, sep, right = text.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or len(tail) < 3:
            continue
        fstype, superoptions = tail[0], tail[2]
        mount_root, mountpoint = _unescape(fields[3]), _unescape(fields[4])
        if fstype == "cgroup2":
            mounts.append(_Mount(mount_root, mountpoint, 2, frozenset()))
        elif fstype == "cgroup":
            mounts.append(_Mount(mount_root, mountpoint, 1, frozenset(superoptions.split(","))))
    return mounts


def _directories(mount: _Mount, cgroup_path: str) -> list[str]:
    """The cgroup's directory and its parents up to the mount point, leaf first."""
    rel = os.path.relpath(cgroup_path, mount.root) if cgroup_path.startswith(mount.root) else "."
    if rel.startswith(".."):
        rel = "."
    parts = [] if rel == "." else rel.split("/")
    return [os.path.join(mount.mountpoint, *parts[:depth]) for depth in range(len(parts), -1, -1)]


def _v2_quota(root: str, directory: str) -> float | None:
    path = os.path.join(directory, "cpu.max")
    text = read_text(root, path)
    return quota_cpus(path, text, text)


def _v1_quota(root: str, directory: str) -> float | None:
    quota_path = os.path.join(directory, "cpu.cfs_quota_us")
    quota = read_text(root, quota_path)
    period = read_text(root, os.path.join(directory, "cpu.cfs_period_us"))
    return quota_cpus(quota_path, quota, period)


def _ratio(path: str, quota: str, period: str, unlimited: str) -> float | None:
    if quota == unlimited:
        return None
    q, p = digits(quota), digits(period)
    if not q or not p:
        raise CgroupError(f"{shown(path)}: quota and period must both be positive integers")
    return q / p


def cpu_quota(root: str = "/") -> Quota | None:
    """The tightest CPU quota on the process's cgroup path, or None if there is none.

    Raises ``CgroupError`` (only) when a cgroup file is present but unreadable or malformed.
    """
    found = _tightest_limit(root, "cpu", _v1_quota, "cpu.cfs_quota_us", _v2_quota, "cpu.max")
    return None if found is None else Quota(*found)


def memory_limit(root: str = "/") -> MemoryLimit | None:
    """The tightest memory limit on the process's cgroup path in bytes, or None if none.

    cgroup v2 ``memory.max``, or ``memory.high`` where it is lower (systemd's
    ``MemoryHigh=``, some platforms: past it the kernel throttles and reclaims hard, so it
    is the limit a job lives under); v1 ``memory.limit_in_bytes``. v1 writes "no limit" as a
    huge number (9223372036854771712, ``LONG_MAX`` rounded down to a page); any limit of
    ``UNLIMITED_BYTES`` or more, or at or above the host's memory (``MemTotal``), is none.
    Swap (``memory.swap.max``, ``memory.memsw.limit_in_bytes``) is not counted: the budget
    is RAM.
    """
    found = _tightest_limit(
        root, "memory", _v1_memory, "memory.limit_in_bytes", _v2_memory, "memory.max"
    )
    high = _tightest_limit(root, "memory", _no_v1, "-", _v2_high, "memory.high")
    if high is not None and (found is None or high[0] < found[0]):
        found = high
    if found is None:
        return None
    total = _mem_total(root)
    if total is not None and found[0] >= total:
        return None
    return MemoryLimit(int(found[0]), found[1], found[2])


def _v2_memory(root: str, directory: str) -> float | None:
    path = os.path.join(directory, "memory.max")
    return memory_bytes(path, read_text(root, path))


def _v2_high(root: str, directory: str) -> float | None:
    path = os.path.join(directory, "memory.high")
    return memory_bytes(path, read_text(root, path))


def _no_v1(_root: str, _directory: str) -> None:
    """cgroup v1 has no ``memory.high``."""


def _v1_memory(root: str, directory: str) -> float | None:
    path = os.path.join(directory, "memory.limit_in_bytes")
    return memory_bytes(path, read_text(root, path))


def _bytes(path: str, text: str) -> int:
    number = digits(text)
    if not number:
        raise CgroupError(f"{shown(path)}: expected 'max' or a positive number of bytes")
    return number


def host_memory(root: str = "/") -> int | None:
    """The host's memory (``MemTotal``) in bytes; None when it cannot be read."""
    return _mem_total(root)


def _mem_total(root: str) -> int | None:
    """``MemTotal`` from ``/proc/meminfo`` in bytes; None when it cannot be read."""
    try:
        text = read_text(root, "/proc/meminfo")
    except CgroupError:
        return None
    for line in text.splitlines():
        name, _, value = line.partition(":")
        fields = value.split()
        if name == "MemTotal" and len(fields) == 2 and fields[1] == "kB":
            kib = digits(fields[0])
            return None if kib is None else kib * 1024
    return None


def _find(root: str, controller: str) -> tuple[_Mount, str] | None:
    """The mount holding ``controller`` for this process and the process's cgroup path in it.

    cgroup v1 with the controller (also on hybrid hosts) decides; else the v2 unified tree.
    """
    try:
        memberships = _memberships(root)
        mounts = _mounts(root)
    except Missing:
        return None
    for hierarchy, controllers, path in memberships:
        if hierarchy != 0 and controller in controllers:
            mount = next(
                (m for m in mounts if m.version == 1 and controller in m.controllers), None
            )
            if mount is not None:
                return mount, path
    for hierarchy, _controllers, path in memberships:
        if hierarchy == 0:
            mount = next((m for m in mounts if m.version == 2), None)
            if mount is not None:
                return mount, path
    return None


def leaf(root: str, controller: str) -> tuple[int, str] | None:
    """The cgroup version and the directory of the process's own cgroup for ``controller``
    (the container's, where its usage files are); None without one."""
    found = _find(root, controller)
    if found is None:
        return None
    mount, path = found
    return mount.version, _directories(mount, path)[0]


def memory_limit_files(root: str) -> list[str]:
    """Every memory limit file on the process's cgroup path, leaf first, as the kernel names
    them (v2: each level's ``memory.max`` and ``memory.high``; v1: ``memory.limit_in_bytes``);
    [] without a memory cgroup. Raises ``CgroupError`` (only) when ``/proc/self/cgroup`` is
    malformed."""
    found = _find(root, "memory")
    if found is None:
        return []
    mount, path = found
    names = ("memory.limit_in_bytes",) if mount.version == 1 else ("memory.max", "memory.high")
    return [os.path.join(d, name) for d in _directories(mount, path) for name in names]


def cpu_quota_files(root: str) -> list[tuple[str, str]]:
    """Every CPU quota file on the process's cgroup path, leaf first, as the kernel names
    them: (quota, period) pairs (v2: each level's ``cpu.max`` twice, as it holds both; v1:
    ``cpu.cfs_quota_us`` and ``cpu.cfs_period_us``); [] without a cpu cgroup. Raises
    ``CgroupError`` (only) when ``/proc/self/cgroup`` is malformed."""
    found = _find(root, "cpu")
    if found is None:
        return []
    mount, path = found
    if mount.version == 2:
        return [(os.path.join(d, "cpu.max"),) * 2 for d in _directories(mount, path)]
    return [(os.path.join(d, "cpu.cfs_quota_us"), os.path.join(d, "cpu.cfs_period_us"))
            for d in _directories(mount, path)]  # fmt: skip


def quota_cpus(name: str, quota: str, period: str) -> float | None:
    """The CPUs a quota file's text gives (v2's ``cpu.max`` as ``quota`` and ``period``
    alike, v1's two files apart); None for none. Raises ``CgroupError`` for anything else."""
    if name.endswith("cpu.max"):
        fields = quota.split()
        if len(fields) != 2:
            raise CgroupError(f"{shown(name)}: expected one line 'QUOTA PERIOD'")
        return _ratio(name, fields[0], fields[1], unlimited="max")
    return _ratio(name, quota.strip(), period.strip(), unlimited="-1")


def memory_bytes(name: str, text: str) -> int | None:
    """The limit a memory limit file's text gives, in bytes; None for none (``max``, v1's
    ``-1`` or its huge "no limit"). Raises ``CgroupError`` for anything else."""
    text = text.strip()
    if text in ("max", "-1"):
        return None
    number = _bytes(name, text)
    return None if number >= UNLIMITED_BYTES else number


def v2_directories(root: str, controller: str) -> list[str]:
    """The process's cgroup v2 directory for ``controller`` and its parents up to the
    mount, leaf first; [] without a v2 hierarchy. Raises ``CgroupError`` (only) when
    ``/proc/self/cgroup`` is malformed."""
    found = _find(root, controller)
    if found is None or found[0].version != 2:
        return []
    return _directories(*found)


def _tightest_limit(
    root: str,
    controller: str,
    read_v1: Callable[[str, str], float | None],
    v1_name: str,
    read_v2: Callable[[str, str], float | None],
    v2_name: str,
) -> tuple[float, str, str] | None:
    """The smallest limit of ``controller`` from the process's cgroup up to the mount: its
    value, its file and whose it is ("" for the process's own cgroup, see ``_tightest``)."""
    found = _find(root, controller)
    if found is None:
        return None
    mount, path = found
    if mount.version == 1:
        return _tightest(root, mount, path, read_v1, v1_name)
    return _tightest(root, mount, path, read_v2, v2_name)


def _tightest(
    root: str, mount: _Mount, path: str, read: Callable[[str, str], float | None], name: str
) -> tuple[float, str, str] | None:
    """The smallest limit on the path, the process's own cgroup's on a tie. A parent's that
    wins holds a budget shared with every process under it: a Pod's cgroup over a container
    with no limit of its own (sidecars included), a systemd slice, a Slurm job's cgroup."""
    best: tuple[float, str, str] | None = None
    for level, directory in enumerate(_directories(mount, path)):
        try:
            value = read(root, directory)
        except Missing:
            continue
        if value is not None and (best is None or value < best[0]):
            shared = "" if level == 0 else "a parent cgroup's, shared with every process under it"
            best = (value, shown(os.path.join(directory, name)), shared)
    return best


# The readers of a limit each controller's own cgroup may hold, by cgroup version.
_LIMITS: dict[tuple[str, int], tuple[Callable[[str, str], float | None], ...]] = {
    ("memory", 1): (_v1_memory,),
    ("memory", 2): (_v2_memory, _v2_high),
    ("cpu", 1): (_v1_quota,),
    ("cpu", 2): (_v2_quota,),
}


def leaf_limited(root: str, controller: str) -> bool:
    """Whether the process's own cgroup for ``controller`` (``memory`` or ``cpu``) holds a
    limit itself (a container's or a Slurm step's does; a parent's limit does not count)."""
    found = _find(root, controller)
    if found is None:
        return False
    mount, path = found
    directory = _directories(mount, path)[0]
    for read in _LIMITS[(controller, mount.version)]:
        try:
            if read(root, directory) is not None:
                return True
        except CgroupError:
            continue
    return False
