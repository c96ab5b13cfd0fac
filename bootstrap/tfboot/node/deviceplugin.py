"""The GPU memory share a device plugin gave this container, for ``MEMORY_LIMIT_MB=auto``.

Each reader returns the share itself, in MiB; the cap is the share minus the framework's
headroom (``budget.caps``). Enforced shares, refused below the
framework: HAMi's, MPS's and KAI's memory limits; when several are set, the smallest holds
for each GPU. Advisory shares (nothing enforces them) count only when none of those is set:
gpushare's, then KAI's portion.

- HAMi sets ``CUDA_DEVICE_MEMORY_LIMIT_<i>`` per visible GPU (or ``CUDA_DEVICE_MEMORY_LIMIT``
  for all) with a unit suffix such as ``6144m``, enforced in its CUDA hook (KAI's
  ``hamicore`` mode sets the same), unless the container sets ``CUDA_DISABLE_CONTROL=true``:
  the hook is then not preloaded, and the share is read as advisory.
- MPS on GKE and Amazon ECS sets ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``, enforced by the CUDA
  driver: one amount for every GPU, or ``ordinal=amount`` pairs. NVIDIA's DRA driver and
  its device plugin set the limit on the MPS control daemon instead (the claim's
  ``defaultPinnedDeviceMemoryLimit``) and hand the container only ``CUDA_MPS_PIPE_DIRECTORY``:
  the limit is not visible there, and ``auto`` says so (``auto_without_share``).
- MPS memory partitioning (CUDA 13.4, driver 615, Linux 6.14 and later) holds a hard limit
  per container in the kernel's ``dmem`` controller (``node.dmem``), set by
  nvidia-container-toolkit's hook or ``nvidia-smi memory-limits``; read where the container
  is an MPS client (``CUDA_MPS_PIPE_DIRECTORY`` set), whatever set it. Where no ``dmem.max``
  holds one (the driver's own fallback), NVML's memory limits for the container's cgroup
  (``node.nvml.memory_limits``) are read instead.
- KAI Scheduler's ``nvfractions`` (kai-gpu-fractioning's fractiond) sets
  ``NVIDIA_GPU_MEMORY_LIMITS`` in MiB, which nvidia-container-toolkit's
  ``apply-cuda-memory-limits`` hook enforces through NVML memory limits; its ``gpusharing``
  sets ``GPU_PORTION`` (``%.2f`` of each GPU), which nothing enforces: its share is the
  portion of the GPU's total memory that NVML reports.
- gpushare sets ``ALIYUN_COM_GPU_MEM_CONTAINER`` in GiB (or MiB when the plugin runs with
  ``--memory-unit=MiB``, which it signals by a device total ``ALIYUN_COM_GPU_MEM_DEV``
  larger than any GPU has in GiB); advisory.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ..errors import Problem
from ..values import digits, quote
from .cgroup import CgroupError, shown, v2_directories
from .cpu import cgroup_root
from .dmem import read_gpu_memory_limit
from .nvml import memory_limits, read_inventory

HAMI_ALL = "CUDA_DEVICE_MEMORY_LIMIT"
HAMI_PREFIX = "CUDA_DEVICE_MEMORY_LIMIT_"
# HAMi's device plugin leaves HAMi-core out (no /etc/ld.so.preload) where the container sets
# this to what Go's strconv.ParseBool reads as true (HAMi 2.10, pkg/device-plugin).
HAMI_OFF = "CUDA_DISABLE_CONTROL"
GO_TRUE = ("1", "t", "T", "TRUE", "true", "True")
GPUSHARE = "ALIYUN_COM_GPU_MEM_CONTAINER"
GPUSHARE_DEVICE = "ALIYUN_COM_GPU_MEM_DEV"
MPS = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
# KAI Scheduler's shares: nvfractions' enforced limit (MiB), gpusharing's advisory portion.
KAI_LIMITS = "NVIDIA_GPU_MEMORY_LIMITS"
KAI_LIMITS_NAMES = (KAI_LIMITS, "NVIDIA_GPU_MEMORY_LIMIT")  # the toolkit's hook reads both
KAI_PORTION = "GPU_PORTION"
KAI_ACCEPTED = "expected a whole number of MiB from 1 to 1048576 (1 TiB) such as 6144"
# Where MPS clients find the control daemon: set wherever MPS is, its limit or not.
MPS_PIPE = "CUDA_MPS_PIPE_DIRECTORY"
MPS_ACCEPTED = (
    "expected an amount such as 4G or 4096M for every GPU, or device=amount pairs such as "
    "0=4G,1=2048M (device ordinals after CUDA_VISIBLE_DEVICES)"
)

_MIB, _GIB, _TIB = 1 << 20, 1 << 30, 1 << 40
# unit -> bytes, for tfboot's own amounts and MPS's (a bare number is MiB)
_UNITS = {"": _MIB, "m": _MIB, "mi": _MIB, "mb": _MIB, "mib": _MIB, "g": _GIB, "gi": _GIB,
          "gb": _GIB, "gib": _GIB, "t": _TIB, "tb": _TIB, "tib": _TIB}  # fmt: skip
# unit -> bytes, as HAMi-core reads CUDA_DEVICE_MEMORY_LIMIT (a bare number is bytes)
_HAMI_UNITS = {"": 1, "k": 1 << 10, "m": _MIB, "g": _GIB}
_ACCEPTED = "expected an amount from 1 MiB to 1 TiB such as 6144m, 6144 (MiB) or 6g"
_HAMI_ACCEPTED = (
    "expected an amount as HAMi-core reads it, from 1 MiB to 1 TiB, such as 6g, 6144m, "
    "6291456k or 6442450944 (a bare number is bytes)"
)
_QUANTITY = re.compile(r"^\s*([0-9]+)\s*([a-z]*)\s*$", re.IGNORECASE)
# 1 TiB: more than any GPU has (the MEMORY_LIMIT_MB limit).
_MAX_MIB = 1 << 20
# No GPU has 512 GiB or more; a gpushare device total above this is in MiB.
_MAX_GIB = 512


@dataclass(frozen=True)
class PluginLimit:
    """Shares in MiB: one for every GPU (``default``) and/or per GPU index; ``enforced``:
    something below the framework refuses memory past the share (else it is advisory)."""

    default: int | None = None
    per_gpu: dict[int, int] = field(default_factory=dict)
    source: str = ""
    enforced: bool = True


def _mib(variable: str, value: str, problems: list[Problem], units: Mapping[str, int] = _UNITS,
         accepted: str = _ACCEPTED) -> int | None:  # fmt: skip
    """``value`` in whole MiB, read with ``units`` (unit -> bytes), rounded down (a cap stays
    inside the share); a problem saying ``accepted`` when it is no amount from 1 MiB to 1 TiB."""
    match = _QUANTITY.match(value)
    unit = match.group(2).lower() if match else None
    amount = digits(match.group(1)) if match else None
    mib = amount * units[unit] >> 20 if amount and unit in units else 0
    if not 0 < mib <= _MAX_MIB:
        problems.append(Problem(variable, value, accepted))
        return None
    return mib


def _hami_mib(variable: str, value: str, problems: list[Problem]) -> int | None:
    """A HAMi amount as HAMi-core reads it: ``1g``, ``1024m``, ``1048576k``, or a bare number
    of bytes (``1073741824``)."""
    return _mib(variable, value, problems, _HAMI_UNITS, _HAMI_ACCEPTED)


def _hami(env: Mapping[str, str], problems: list[Problem]) -> PluginLimit | None:
    """HAMi's caps: ``CUDA_DEVICE_MEMORY_LIMIT`` for every GPU, ``..._<i>`` per GPU."""
    per_gpu: dict[int, int] = {}
    names = [f"{HAMI_ALL}={env[HAMI_ALL]}"] if HAMI_ALL in env else []
    for name, value in sorted(env.items()):
        suffix = name[len(HAMI_PREFIX) :]
        if name.startswith(HAMI_PREFIX) and suffix.isascii() and suffix.isdigit():
            names.append(f"{name}={value}")
            mib = _hami_mib(name, value, problems)
            index = digits(suffix)
            if mib is not None and index is not None:
                per_gpu[index] = mib
    if not names:
        return None
    default = _hami_mib(HAMI_ALL, env[HAMI_ALL], problems) if HAMI_ALL in env else None
    source = f"HAMi {', '.join(names)}"
    off = env.get(HAMI_OFF, "").strip()
    if off in GO_TRUE:  # the device plugin then mounts no /etc/ld.so.preload: nothing enforces it
        return PluginLimit(default, per_gpu, f"{source}, not enforced: {HAMI_OFF}={off}",
                           enforced=False)  # fmt: skip
    return PluginLimit(default, per_gpu, source)


