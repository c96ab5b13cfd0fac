"""GPU memory limits the kernel's ``dmem`` cgroup controller holds for this container.

MPS memory partitioning (CUDA 13.4 and driver 615 or later, Linux 6.14 or later, cgroup v2,
not with MIG) enforces a hard limit per container and GPU through the ``dmem`` controller:
nvidia-container-toolkit's ``apply-cuda-memory-limits`` hook sets it through NVML
(``nvmlDeviceSetMemoryLimits_v1``, the container's cgroup as the namespace), as does
``nvidia-smi memory-limits``. Under it ``cuMemGetInfo`` reports the limit as the GPU's total,
so a framework that takes a fraction of "total" takes it of the limit.

``dmem.max`` holds one line a region, ``<region> <bytes>`` or ``<region> max``
(``kernel/cgroup/dmem.c``, ``dmemcg_limit_show``). NVIDIA's driver registers one region a GPU,
``nvidia/<PCI bus id>/vidmem``; DRM drivers' regions (``drm/<PCI bus id>/vram0``) are no
CUDA device's and are left out. Every level from the container's cgroup up to the mount is
read and the smallest limit of each region holds (a container's own ``max`` leaves its pod's
limit in force). Which CUDA device a region is would take its PCI bus id through NVML: the
smallest of the regions' limits is taken for every GPU, a cap that fits each.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..values import digits
from .cgroup import CgroupError, Missing, read_text, shown, v2_directories

FILE = "dmem.max"
NVIDIA = "nvidia/"


@dataclass(frozen=True)
class GpuMemoryLimit:
    """The smallest NVIDIA region's hard limit in MiB, and where it was read."""

    mib: int
    source: str


def parse(text: str, path: str) -> dict[str, int | None]:
    """``dmem.max``'s lines as region -> bytes (None: ``max``); ``CgroupError`` naming the
    file and the line that is neither."""
    found: dict[str, int | None] = {}
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if not fields:
            continue
        amount = digits(fields[1]) if len(fields) == 2 else None
        if len(fields) != 2 or (fields[1] != "max" and amount is None):
            raise CgroupError(f"{shown(path)}: line {number} is not '<region> <bytes>|max'")
        found[fields[0]] = None if fields[1] == "max" else amount
    return found


def read_gpu_memory_limit(root: str) -> GpuMemoryLimit | None:
    """The hard limit on this container's NVIDIA GPUs' memory, or None where ``dmem.max``
    sets none (no dmem controller, no NVIDIA region, every one ``max``)."""
    best: tuple[int, str] | None = None
    for directory in v2_directories(root, "dmem"):
        path = os.path.join(directory, FILE)
        try:
            regions = parse(read_text(root, path), path)
        except Missing:
            continue
        for region, amount in regions.items():
            if region.startswith(NVIDIA) and amount and (best is None or amount < best[0]):
                best = (amount, f"{shown(path)} {region}")
    return None if best is None else GpuMemoryLimit(best[0] >> 20, best[1])
