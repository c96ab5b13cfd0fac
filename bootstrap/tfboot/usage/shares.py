"""The GPU share a device plugin gave the job, as its record keeps it, and a suggested share
in each such plugin's own terms (pure).

``recorded`` keeps the plugins' variables from the process environment; ``in_terms`` gives
a share in MiB per GPU as each plugin the runs were under takes it:

- HAMi: ``CUDA_DEVICE_MEMORY_LIMIT=<MiB>m``, which HAMi sets from the resource
  ``nvidia.com/gpumem`` (MiB per GPU);
- MPS: ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=<n>M`` (per ordinal where the run's was); where
  only ``CUDA_MPS_PIPE_DIRECTORY`` was set (NVIDIA's DRA driver or device plugin keep the
  limit on the MPS daemon), the claim's ``defaultPinnedDeviceMemoryLimit``;
- KAI: the ``gpu-memory`` annotation in MiB (KAI sets ``NVIDIA_GPU_MEMORY_LIMITS`` or
  ``GPU_PORTION`` in the container);
- gpushare: ``aliyun.com/gpu-mem`` in GiB, rounded up (in MiB where the plugin counts in
  MiB, which its device total ``ALIYUN_COM_GPU_MEM_DEV`` shows, as node/deviceplugin.py reads it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ..node import deviceplugin
from ..node.deviceplugin import GPUSHARE_DEVICE, HAMI_ALL, HAMI_PREFIX, MPS

# plugin (as messages name it) -> the variables that say the container runs under it: from
# the one table of plugins (``node.deviceplugin.PLUGINS``), a plugin's rows joined
PLUGINS: dict[str, tuple[str, ...]] = {}
for _plugin in deviceplugin.PLUGINS:
    if _plugin.set_by:
        PLUGINS[_plugin.name] = PLUGINS.get(_plugin.name, ()) + _plugin.set_by
# what the record keeps: those, and gpushare's device total (its unit)
KEPT = (*(name for names in PLUGINS.values() for name in names), GPUSHARE_DEVICE)
MAX_VARIABLES = 64  # HAMi's per-GPU variables included
MAX_VALUE = 256
SOURCE = "the process environment when the report started"
GPUSHARE_MIB_FROM = 512  # a gpushare device total at least this is in MiB (deviceplugin.py)


def kept(name: str) -> bool:
    """A variable the record keeps: a plugin's, or HAMi's per GPU (``..._<i>``)."""
    suffix = name[len(HAMI_PREFIX) :] if name.startswith(HAMI_PREFIX) else ""
    return name in KEPT or (suffix.isascii() and suffix.isdigit())


def _plugins(variables: Mapping[str, str]) -> list[str]:
    hami = any(name.startswith(HAMI_PREFIX) for name in variables)
    return [plugin for plugin, names in PLUGINS.items()
            if any(n in variables for n in names) or (plugin == "HAMi" and hami)]  # fmt: skip


def recorded(env: Mapping[str, str]) -> dict[str, Any] | None:
    """The share variables set in ``env`` and the plugins they name; None: none set."""
    names = sorted(n for n in env if kept(n) and env[n].strip())[:MAX_VARIABLES]
    variables = {name: env[name].strip()[:MAX_VALUE] for name in names}
    plugins = _plugins(variables)
    if not plugins:
        return None
    return {"plugins": plugins, "variables": variables, "source": SOURCE}


def _mps(mib: int, variables: Mapping[str, str]) -> dict[str, Any]:
    value = variables.get(MPS)
    if value is None:  # the limit is the daemon's: a DRA claim's MPS config sets it
        return {"claim": {"defaultPinnedDeviceMemoryLimit": f"{mib}Mi"}}
    ordinals = [part.partition("=")[0].strip() for part in value.split(",") if "=" in part]
    ordinals = [ordinal for ordinal in ordinals if ordinal.isascii() and ordinal.isdigit()]
    if ordinals:
        return {"env": {MPS: ",".join(f"{ordinal}={mib}M" for ordinal in ordinals)}}
    return {"env": {MPS: f"{mib}M"}}


def _gpushare(mib: int, variables: Mapping[str, str]) -> dict[str, Any]:
    total = variables.get(GPUSHARE_DEVICE, "")
    in_mib = total.isdigit() and int(total) >= GPUSHARE_MIB_FROM
    amount = mib if in_mib else math.ceil(mib / 1024)
    return {"resources": {"limits": {"aliyun.com/gpu-mem": str(amount)}},
            "unit": "MiB" if in_mib else "GiB"}  # fmt: skip


def _terms(plugin: str, mib: int, variables: Mapping[str, str]) -> dict[str, Any]:
    if plugin == "HAMi":
        return {"env": {HAMI_ALL: f"{mib}m"},
                "resources": {"limits": {"nvidia.com/gpumem": str(mib)}}}  # fmt: skip
    if plugin == "MPS":
        return _mps(mib, variables)
    if plugin == "KAI":
        return {"annotations": {"gpu-memory": str(mib)}}
    return _gpushare(mib, variables)


def in_terms(mib: int, shares: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``mib`` per GPU as each plugin named in ``shares`` (records' ``gpu_share``) takes it;
    a variable's first recorded value counts."""
    variables: dict[str, str] = {}
    for share in shares:
        for name, value in share["variables"].items():
            variables.setdefault(name, value)
    named = {plugin for share in shares for plugin in share["plugins"]}
    return {plugin: _terms(plugin, mib, variables) for plugin in PLUGINS if plugin in named}


def shown(terms: dict[str, dict[str, Any]]) -> list[str]:
    """Each plugin's terms in a few words: ``HAMi nvidia.com/gpumem=1872``."""
    found = []
    for plugin, given in terms.items():
        pairs = [
            *given.get("resources", {}).get("limits", {}).items(),
            *given.get("annotations", {}).items(),
            *given.get("claim", {}).items(),
        ]
        pairs = pairs or list(given.get("env", {}).items())
        found.append(f"{plugin} " + " ".join(f"{k}={v}" for k, v in pairs))
    return found
