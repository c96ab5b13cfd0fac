"""Read TensorFlow's own log of a selftest child: devices created and allocator regions.

A child runs with ``TF_CPP_MIN_LOG_LEVEL=0`` and ``TF_CPP_VMODULE`` set (see ``LOG_ENV``),
so TensorFlow writes to stderr which logical GPU it created on which physical GPU and
with how many MB (the CUDA GPU factory and the PluggableDevice factory word it
differently), and each time a GPU's BFC allocator takes another region of device
memory ("Extending allocation by 2.00MiB bytes for GPU_0_bfc."). Those lines are the
evidence of where memory went and how much was taken, independent of tfboot.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..values import line as tfboot_line

MIB = 1 << 20
LOG_ENV = {
    "TF_CPP_MIN_LOG_LEVEL": "0",
    "TF_CPP_VMODULE": "bfc_allocator=1,pluggable_device_factory=1,gpu_device=1",
}
# CUDA:      Created device /job:.../device:GPU:0 with 1024 MB memory:  -> device: 1, name: ...
# Pluggable: Created TensorFlow device (/job:.../device:GPU:0 with 1024 MB memory[ and
#            priority: DEFAULT]) -> physical PluggableDevice (device: 1, name: ...
_CREATED = re.compile(
    r"Created (?:TensorFlow )?device \(?\S*?/device:GPU:(?P<logical>\d+) with (?P<mb>\d+) MB "
    r"memory.*?->.*?device: (?P<physical>\d+)(?:, name: (?P<model>[^,)]+))?"
)
_EXTEND = re.compile(
    r"Extending allocation by (?P<size>[\d.]+)(?P<unit>[KMGT]?i?B) bytes for "
    r"(?:GPU|PluggableDevice)_(?P<logical>\d+)_bfc\."
)
_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}

WARNING = tfboot_line("warning", "").rstrip()  # "tfboot: warning:"


@dataclass(frozen=True)
class GpuDevice:
    """One logical GPU TensorFlow created: its index, memory limit and physical GPU."""

    logical: int
    memory_mb: int
    physical: int
    model: str


@dataclass
class TfLog:
    """What a child's stderr says about its GPUs."""

    devices: list[GpuDevice] = field(default_factory=list)
    # logical GPU index -> sizes in bytes of the device-memory regions its allocator took
    regions: dict[int, list[int]] = field(default_factory=dict)
    tfboot_warnings: list[str] = field(default_factory=list)

    def region_mib(self, logical: int) -> list[float]:
        return [round(size / MIB, 2) for size in self.regions.get(logical, [])]


def parse(stderr: str) -> TfLog:
    """The devices, allocator regions and tfboot warnings found in ``stderr``."""
    log = TfLog()
    for line in stderr.splitlines():
        created = _CREATED.search(line)
        if created:
            model = (created["model"] or "").strip()
            log.devices.append(
                GpuDevice(
                    int(created["logical"]), int(created["mb"]), int(created["physical"]), model
                )
            )
            continue
        extend = _EXTEND.search(line)
        if extend:
            size = round(float(extend["size"]) * _UNITS.get(extend["unit"], 1))
            log.regions.setdefault(int(extend["logical"]), []).append(size)
            continue
        if line.startswith(WARNING):
            log.tfboot_warnings.append(line.partition("warning:")[2].strip())
    return log