def _mps(env: Mapping[str, str], problems: list[Problem]) -> PluginLimit | None:
    """MPS's pinned device memory limit: ``2G`` for every GPU, or ``0=1G,1=512M`` per GPU.

    The ordinals are the client's, after ``CUDA_VISIBLE_DEVICES``: TensorFlow's indexes.
    """
    value = env.get(MPS)
    if value is None or not value.strip():
        return None
    source = f"MPS {MPS}={value.strip()}"
    parts = [part.strip() for part in value.split(",")]
    if len(parts) == 1 and "=" not in parts[0]:
        cap = _mib(MPS, parts[0], problems)
        return None if cap is None else PluginLimit(cap, {}, source)
    per_gpu: dict[int, int] = {}
    for part in parts:
        ordinal, equals, amount = part.partition("=")
        index = digits(ordinal) if equals else None
        if index is None or index in per_gpu:
            why = f"device {index} is given twice" if index in per_gpu else ""
            problems.append(Problem(MPS, value, MPS_ACCEPTED, why))
            return None
        found: list[Problem] = []
        cap = _mib(MPS, amount, found)
        if cap is None:  # name the whole value, and which device's amount is wrong
            problems += [Problem(MPS, value, f"device {index}: {p.accepted}") for p in found]
            return None
        per_gpu[index] = cap
    return PluginLimit(None, per_gpu, source)


