"""What a report's host-memory and CPU figures cover: the cgroup, when it is the job's, or
else the job's own process tree.

A container's or a Slurm step's cgroup is the job's: it holds a limit of its own, or it
holds only this process and its descendants and is no older than this process (made for
it, as ``systemd-run --scope`` and Slurm's task cgroups are). Any other cgroup (a systemd
session scope, a CI runner's, a notebook server's, the host's root) is shared or older than
the job: its peak since creation and its CPU time are not the job's, so the figures are
taken from this process and its descendants instead (``node.proctree``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from ..node.cgroup import CgroupError, leaf, leaf_limited, read_text, shown
from ..node.cpu import cgroup_root
from ..node.proctree import descendants, started

SLACK_S = 5.0  # a cgroup made this long before the process still counts as made for it
TREE = "process tree"  # this process and its descendants


class Cover:
    """What one resource's figures cover: the cgroup (``cgroup`` True) or the process
    tree, and why, in words for the record."""

    __slots__ = ("cgroup", "why")

    def __init__(self, cgroup: bool, why: str) -> None:
        self.cgroup, self.why = cgroup, why

    def to_dict(self) -> dict[str, str]:
        return {"covers": "cgroup" if self.cgroup else TREE, "why": self.why}


def _created(root: str, directory: str) -> float | None:
    try:
        return os.stat(os.path.join(root, directory.lstrip("/"))).st_mtime
    except OSError:
        return None


def covers(env: Mapping[str, str], controller: str, pid: int) -> Cover:
    """Whether ``controller``'s cgroup (``memory`` or ``cpu``) is the job's, for ``pid``."""
    root = cgroup_root(env)
    try:
        found = leaf(root, controller)
    except CgroupError:
        found = None
    if found is None:
        return Cover(False, f"no {controller} cgroup")
    name = shown(found[1])
    if leaf_limited(root, controller):
        return Cover(True, f"the cgroup {name}, which holds a limit of its own")
    try:
        listed = read_text(root, os.path.join(found[1], "cgroup.procs")).split()
    except CgroupError:
        return Cover(False, f"the processes of the cgroup {name} cannot be read")
    own = {pid, *descendants(pid)}
    others = sum(1 for p in listed if not p.isdigit() or int(p) not in own)
    if others:
        return Cover(False, f"the cgroup {name} holds {others} other process(es)")
    created, began = _created(root, found[1]), started(pid)
    if created is None or began is None or created < began - SLACK_S:
        return Cover(False, f"the cgroup {name} is older than this process")
    return Cover(True, f"the cgroup {name}, which holds only this process and its descendants")
