"""What a container gets at ``/dev/shm``, as its Pod spec says, read offline.

- No volume mounted there: the runtime's own, a tmpfs of 64 MiB that the Pod's containers
  share (containerd's and CRI-O's sandbox ``/dev/shm``); under the Pod's ``hostIPC: true``,
  the runtime mounts the node's ``/dev/shm`` instead.
- An ``emptyDir`` with ``medium: Memory``: a tmpfs of its ``sizeLimit`` (without one, up to
  the Pod's memory limit, or the node's allocatable); its pages count against the
  ``limits.memory`` of the container that writes them.
- A ``hostPath`` of the node's ``/dev/shm`` (or a folder in it): the node's tmpfs, of the
  node's size (by default half its RAM), shared with every Pod that mounts it; its size is
  not bounded by ``limits.memory``, and files left there outlive the Pod.
- Anything else (an ``emptyDir`` on the node's disk, a ``persistentVolumeClaim``, another
  ``hostPath``): not memory, nor the runtime's 64 MiB.

The last mount at ``/dev/shm`` is the one the container sees.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..node.shm import DOCKER_DEFAULT_MIB, PATH

RUNTIME, MEMORY, NODE, OTHER = "runtime", "memory", "node", "other"


@dataclass(frozen=True)
class DevShm:
    """A container's ``/dev/shm``: its ``kind`` (``RUNTIME``, ``MEMORY``, ``NODE``,
    ``OTHER``), the volume mounted there (None: none), and what it is, in words."""

    kind: str
    volume: str | None
    what: str
    size: str | None = None  # a memory emptyDir's sizeLimit, as written (None: none)


def _mount(spec: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The container's last mount at ``/dev/shm``, or None."""
    found = None
    for mount in _items(spec, "volumeMounts"):
        if str(mount.get("mountPath", "")).rstrip("/") == PATH:
            found = mount
    return found


def _volume(pod: Mapping[str, Any], name: object) -> Mapping[str, Any] | None:
    return next((v for v in _items(pod, "volumes") if v.get("name") == name), None)


def _items(owner: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    """The mappings listed under ``key`` (none where it is no list)."""
    items = owner.get(key)
    return [i for i in items if isinstance(i, Mapping)] if isinstance(items, list) else []


def _of_node(path: object, sub: object) -> bool:
    """A ``hostPath`` (with the mount's ``subPath``) that is the node's ``/dev/shm``, or in it."""
    if not isinstance(path, str) or not path.startswith("/"):
        return False
    whole = posixpath.normpath(posixpath.join(path, str(sub or "")))
    return whole == PATH or whole.startswith(PATH + "/")


def dev_shm(spec: Mapping[str, Any], pod: Mapping[str, Any]) -> DevShm:
    """What the container ``spec`` of the Pod spec ``pod`` gets at ``/dev/shm``."""
    mount = _mount(spec)
    if mount is None:
        if pod.get("hostIPC") is True:
            return DevShm(NODE, None, f"the node's {PATH} (the Pod has hostIPC: true)")
        return DevShm(RUNTIME, None, f"the runtime's {DOCKER_DEFAULT_MIB} MiB")
    name = mount.get("name")
    volume = _volume(pod, name)
    if volume is None:
        return DevShm(OTHER, str(name), f"the volume {name}, which the Pod does not define")
    empty = volume.get("emptyDir")
    if isinstance(empty, Mapping) or "emptyDir" in volume:
        empty = empty if isinstance(empty, Mapping) else {}
        medium = empty.get("medium") or ""
        if medium == "Memory":
            size = empty.get("sizeLimit")
            sized = f"sizeLimit: {size}" if size is not None else "no sizeLimit"
            return DevShm(MEMORY, str(name), f"the emptyDir {name} (medium: Memory, {sized})",
                          None if size is None else str(size))  # fmt: skip
        on = f"medium: {medium}" if medium else "on the node's disk"
        return DevShm(OTHER, str(name), f"the emptyDir {name} ({on})")
    host = volume.get("hostPath")
    if isinstance(host, Mapping):
        path = host.get("path")
        if _of_node(path, mount.get("subPath")):
            return DevShm(NODE, str(name), f"the node's {PATH} (the hostPath volume {name})")
        return DevShm(OTHER, str(name), f"the hostPath volume {name} ({path})")
    kinds = [key for key in volume if key != "name"]
    source = f"a {kinds[0]}" if kinds else "a"
    return DevShm(OTHER, str(name), f"{source} volume, {name}")