def _dmem(env: Mapping[str, str], problems: list[Problem]) -> PluginLimit | None:
    """MPS memory partitioning's hard limit, where the container is an MPS client: from the
    container's ``dmem.max``, else (the driver's fallback, no ``dmem`` controller) from NVML's
    memory limits for the container's cgroup."""
    if not env.get(MPS_PIPE, "").strip():
        return None
    root = cgroup_root(env)
    try:
        found = read_gpu_memory_limit(root)
        directories = [] if found else v2_directories(root, "dmem")
    except CgroupError as exc:
        problems.append(Problem("MEMORY_LIMIT_MB", "auto", f"an MPS memory limit, but {exc}"))
        return None
    if found is not None:
        return PluginLimit(found.mib, {}, f"MPS {found.source}")
    by_gpu = memory_limits(directories[0], env) if directories else None
    if not by_gpu:
        return None
    index, smallest = min(by_gpu.items(), key=lambda item: item[1])
    source = f"MPS NVML memory limits of {shown(directories[0])} (GPU {index}, the smallest)"
    return PluginLimit(smallest >> 20, {}, source)


def partition_total(env: Mapping[str, str]) -> int | None:
    """The GPU total CUDA reports under MPS memory partitioning (``cuMemGetInfo`` gives the
    hard limit as the total), in bytes; None where no partition is read. A framework that
    takes its cap as a fraction of the total takes it of this, never of the whole GPU."""
    found = _dmem(env, [])
    return None if found is None or found.default is None else found.default << 20


