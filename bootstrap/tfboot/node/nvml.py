"""The node's GPUs and their memory from NVML, read without initialising CUDA.

NVML is the driver's management library: asking it costs no CUDA context and no GPU
memory, so a framework's plan can know the GPUs before the framework starts. No
``libnvidia-ml`` (no driver) means no GPU.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Mapping
from dataclasses import dataclass

LIBRARY = "libnvidia-ml.so.1"
# Tests point this at a stand-in library; unset, the driver's own is loaded.
LIBRARY_ENV = "TFBOOT_NVML_LIBRARY"


class _Memory(ctypes.Structure):
    _fields_ = [
        ("total", ctypes.c_ulonglong),
        ("free", ctypes.c_ulonglong),
        ("used", ctypes.c_ulonglong),
    ]


@dataclass(frozen=True)
class Inventory:
    """Every GPU NVML lists, in its order: total and used memory in bytes."""

    totals: tuple[int, ...] = ()
    problem: str = ""  # NVML is there but failed; said in a warning
    used: tuple[int, ...] = ()

    @property
    def count(self) -> int:
        return len(self.totals)


def read_inventory(env: Mapping[str, str] | None = None) -> Inventory:
    """The GPUs' total memory; an empty inventory where no NVML library loads."""
    env = os.environ if env is None else env
    try:
        nvml = ctypes.CDLL(env.get(LIBRARY_ENV) or LIBRARY)
    except OSError:
        return Inventory()
    try:
        return _read(nvml)
    except (AttributeError, OSError) as exc:
        return Inventory(problem=f"NVML could not list the GPUs: {exc}")


def _read(nvml: ctypes.CDLL) -> Inventory:
    def check(what: str, status: int) -> None:
        if status != 0:
            raise OSError(f"{what} returned NVML status {status}")

    check("nvmlInit_v2", nvml.nvmlInit_v2())
    try:
        count = ctypes.c_uint()
        check("nvmlDeviceGetCount_v2", nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)))
        totals, used = [], []
        for index in range(count.value):
            handle = ctypes.c_void_p()
            check(
                "nvmlDeviceGetHandleByIndex_v2",
                nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)),
            )
            memory = _Memory()
            check(
                "nvmlDeviceGetMemoryInfo",
                nvml.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(memory)),
            )
            totals.append(memory.total)
            used.append(memory.used)
        return Inventory(tuple(totals), used=tuple(used))
    finally:
        nvml.nvmlShutdown()
