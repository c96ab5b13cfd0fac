"""The checks of a workload ``tfboot inject`` changed: what must hold for the hook to run.

A Pod template with tfboot's volume, or an app container whose ``PYTHONPATH`` names the hook,
is checked for the parts ``tfboot inject`` adds (``kube/template.py``): the volume, the
init container that fills it, the read-only mount, the hook first on ``PYTHONPATH``, and a
command that does not keep the hook out (``python -I``, ``-E``, ``-S``). The init containers'
resources and security context are checked like any container's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..kube import template as t
from ..kube.interpreter import ADVICE, ignored_by
from ..kube.report import Report
from ..kube.workloads import Container


def _named(items: Any, name: str) -> Mapping[str, Any] | None:
    return next((i for i in items or [] if isinstance(i, Mapping) and i.get("name") == name), None)


def _pythonpaths(container: Container) -> list[str]:
    """Each PYTHONPATH value the container gives; the kubelet uses the last."""
    return [str(e.get("value", "")) for e in container.spec.get("env") or []
            if isinstance(e, Mapping) and e.get("name") == "PYTHONPATH"]  # fmt: skip


def check_injected(container: Container, report: Report) -> None:
    """An app container that takes tfboot's tree, or names its hook: every part in place;
    an init container other than the copy that mounts the tree writable, a door."""
    if container.spec in (container.pod.get("initContainers") or []):
        writable = any(isinstance(m, Mapping) and m.get("name") == t.VOLUME
                       and m.get("readOnly") is not True
                       for m in container.spec.get("volumeMounts") or [])  # fmt: skip
        if writable and container.spec.get("name") != t.COPY_NAME:
            report.add(container.where, "inject-mount",
                       f"this init container mounts the {t.VOLUME} volume writable: it can "
                       "change the code every injected container runs",
                       f"mount it read-only; only {t.COPY_NAME} writes the tree (run tfboot "
                       "inject again)")  # fmt: skip
        return
    mounts = [m for m in container.spec.get("volumeMounts") or []
              if isinstance(m, Mapping) and m.get("name") == t.VOLUME]  # fmt: skip
    mount = next(
        (m for m in mounts if m.get("mountPath") == t.MOUNT), mounts[0] if mounts else None
    )
    pth = any(str(m.get("mountPath", "")).endswith("/" + t.PTH) for m in mounts)
    paths = _pythonpaths(container)
    path = paths[-1] if paths else None
    named = any(t.HOOK in p.split(":") for p in paths)
    if mount is None and not named:
        return
    where = container.where
    volume = _named(container.pod.get("volumes"), t.VOLUME)
    if mount is None or volume is None:
        report.add(where, "inject-incomplete",
                   f"PYTHONPATH names {t.HOOK} but the Pod has no {t.VOLUME} volume mounted at "
                   f"{t.MOUNT}: nothing happens", "run tfboot inject again")  # fmt: skip
        return
    if any(m.get("readOnly") is not True for m in mounts) or mount.get("mountPath") != t.MOUNT:
        report.add(where, "inject-mount",
                   f"the {t.VOLUME} volume is not mounted read-only at {t.MOUNT}",
                   f"mount it at {t.MOUNT} with readOnly: true")  # fmt: skip
    if "emptyDir" in volume and _named(container.pod.get("initContainers"), t.COPY_NAME) is None:
        report.add(where, "inject-incomplete",
                   f"the {t.VOLUME} emptyDir is filled by no {t.COPY_NAME} init container: "
                   "the hook is missing, nothing happens", "run tfboot inject again")  # fmt: skip
    if "emptyDir" in volume and not (volume.get("emptyDir") or {}).get("sizeLimit"):
        report.add(where, "inject-mount", f"the {t.VOLUME} emptyDir has no sizeLimit",
                   f"set emptyDir.sizeLimit: {t.SIZE_LIMIT}")  # fmt: skip
    if not pth and len(paths) > 1 and paths[-1].split(":")[0] != t.HOOK:
        report.add(where, "inject-pythonpath",
                   f"PYTHONPATH is given {len(paths)} times and the container gets the last, "
                   f"{path!r}, which does not start with {t.HOOK}: nothing happens",
                   "keep one PYTHONPATH entry (a kustomize or Helm merge can add a second), "
                   f"with {t.HOOK} first; tfboot inject merges it into the last")  # fmt: skip
    elif not pth and (path is None or path.split(":")[0] != t.HOOK):
        report.add(where, "inject-pythonpath",
                   f"PYTHONPATH={path!r} does not start with {t.HOOK}: the hook is not the "
                   "sitecustomize Python finds, and nothing happens",
                   f"put {t.HOOK} first (tfboot inject merges it)")  # fmt: skip
    for why in ignored_by(container.spec, pth):
        report.add(where, "inject-ignored", f"the command runs Python with {why}", ADVICE)
