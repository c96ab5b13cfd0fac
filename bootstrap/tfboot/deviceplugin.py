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
from .values import digits

HAMI_ALL = "CUDA_DEVICE_MEMORY_LIMIT"
HAMI_PREFIX = "CUDA_DEVICE_MEMORY_LIMIT_"
GPUSHARE = "ALIYUN_COM_GPU_MEM_CONTAINER"
GPUSHARE_DEVICE = "ALIYUN_COM_GPU_MEM_DEV"

_UNITS = {"": 1, "m": 1, "mi": 1, "mb": 1, "mib": 1, "g": 1024, "gi": 1024, "gb": 1024, "gib": 1024}
_QUANTITY = re.compile(r"^\s*([0-9]+)\s*([a-z]*)\s*$", re.IGNORECASE)
# 1 TiB: more than any GPU has (the MEMORY_LIMIT_MB limit).
_MAX_MIB = 1 << 20
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
    amount = digits(match.group(1)) if match else None
    mib = amount * _UNITS[unit] if amount and unit in _UNITS else 0
    if not 0 < mib <= _MAX_MIB:
        problems.append(
            Problem(
                variable,
                value,
                "expected an amount from 1 MiB to 1 TiB such as 6144m, 6144 (MiB) or 6g",
            )
        )
        return None
    return mib


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
    names = [f"{HAMI_ALL}={env[HAMI_ALL]}"] if HAMI_ALL in env else []
    for name, value in sorted(env.items()):
        suffix = name[len(HAMI_PREFIX) :]
        if name.startswith(HAMI_PREFIX) and suffix.isascii() and suffix.isdigit():
            names.append(f"{name}={value}")
            mib = _hami_cap(name, value, problems)
            index = digits(suffix)
            if mib is not None and index is not None:
                per_gpu[index] = mib
    if names:
        default = _hami_cap(HAMI_ALL, env[HAMI_ALL], problems) if HAMI_ALL in env else None
        source = f"HAMi {', '.join(names)} minus {HAMI_HEADROOM_MB} MiB headroom"
        return PluginLimit(default, per_gpu, source)
    if GPUSHARE in env:
        value = env[GPUSHARE].strip()
        device_total = digits(env.get(GPUSHARE_DEVICE, ""))
        in_mib = device_total is not None and device_total >= _MAX_GIB
        unit = "MiB" if in_mib else "GiB"
        amount = digits(value) or 0
        mib = amount if in_mib else amount * 1024
        if not 0 < mib <= _MAX_MIB:
            problems.append(
                Problem(
                    GPUSHARE, env[GPUSHARE], f"expected a positive integer ({unit}), at most 1 TiB"
                )
            )
            return None
        return PluginLimit(mib, {}, f"gpushare {GPUSHARE}={value} {unit}")
    return None
