"""What ``tfboot inject`` adds to a Pod template: one template, applied by ``inject``, taken
away by ``uninject``, checked by ``tfboot manifests`` and printed as an admission policy.

The injector image holds ``/tfboot/hook/sitecustomize.py`` (the start-up hook) and
``/tfboot/site`` (tfboot and python-dotenv, pure Python: one tree for every CPython). An
app container gets the tree read-only at ``/tfboot`` and ``/tfboot/hook`` first on its
``PYTHONPATH``. In ``init`` mode an init container copies the tree into an emptyDir, and one
more per app container, run from the app's own image, records the ``PYTHONPATH`` that image
and the container's ``envFrom`` give (Kubernetes replaces it with the container's). Only the
copy container can write the tree: each probe mounts nothing of it, and writes its record
into an emptyDir of its own, which only its app container mounts, read-only, at
``/tfboot/env``; so no image of the Pod can change the code another container runs. In
``image`` mode the injector image is mounted as an image volume (Kubernetes 1.33+ with
``subPath``; beta and on by default from 1.35), with no init container.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping
from typing import Any

from ..node.shm import PATH as SHM_PATH

VOLUME = "tfboot"
SHM_PREFIX = "tfboot-shm-"  # inject --shm's memory-backed /dev/shm of one container
SHM_VOLUME = "tfboot-shm"  # the one an earlier tfboot shared between containers
MOUNT = "/tfboot"  # in each app container, read-only
HOOK = f"{MOUNT}/hook"  # first on PYTHONPATH
COPY_TARGET = "/tfboot-volume"  # where the init containers mount the volume
COPY_NAME = "tfboot-inject"
PROBE_PREFIX = "tfboot-env-"  # a probe init container, and the record volume it writes
RECORD_TARGET = "/tfboot-env"  # where a probe mounts its record volume
RECORD_MOUNT = f"{MOUNT}/env"  # where its app container reads it (the hook's env folder)
SIZE_LIMIT = "64Mi"  # the tree is about 2 MB; every Python's bytecode fits several times
RECORD_LIMIT = "1Mi"  # one PYTHONPATH
LABEL = 63  # a volume's or container's name is a DNS label of at most 63 characters
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
# No fixed UID (OpenShift's restricted-v2 refuses one outside the namespace's range and runs
# each container as an arbitrary UID in group 0): the copy runs as the injector image's
# numeric USER (or the platform's UID), a probe as its app container runs.
HARDENED = {
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


IDENTITY = ("runAsUser", "runAsGroup", "runAsNonRoot")  # who a container runs as


def _init_container(name: str, image: str, mount: dict[str, Any], security: dict[str, Any],
                    **extra: Any) -> dict[str, Any]:  # fmt: skip
    return {
        "name": name,
        "image": image,
        **extra,
        "volumeMounts": [mount],
        "resources": copy.deepcopy(RESOURCES),
        "securityContext": {**security, **copy.deepcopy(HARDENED)},
    }


def copy_container(image: str) -> dict[str, Any]:
    """The init container that copies the tree (the injector image's default command): the
    only container that mounts the tree writable. Non-root by the image's numeric USER, with
    no UID of its own; the tree it copies is readable by any UID."""
    mount = {"name": VOLUME, "mountPath": COPY_TARGET}
    return _init_container(COPY_NAME, image, mount, {"runAsNonRoot": True})


def _runs_as(app: Mapping[str, Any]) -> dict[str, Any]:
    """Who the app container runs as, from its own securityContext (the Pod's applies to
    both): a probe runs the app's image as the app does, so asks for no other UID."""
    own = app.get("securityContext")
    return {key: own[key] for key in IDENTITY if key in own} if isinstance(own, Mapping) else {}


def probe_container(app: dict[str, Any]) -> dict[str, Any]:
    """The init container that records, from the app's own image and ``envFrom``, the
    ``PYTHONPATH`` the app container would have had (``<container>.pythonpath``), in its own
    record volume: it mounts nothing else of tfboot's."""
    name = str(app["name"])
    script = f'printf %s "${{PYTHONPATH-}}" > {RECORD_TARGET}/{name}.pythonpath'
    extra: dict[str, Any] = {"command": ["sh", "-c", script]}
    if app.get("envFrom"):
        extra["envFrom"] = app["envFrom"]
    if app.get("imagePullPolicy"):
        extra["imagePullPolicy"] = app["imagePullPolicy"]
    mount = {"name": probe_name(name), "mountPath": RECORD_TARGET}
    image = str(app.get("image", ""))
    return _init_container(probe_name(name), image, mount, _runs_as(app), **extra)


def record_volume(container: str) -> dict[str, Any]:
    """The emptyDir one probe writes its record into."""
    return {"name": probe_name(container), "emptyDir": {"sizeLimit": RECORD_LIMIT}}


def record_mount(container: str) -> dict[str, Any]:
    """The app container's read-only mount of its own probe's record."""
    return {"name": probe_name(container), "mountPath": RECORD_MOUNT, "readOnly": True}


def probe_name(container: str) -> str:
    """A probe's name (and its record volume's): a DNS label of at most 63 characters, unique
    per container; a name cut to fit ends in a hash of the whole container name."""
    return _label(PROBE_PREFIX, container)


def shm_name(container: str) -> str:
    """The name of the memory-backed /dev/shm ``--shm`` gives one container, cut to fit as a
    probe's (the prefixes are as long, so two containers' names differ where probes' do)."""
    return _label(SHM_PREFIX, container)


def _label(prefix: str, container: str) -> str:
    whole = prefix + container
    if len(whole) <= LABEL:
        return whole
    digest = hashlib.sha256(container.encode()).hexdigest()[:8]
    return f"{whole[: LABEL - len(digest) - 1].rstrip('-')}-{digest}"


def owned(containers: list[str]) -> set[str]:
    """The names tfboot's parts take in a Pod injected for ``containers``: its volume and copy
    container, each container's probe and record volume (volumes and init containers), and
    the memory-backed /dev/shm ``--shm`` adds to each (an earlier tfboot's shared one too)."""
    return {VOLUME, COPY_NAME, SHM_VOLUME, *(probe_name(c) for c in containers),
            *(shm_name(c) for c in containers)}  # fmt: skip


def shm_volume(container: str, size_mib: int) -> dict[str, Any]:
    """The memory-backed /dev/shm ``inject --shm`` gives ``container``, of ``size_mib``."""
    return {"name": shm_name(container),
            "emptyDir": {"medium": "Memory", "sizeLimit": f"{size_mib}Mi"}}  # fmt: skip


def shm_mount(container: str) -> dict[str, Any]:
    return {"name": shm_name(container), "mountPath": SHM_PATH}


def is_injected_init(name: object) -> bool:
    """Whether an init container is one of tfboot's (copy or probe)."""
    return name == COPY_NAME or str(name).startswith(PROBE_PREFIX)