def _tightest(limits: list[PluginLimit]) -> PluginLimit:
    """Two hard shares both hold: the smaller cap for every GPU either names."""
    defaults = [limit.default for limit in limits if limit.default is not None]
    per_gpu: dict[int, int] = {}
    for index in {i for limit in limits for i in limit.per_gpu}:
        caps = [limit.per_gpu.get(index, limit.default) for limit in limits]
        per_gpu[index] = min(cap for cap in caps if cap is not None)
    source = "; ".join(limit.source for limit in limits) + ", the smaller per GPU"
    return PluginLimit(min(defaults) if defaults else None, per_gpu, source)


def _gpushare(env: Mapping[str, str], problems: list[Problem]) -> PluginLimit | None:
    """gpushare's advisory share: GiB, or MiB when the device total says the unit is MiB."""
    if GPUSHARE not in env:
        return None
    value = env[GPUSHARE].strip()
    device_total = digits(env.get(GPUSHARE_DEVICE, ""))
    in_mib = device_total is not None and device_total >= _MAX_GIB
    unit = "MiB" if in_mib else "GiB"
    amount = digits(value) or 0
    mib = amount if in_mib else amount * 1024
    if not 0 < mib <= _MAX_MIB:
        problems.append(
            Problem(GPUSHARE, env[GPUSHARE], f"expected a positive integer ({unit}), at most 1 TiB")
        )
        return None
    return PluginLimit(mib, {}, f"gpushare {GPUSHARE}={value} {unit}", enforced=False)


def _kai_limits(env: Mapping[str, str], problems: list[Problem]) -> PluginLimit | None:
    """KAI's enforced share (``nvfractions``): kai-gpu-fractioning's fractiond sets
    ``NVIDIA_GPU_MEMORY_LIMITS`` (and ``..._REQUESTS``) to whole MiB, one amount for every
    GPU of the container; nvidia-container-toolkit's ``apply-cuda-memory-limits`` hook
    reads it (or the singular ``NVIDIA_GPU_MEMORY_LIMIT``) and sets NVML memory limits."""
    name = next((n for n in KAI_LIMITS_NAMES if env.get(n, "").strip()), None)
    if name is None:
        return None
    mib = digits(env[name].strip())
    if not mib or mib > _MAX_MIB:
        problems.append(Problem(name, env[name], KAI_ACCEPTED))
        return None
    return PluginLimit(mib, {}, f"KAI {name}={env[name].strip()}")


def _kai_portion(env: Mapping[str, str], problems: list[Problem]) -> PluginLimit | None:
    """KAI's advisory share (``gpusharing``): ``GPU_PORTION`` of each GPU's memory, whose
    total NVML gives (nothing enforces it)."""
    value = env.get(KAI_PORTION, "").strip()
    if not value:
        return None
    portion = _fraction(value)
    if portion is None:
        problems.append(Problem(KAI_PORTION, env[KAI_PORTION], "expected a fraction above 0 "
                                "and at most 1, such as 0.50"))  # fmt: skip
        return None
    inventory = read_inventory(env)
    if not inventory.totals:
        why = inventory.problem or "NVML lists no GPU here"
        problems.append(Problem(KAI_PORTION, value, f"a portion of each GPU's memory, but {why}",
                                "set MEMORY_LIMIT_MB to a number of MiB"))  # fmt: skip
        return None
    shares = {i: int(total * portion) >> 20 for i, total in enumerate(inventory.totals)}
    source = f"KAI {KAI_PORTION}={value} of {sorted(set(t >> 20 for t in inventory.totals))} MiB"
    if len(set(shares.values())) == 1:
        return PluginLimit(shares[0], {}, source, enforced=False)
    return PluginLimit(None, shares, source, enforced=False)


def _fraction(value: str) -> float | None:
    """A fraction above 0 and at most 1, written as a plain decimal ("0.50")."""
    if not re.fullmatch(r"[0-9]*\.?[0-9]+", value):
        return None
    found = float(value)
    return found if 0 < found <= 1 else None


