"""The container's CPU quota, from cgroup v2 ``cpu.max`` or v1 ``cpu.cfs_quota_us``.

The cgroup directory is found through ``/proc/self/cgroup`` and ``/proc/self/mountinfo``
(a container sees its own cgroup as the mount's root, so paths are resolved against the
mount's root, not joined naively). Every level from the process's cgroup up to the mount
point is read, and the smallest quota wins. ``root`` points the reader at a fake tree.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Quota:
    """A CPU quota in CPUs (1.5 = one and a half CPUs) and the file it came from."""

    cpus: float
    source: str


@dataclass(frozen=True)
class _Mount:
    root: str
    mountpoint: str
    version: int
    controllers: frozenset[str]


class CgroupError(Exception):
    """A cgroup file exists but does not say what it should."""


def _read(root: str, path: str) -> str:
    with open(os.path.join(root, path.lstrip("/")), encoding="ascii") as f:
        return f.read()


def _memberships(root: str) -> list[tuple[int, frozenset[str], str]]:
    """``/proc/self/cgroup`` lines as (hierarchy id, controllers, path)."""
    found = []
    for line in _read(root, "/proc/self/cgroup").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3 or not parts[0].isdigit():
            raise CgroupError(f"/proc/self/cgroup: unexpected line {line!r}")
        found.append((int(parts[0]), frozenset(filter(None, parts[1].split(","))), parts[2]))
    return found


def _mounts(root: str) -> list[_Mount]:
    """cgroup and cgroup2 mounts from ``/proc/self/mountinfo``."""
    mounts = []
    for line in _read(root, "/proc/self/mountinfo").splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or len(tail) < 3:
            continue
        fstype, superoptions = tail[0], tail[2]
        if fstype == "cgroup2":
            mounts.append(_Mount(fields[3], fields[4], 2, frozenset()))
        elif fstype == "cgroup":
            mounts.append(_Mount(fields[3], fields[4], 1, frozenset(superoptions.split(","))))
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
    fields = _read(root, path).split()
    if len(fields) != 2:
        raise CgroupError(f"{path}: expected 'QUOTA PERIOD', got {' '.join(fields)!r}")
    return _ratio(path, fields[0], fields[1], unlimited="max")


def _v1_quota(root: str, directory: str) -> float | None:
    quota_path = os.path.join(directory, "cpu.cfs_quota_us")
    quota = _read(root, quota_path).strip()
    period = _read(root, os.path.join(directory, "cpu.cfs_period_us")).strip()
    return _ratio(quota_path, quota, period, unlimited="-1")


def _ratio(path: str, quota: str, period: str, unlimited: str) -> float | None:
    if quota == unlimited:
        return None
    try:
        q, p = int(quota), int(period)
    except ValueError:
        raise CgroupError(f"{path}: quota {quota!r} / period {period!r} are not integers") from None
    if p <= 0 or q <= 0:
        raise CgroupError(f"{path}: quota {q} / period {p} must both be positive")
    return q / p


def cpu_quota(root: str = "/") -> Quota | None:
    """The tightest CPU quota on the process's cgroup path, or None if there is none.

    Raises ``CgroupError`` when a cgroup file is present but malformed.
    """
    try:
        memberships = _memberships(root)
        mounts = _mounts(root)
    except FileNotFoundError:
        return None
    # cgroup v1 with a cpu controller (also on hybrid hosts); otherwise the v2 unified tree.
    for hierarchy, controllers, path in memberships:
        if hierarchy != 0 and "cpu" in controllers:
            mount = next((m for m in mounts if m.version == 1 and "cpu" in m.controllers), None)
            if mount is not None:
                return _tightest(root, mount, path, _v1_quota)
    for hierarchy, _controllers, path in memberships:
        if hierarchy == 0:
            mount = next((m for m in mounts if m.version == 2), None)
            if mount is not None:
                return _tightest(root, mount, path, _v2_quota)
    return None


def _tightest(
    root: str, mount: _Mount, path: str, read_quota: Callable[[str, str], float | None]
) -> Quota | None:
    best: Quota | None = None
    for directory in _directories(mount, path):
        try:
            cpus = read_quota(root, directory)
        except FileNotFoundError:
            continue
        if cpus is not None and (best is None or cpus < best.cpus):
            name = "cpu.max" if mount.version == 2 else "cpu.cfs_quota_us"
            best = Quota(cpus, os.path.join(directory, name))
    return best
