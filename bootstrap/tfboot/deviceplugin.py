"""The GPU memory share a device plugin gave this container, for ``MEMORY_LIMIT_MB=auto``.

HAMi sets ``CUDA_DEVICE_MEMORY_LIMIT_<i>`` per visible GPU (or ``CUDA_DEVICE_MEMORY_LIMIT``
for all) with a unit suffix such as ``6144m``. HAMi enforces that share in its CUDA hook,
and the share must also hold the CUDA context and libraries, which live outside
TensorFlow's cap: the cap is the share minus ``HAMI_HEADROOM_MB``. gpushare's share is
advisory (nothing enforces it), so the cap is the share itself. gpushare sets
``ALIYUN_COM_GPU_MEM_CONTAINER``
in GiB (or MiB when the plugin runs with ``--memory-unit=MiB``, which it signals by a device
total ``ALIYUN_COM_GPU_MEM_DEV`` larger than any GPU has in GiB).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from .errors import Problem

HAMI_ALL = "CUDA_DEVICE_MEMORY_LIMIT"
HAMI_PREFIX = "CUDA_DEVICE_MEMORY_LIMIT_"
GPUSHARE = "ALIYUN_COM_GPU_MEM_CONTAINER"
GPUSHARE_DEVICE = "ALIYUN_COM_GPU_MEM_DEV"

_UNITS = {"": 1, "m": 1, "mi": 1, "mb": 1, "mib": 1, "g": 1024, "gi": 1024, "gb": 1024, "gib": 1024}
_QUANTITY = re.compile(r"^\s*(\d+)\s*([a-z]*)\s*$", re.IGNORECASE)
# No GPU has 512 GiB or more; a gpushare device total above this is in MiB.
_MAX_GIB = 512
# What a hard share must keep free beside TensorFlow's cap (CUDA context, cuDNN, cuBLAS).
HAMI_HEADROOM_MB = 512


@dataclass(frozen=True)
class PluginLimit:
    """Caps in MiB: one for every GPU (``default``) and/or per GPU index."""

    default: int | None = None
    per_gpu: dict[int, int] = field(default_factory=dict)
    source: str = ""


def _mib(variable: str, value: str, problems: list[Problem]) -> int | None:
    match = _QUANTITY.match(value)
    unit = match.group(2).lower() if match else None
    if not match or unit not in _UNITS or int(match.group(1)) <= 0:
        problems.append(
            Problem(variable, value, "expected a positive amount such as 6144m, 6144 (MiB) or 6g")
        )
        return None
    return int(match.group(1)) * _UNITS[unit]


def _hami_cap(variable: str, value: str, problems: list[Problem]) -> int | None:
    share = _mib(variable, value, problems)
    if share is not None and share <= HAMI_HEADROOM_MB:
        problems.append(
            Problem(
                variable,
                value,
                f"a HAMi share must exceed {HAMI_HEADROOM_MB} MiB, "
                "the headroom MEMORY_LIMIT_MB=auto keeps for the CUDA context",
                "ask for more nvidia.com/gpumem, or set MEMORY_LIMIT_MB to a number",
            )
        )
        return None
    return None if share is None else share - HAMI_HEADROOM_MB


def read_plugin_limit(env: Mapping[str, str], problems: list[Problem]) -> PluginLimit | None:
    """The device plugin's cap, or None when no plugin variable is set."""
    per_gpu: dict[int, int] = {}
    for name, value in env.items():
        if name.startswith(HAMI_PREFIX) and name[len(HAMI_PREFIX) :].isdigit():
            mib = _hami_cap(name, value, problems)
            if mib is not None:
                per_gpu[int(name[len(HAMI_PREFIX) :])] = mib
    if HAMI_ALL in env or per_gpu:
        default = _hami_cap(HAMI_ALL, env[HAMI_ALL], problems) if HAMI_ALL in env else None
        names = [f"{HAMI_ALL}={env[HAMI_ALL]}"] if HAMI_ALL in env else []
        names += [f"{HAMI_PREFIX}{i}={env[HAMI_PREFIX + str(i)]}" for i in sorted(per_gpu)]
        source = f"HAMi {', '.join(names)} minus {HAMI_HEADROOM_MB} MiB headroom"
        return PluginLimit(default, per_gpu, source)
    if GPUSHARE in env:
        value = env[GPUSHARE].strip()
        if not value.isdigit() or int(value) <= 0:
            problems.append(Problem(GPUSHARE, env[GPUSHARE], "expected a positive integer (GiB)"))
            return None
        device_total = env.get(GPUSHARE_DEVICE, "").strip()
        in_mib = device_total.isdigit() and int(device_total) >= _MAX_GIB
        unit = "MiB" if in_mib else "GiB"
        mib = int(value) if in_mib else int(value) * 1024
        return PluginLimit(mib, {}, f"gpushare {GPUSHARE}={value} {unit}")
    return None
