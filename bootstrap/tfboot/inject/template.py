"""What ``tfboot inject`` adds to a Pod template: one template, applied by ``inject``, taken
away by ``uninject``, checked by ``tfboot manifests`` and printed as an admission policy.

The injector image holds ``/tfboot/hook/sitecustomize.py`` (the start-up hook) and
``/tfboot/site`` (tfboot and python-dotenv, pure Python: one tree for every CPython). An
app container gets the tree read-only at ``/tfboot`` and ``/tfboot/hook`` first on its
``PYTHONPATH``. In ``init`` mode an init container copies the tree into an emptyDir, and one
more per app container, run from the app's own image, records the ``PYTHONPATH`` that image
and the container's ``envFrom`` give (Kubernetes replaces it with the container's); in
``image`` mode the injector image is mounted as an image volume (Kubernetes 1.33+ with
``subPath``; beta and on by default from 1.35), with no init container.
"""

from __future__ import annotations

import copy
from typing import Any

VOLUME = "tfboot"
MOUNT = "/tfboot"  # in each app container, read-only
HOOK = f"{MOUNT}/hook"  # first on PYTHONPATH
COPY_TARGET = "/tfboot-volume"  # where the init containers mount the volume
COPY_NAME = "tfboot-inject"
PROBE_PREFIX = "tfboot-env-"
SIZE_LIMIT = "64Mi"  # the tree is about 2 MB; every Python's bytecode fits several times
NONROOT_UID = 65532
MODES = ("init", "image")

# Annotations, on the workload or its Pod template.
OPT_OUT = "tfboot/inject"  # "false": leave it alone
CHOOSE = "tfboot/inject-containers"  # "a,b": only these (default: every container)
IMAGE_PYTHONPATH = "tfboot/image-pythonpath"  # the image's PYTHONPATH: no probe (or "none")
SITE_PACKAGES = "tfboot/site-packages"  # the image's site-packages: the .pth way instead
RECORD = "tfboot/injected"  # what inject changed, for uninject (JSON)
CONTAINER_ENV = "TFBOOT_INJECTED"  # the container's name, for the hook

RESOURCES = {"requests": {"cpu": "10m", "memory": "16Mi"},
             "limits": {"cpu": "100m", "memory": "64Mi"}}  # fmt: skip
SECURITY = {
    "runAsNonRoot": True,
    "runAsUser": NONROOT_UID,
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def volume(mode: str, image: str) -> dict[str, Any]:
    """The Pod's volume for the tree."""
    if mode == "image":
        return {"name": VOLUME, "image": {"reference": image, "pullPolicy": "IfNotPresent"}}
    return {"name": VOLUME, "emptyDir": {"sizeLimit": SIZE_LIMIT}}


def app_mount(mode: str) -> dict[str, Any]:
    """The read-only mount of the tree in an app container."""
    mount: dict[str, Any] = {"name": VOLUME, "mountPath": MOUNT, "readOnly": True}
    if mode == "image":
        mount["subPath"] = "tfboot"  # the image holds the tree at /tfboot
    return mount


PTH = "tfboot-inject.pth"  # at the tree's root: one line, site.addsitedir of the tree


def pth_mount(mode: str, site_packages: str) -> dict[str, Any]:
    """The tree's ``.pth`` file mounted into the image's site-packages: ``site`` runs it even
    under ``python -I`` and ``-E``, and no PYTHONPATH is needed."""
    return {"name": VOLUME, "mountPath": f"{site_packages.rstrip('/')}/{PTH}",
            "subPath": f"tfboot/{PTH}" if mode == "image" else PTH, "readOnly": True}  # fmt: skip


def _init_container(name: str, image: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "image": image,
        **extra,
        "volumeMounts": [{"name": VOLUME, "mountPath": COPY_TARGET}],
        "resources": copy.deepcopy(RESOURCES),
        "securityContext": copy.deepcopy(SECURITY),
    }


def copy_container(image: str) -> dict[str, Any]:
    """The init container that copies the tree (the injector image's default command)."""
    return _init_container(COPY_NAME, image)


def probe_container(app: dict[str, Any]) -> dict[str, Any]:
    """The init container that records, from the app's own image and ``envFrom``, the
    ``PYTHONPATH`` the app container would have had (``env/<container>.pythonpath``)."""
    name = str(app["name"])
    script = (f'mkdir -p {COPY_TARGET}/env && printf %s "${{PYTHONPATH-}}" '
              f"> {COPY_TARGET}/env/{name}.pythonpath")  # fmt: skip
    extra: dict[str, Any] = {"command": ["sh", "-c", script]}
    if app.get("envFrom"):
        extra["envFrom"] = app["envFrom"]
    if app.get("imagePullPolicy"):
        extra["imagePullPolicy"] = app["imagePullPolicy"]
    return _init_container(probe_name(name), str(app.get("image", "")), **extra)


def probe_name(container: str) -> str:
    """A probe's name: a DNS label of at most 63 characters."""
    return (PROBE_PREFIX + container)[:63].rstrip("-")


def is_injected_init(name: object) -> bool:
    """Whether an init container is one of tfboot's (copy or probe)."""
    return name == COPY_NAME or str(name).startswith(PROBE_PREFIX)
