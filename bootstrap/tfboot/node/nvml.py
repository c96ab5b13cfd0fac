"""The node's GPUs and their memory from NVML, read without initialising CUDA.

NVML is the driver's management library: asking it costs no CUDA context and no GPU
memory, so a framework's plan can know the GPUs before the framework starts. No
``libnvidia-ml`` (no driver) means no GPU.

MPS memory partitioning's limits are read here too (``memory_limits``): the hard limit a
cgroup holds on each GPU, by ``nvmlDeviceGetMemoryLimits_v1`` (driver 615 and later; the
struct as NVIDIA's NVML reference and its ``nvidia-ml-py`` 13.615 declare it). Reading needs
no privileges; an older driver's library lacks the call, and then none is read.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterator, Mapping
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


class _Limits(ctypes.Structure):
    """``nvmlGetMemoryLimits_v1_t``: a cgroup's memory limits on one GPU, in bytes."""

    _fields_ = [
        ("nameSpace", ctypes.c_char_p),  # [in] the cgroup's directory, such as /sys/fs/cgroup/x
        ("softLimit", ctypes.c_ulonglong),
        ("hardLimit", ctypes.c_ulonglong),
        ("currentUsed", ctypes.c_ulonglong),
    ]


NO_LIMIT = (1 << 64) - 1  # NVML_DEVICE_MEMORY_LIMIT_MAX: a hard limit that limits nothing
# NVML_ERROR_NOT_SUPPORTED (no partitioning on this GPU), NVML_ERROR_NOT_FOUND (none for the
# cgroup): no limit, not a failure
NO_LIMITS_STATUSES = (3, 6)


def _load(env: Mapping[str, str] | None) -> ctypes.CDLL | None:
    """The NVML library (``LIBRARY_ENV``'s, else the driver's), or None where none loads."""
    env = os.environ if env is None else env
    try:
        return ctypes.CDLL(env.get(LIBRARY_ENV) or LIBRARY)
    except OSError:
        return None


@contextlib.contextmanager
def _initialised(env: Mapping[str, str] | None) -> Iterator[ctypes.CDLL | None]:
    """NVML loaded and initialised for the block, shut down after it; None where no library
    loads or it does not initialise (no driver)."""
    nvml = _load(env)
    try:
        if nvml is not None:
            _check("nvmlInit_v2", nvml.nvmlInit_v2())
    except (AttributeError, OSError):
        nvml = None
    if nvml is None:
        yield None
        return
    try:
        yield nvml
    finally:
        nvml.nvmlShutdown()


def read_inventory(env: Mapping[str, str] | None = None) -> Inventory:
    """The GPUs' total memory; an empty inventory where no NVML library loads."""
    nvml = _load(env)
    if nvml is None:
        return Inventory()
    try:
        return _read(nvml)
    except (AttributeError, OSError) as exc:
        return Inventory(problem=f"NVML could not list the GPUs: {exc}")


class _Process(ctypes.Structure):
    """``nvmlProcessInfo_t`` (nvml.h, CUDA 12 and 13): one process on a GPU."""

    _fields_ = [
        ("pid", ctypes.c_uint),
        ("usedGpuMemory", ctypes.c_ulonglong),
        ("gpuInstanceId", ctypes.c_uint),
        ("computeInstanceId", ctypes.c_uint),
    ]


INSUFFICIENT_SIZE = 7  # NVML_ERROR_INSUFFICIENT_SIZE
NOT_AVAILABLE = (1 << 64) - 1  # NVML_VALUE_NOT_AVAILABLE: usedGpuMemory unknown (Windows WDDM)


def _check(what: str, status: int) -> None:
    if status != 0:
        raise OSError(f"{what} returned NVML status {status}")


def _handles(nvml: ctypes.CDLL) -> list[ctypes.c_void_p]:
    count = ctypes.c_uint()
    _check("nvmlDeviceGetCount_v2", nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)))
    handles = []
    for index in range(count.value):
        handle = ctypes.c_void_p()
        _check(
            "nvmlDeviceGetHandleByIndex_v2",
            nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle)),
        )
        handles.append(handle)
    return handles


def process_memory(pid: int, env: Mapping[str, str] | None = None) -> dict[int, int]:
    """The GPU memory NVML counts for process ``pid`` (its allocator, CUDA context and
    libraries), by NVML index; empty without NVML or where NVML does not list ``pid``.

    Inside a container NVML lists host PIDs, so a process in its own PID namespace is
    usually not found: then nothing is claimed.
    """
    with _initialised(env) as nvml:
        if nvml is None:
            return {}
        found = {}
        try:
            for index, handle in enumerate(_handles(nvml)):
                for process in _processes(nvml, handle):
                    if process.pid == pid and process.usedGpuMemory != NOT_AVAILABLE:
                        found[index] = found.get(index, 0) + process.usedGpuMemory
        except (AttributeError, OSError):
            return {}
        return found


def _processes(nvml: ctypes.CDLL, handle: ctypes.c_void_p) -> list[_Process]:
    """The compute processes on one GPU (the list may grow between the two calls)."""
    function = nvml.nvmlDeviceGetComputeRunningProcesses_v3
    for _attempt in range(3):
        count = ctypes.c_uint(0)
        status = function(handle, ctypes.byref(count), None)
        if status == 0:
            return []
        if status != INSUFFICIENT_SIZE:
            _check("nvmlDeviceGetComputeRunningProcesses_v3", status)
        count = ctypes.c_uint(count.value + 4)
        buffer = (_Process * count.value)()
        status = function(handle, ctypes.byref(count), buffer)
        if status == 0:
            return list(buffer[: count.value])
        if status != INSUFFICIENT_SIZE:
            _check("nvmlDeviceGetComputeRunningProcesses_v3", status)
    return []


def _read(nvml: ctypes.CDLL) -> Inventory:
    _check("nvmlInit_v2", nvml.nvmlInit_v2())
    try:
        totals, used = [], []
        for handle in _handles(nvml):
            memory = _Memory()
            _check(
                "nvmlDeviceGetMemoryInfo",
                nvml.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(memory)),
            )
            totals.append(memory.total)
            used.append(memory.used)
        return Inventory(tuple(totals), used=tuple(used))
    finally:
        nvml.nvmlShutdown()


def memory_limits(cgroup: str, env: Mapping[str, str] | None = None) -> dict[int, int] | None:
    """The hard limit NVML holds for the cgroup directory ``cgroup`` on each GPU that has one,
    in bytes by NVML index; None where no NVML loads, its library lacks the call (a driver
    before 615) or it fails."""
    with _initialised(env) as nvml:
        function = getattr(nvml, "nvmlDeviceGetMemoryLimits_v1", None)
        if function is None:
            return None
        found: dict[int, int] = {}
        try:
            for index, handle in enumerate(_handles(nvml)):
                limits = _Limits(os.fsencode(cgroup), 0, 0, 0)
                status = function(handle, ctypes.byref(limits))
                if status in NO_LIMITS_STATUSES:
                    continue
                _check("nvmlDeviceGetMemoryLimits_v1", status)
                if 0 < limits.hardLimit < NO_LIMIT:
                    found[index] = limits.hardLimit
        except (AttributeError, OSError):
            return None
        return found
