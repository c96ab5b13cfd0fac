"""Stand-in ``tensorflow`` package for Python 3.15, where no TensorFlow exists (a fake).

It exists only for the container tests of the 3.15 image, mounted read-only and put on
``PYTHONPATH``. It offers the ``tf.config`` calls tfboot's plan may make, with a CPU and no
GPU, and records every call in ``CALLS`` as ``[name, [arg, ...]]``, so a test can check
that tfboot's import hook applied the configuration when this package was imported.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

__version__ = "0.0.0+standin"
CALLS: list[list[Any]] = []


class PhysicalDevice(SimpleNamespace):
    """Like ``tf.config.PhysicalDevice``: a name and a device type."""


class LogicalDeviceConfiguration(SimpleNamespace):
    """Like ``tf.config.LogicalDeviceConfiguration``: an optional memory limit."""

    def __init__(self, memory_limit: int | None = None) -> None:
        super().__init__(memory_limit=memory_limit)


def _recorder(name: str) -> Any:
    def record(*args: Any) -> None:
        CALLS.append([name, [_plain(a) for a in args]])

    return record


def _plain(value: Any) -> Any:
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, SimpleNamespace):
        return dict(vars(value))
    return value


_CPU = PhysicalDevice(name="/physical_device:CPU:0", device_type="CPU")


def list_physical_devices(device_type: str | None = None) -> list[PhysicalDevice]:
    CALLS.append(["list_physical_devices", [device_type]])
    return [_CPU] if device_type in (None, "CPU") else []


config = SimpleNamespace(
    LogicalDeviceConfiguration=LogicalDeviceConfiguration,
    list_physical_devices=list_physical_devices,
    set_visible_devices=_recorder("set_visible_devices"),
    set_logical_device_configuration=_recorder("set_logical_device_configuration"),
    set_soft_device_placement=_recorder("set_soft_device_placement"),
    experimental=SimpleNamespace(set_memory_growth=_recorder("set_memory_growth")),
    threading=SimpleNamespace(
        set_intra_op_parallelism_threads=_recorder("set_intra_op_parallelism_threads"),
        set_inter_op_parallelism_threads=_recorder("set_inter_op_parallelism_threads"),
    ),
    optimizer=SimpleNamespace(set_jit=_recorder("set_jit")),
)
debugging = SimpleNamespace(set_log_device_placement=_recorder("set_log_device_placement"))