@dataclass(frozen=True)
class Plugin:
    """One GPU-sharing device plugin: what it sets in the container, and what grants it."""

    key: str  # how a manifest's grant names it
    name: str  # how messages name it
    variables: str  # the variables it sets, as messages list them
    hard: bool  # enforced below the framework (the cap keeps headroom), or advisory
    read: Callable[[Mapping[str, str], list[Problem]], PluginLimit | None]
    resource: str = ""  # the Kubernetes resource that grants the share ("": none)
    unit_mib: int = 1  # MiB per unit of that resource
    # (GPUs granted, amount of the resource) -> the variables the plugin sets in the container
    grant_env: Callable[[int, int], dict[str, str]] | None = None
    # the variables whose presence says the container runs under it (the usage record's)
    set_by: tuple[str, ...] = ()


# Every plugin MEMORY_LIMIT_MB=auto reads: hard shares first, then advisory ones, in order.
PLUGINS: tuple[Plugin, ...] = (
    Plugin(
        "hami",
        "HAMi",
        f"{HAMI_ALL}[_<i>]",
        True,
        _hami,
        "nvidia.com/gpumem",
        grant_env=lambda count, mib: {f"{HAMI_PREFIX}{i}": f"{mib}m" for i in range(count)},
        set_by=(HAMI_ALL,),
    ),
    Plugin("mps", "MPS", MPS, True, _mps, set_by=(MPS, MPS_PIPE)),
    Plugin("dmem", "MPS memory partitioning", "dmem.max", True, _dmem),
    Plugin("kai", "KAI", KAI_LIMITS, True, _kai_limits, set_by=(KAI_LIMITS,)),
    Plugin(
        "gpushare",
        "gpushare",
        GPUSHARE,
        False,
        _gpushare,
        "aliyun.com/gpu-mem",
        1024,
        lambda _count, gib: {GPUSHARE: str(gib)},
        set_by=(GPUSHARE,),
    ),
    Plugin("kai-portion", "KAI", KAI_PORTION, False, _kai_portion, set_by=(KAI_PORTION,)),
)


def read_plugin_limit(env: Mapping[str, str], problems: list[Problem]) -> PluginLimit | None:
    """The share a GPU-sharing device plugin gave this container, or None when none is set.

    Precedence: the hard shares (HAMi, MPS), the smaller per GPU when both are set; else
    the first advisory share (gpushare).
    """
    hard = [f for f in (p.read(env, problems) for p in PLUGINS if p.hard) if f is not None]
    if hard:
        return hard[0] if len(hard) == 1 else _tightest(hard)
    advisory = (p.read(env, problems) for p in PLUGINS if not p.hard)
    return next((found for found in advisory if found is not None), None)


def looked_for() -> str:
    """The plugins' variables, as an error about ``auto`` without a share lists them."""
    named = [f"{p.variables} ({p.name})" for p in PLUGINS]
    return ", ".join(named[:-1]) + " and " + named[-1]


def auto_without_share(env: Mapping[str, str]) -> tuple[str, str]:
    """What an error about ``auto`` with no share says: what is missing, and what to set.

    With ``CUDA_MPS_PIPE_DIRECTORY`` set, MPS is there but its limit lives on the control
    daemon (NVIDIA's DRA driver, NVIDIA's device plugin): the message says so, and names
    the two ways to give the cap.
    """
    missing = "auto takes the cap a GPU-sharing device plugin gave the container, but none is set"
    pipe = env.get(MPS_PIPE, "").strip()
    if not pipe:
        return missing, f"looked for {looked_for()}; set MEMORY_LIMIT_MB to a number"
    return (
        f"{missing}. MPS is there ({MPS_PIPE}={quote(pipe)}); its memory limit is not "
        "visible in the container: NVIDIA's DRA driver and device plugin set it on the MPS "
        "control daemon, and no dmem.max in the container's cgroups limits an NVIDIA GPU "
        "(MPS memory partitioning)",
        f"looked for {looked_for()}; set {MPS} to the claim's defaultPinnedDeviceMemoryLimit "
        "(such as 10G) and keep auto, or set MEMORY_LIMIT_MB to that limit in MiB minus the "
        "framework's headroom (`tfboot show` gives it)",
    )
