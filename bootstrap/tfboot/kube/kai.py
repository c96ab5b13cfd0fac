"""KAI Scheduler's fractional GPUs: the share a Pod's annotations ask for, and who gets it.

Read from NVIDIA/KAI-Scheduler at commit 72de64fc (2026-03-07, after v0.13.0):
``pkg/common/constants/constants.go`` (the keys), ``pkg/common/resources/gpu_sharing.go``
and ``pkg/binder/plugins/gpusharing/gpu-request/gpu_request_validator.go`` (the values),
``pkg/binder/common/gpu_access.go`` (the container), ``docs/gpu-sharing/``.

A Pod with ``schedulerName: kai-scheduler`` asks through annotations on the Pod:

- ``gpu-fraction``: a portion of one GPU's memory, above 0 and below 1, such as ``"0.5"``;
- ``gpu-memory``: MiB of one GPU, a positive integer, such as ``"4096"``; not with
  ``gpu-fraction``, nor with an ``nvidia.com/gpu`` limit (``gpu-fraction`` neither);
- ``gpu-fraction-num-devices``: that share on each of N GPUs (1 when unset);
- ``gpu-fraction-container-name``: the container (an init container too) that gets it;
  else the first container.

The binder refuses any other combination. What the container then sees depends on how
the cluster runs KAI: ``gpusharing`` sets ``GPU_PORTION`` (``%.2f`` of the GPU) and
enforces nothing; ``nvfractions`` sets ``NVIDIA_GPU_MEMORY_LIMITS`` (MiB), enforced
through NVML memory limits (/work/shared/notes/gpu-shares.md). Pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SCHEDULER = "kai-scheduler"
FRACTION = "gpu-fraction"
MEMORY = "gpu-memory"
DEVICES = "gpu-fraction-num-devices"
CONTAINER = "gpu-fraction-container-name"
WHOLE_GPU = "nvidia.com/gpu"
# What Go's strconv.ParseFloat reads as a finite decimal (no sign: the value is above 0).
_DECIMAL = re.compile(r"^(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")


@dataclass(frozen=True)
class KaiShare:
    """The share a KAI Pod asks for: on ``devices`` GPUs, ``memory_mib`` or ``fraction`` of
    each, for ``container``; ``invalid``: what the binder refuses (then no share)."""

    container: str
    devices: int = 0
    memory_mib: int | None = None
    fraction: float | None = None
    invalid: tuple[str, ...] = ()

    def asked(self) -> str:
        """The annotations as a message quotes them."""
        what = (
            f'{MEMORY}: "{self.memory_mib}"'
            if self.memory_mib is not None
            else f'{FRACTION}: "{self.fraction:g}"'
        )
        return what + (f' on {self.devices} GPUs ({DEVICES}: "{self.devices}")'
                       if self.devices > 1 else "")  # fmt: skip


def _annotations(template: Mapping[str, Any]) -> Mapping[str, Any]:
    metadata = template.get("metadata")
    found = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    return found if isinstance(found, Mapping) else {}


def _text(annotations: Mapping[str, Any], key: str, invalid: list[str]) -> str | None:
    """An annotation's value; a value that is not a string is invalid (the API server
    refuses it)."""
    value = annotations.get(key)
    if value is None or isinstance(value, str):
        return value
    invalid.append(f'{key}: {value!r} is not a string: quote it ({key}: "{value}")')
    return None


def _fraction(value: str | None, invalid: list[str]) -> float | None:
    number = float(value) if value is not None and _DECIMAL.match(value) else None
    if value is not None and (number is None or not 0 < number < 1):
        invalid.append(f"{FRACTION}={value!r}: expected a portion above 0 and below 1 such as 0.5")
        return None
    return number


def _count(key: str, value: str | None, invalid: list[str], what: str) -> int | None:
    if value is None:
        return None
    if value.isascii() and value.isdigit() and int(value) > 0:
        return int(value)
    invalid.append(f"{key}={value!r}: expected {what}")
    return None


def _whole_gpus(pod: Mapping[str, Any]) -> bool:
    """Whether any container has an ``nvidia.com/gpu`` limit (the binder's test)."""
    specs = [*(pod.get("containers") or []), *(pod.get("initContainers") or [])]
    return any(
        isinstance(s, Mapping) and WHOLE_GPU in ((s.get("resources") or {}).get("limits") or {})
        for s in specs
    )


def _target(pod: Mapping[str, Any], named: str | None, invalid: list[str]) -> str:
    """The container that gets the share: the named one, else the first container."""
    names = [str(s.get("name")) for key in ("initContainers", "containers")
             for s in pod.get(key) or [] if isinstance(s, Mapping)]  # fmt: skip
    first = next((str(s.get("name")) for s in pod.get("containers") or []
                  if isinstance(s, Mapping)), "")  # fmt: skip
    if named is not None and named not in names:
        invalid.append(f"{CONTAINER}={named!r}: the Pod has no container of that name")
        return first
    return named if named is not None else first


def kai_share(template: Mapping[str, Any]) -> KaiShare | None:
    """The share a Pod template (its ``metadata`` and ``spec``) asks KAI for; None when
    it is not scheduled by KAI or asks for no fraction."""
    pod = template.get("spec")
    annotations = _annotations(template)
    if not isinstance(pod, Mapping) or pod.get("schedulerName") != SCHEDULER:
        return None
    if not any(key in annotations for key in (FRACTION, MEMORY, DEVICES)):
        return None
    invalid: list[str] = []
    keys = (FRACTION, MEMORY, DEVICES, CONTAINER)
    texts = {key: _text(annotations, key, invalid) for key in keys}
    fraction = _fraction(texts[FRACTION], invalid)
    memory = _count(MEMORY, texts[MEMORY], invalid, "a whole number of MiB above 0 such as 4096")
    devices = _count(DEVICES, texts[DEVICES], invalid, "a whole number of GPUs above 0")
    given = [key for key in (FRACTION, MEMORY) if texts[key] is not None]
    if len(given) == 2:
        invalid.append(f"both {FRACTION} and {MEMORY}: ask for one of them")
    elif not given:
        invalid.append(f"{DEVICES} without {FRACTION} or {MEMORY}: ask for one of them")
    if given and _whole_gpus(pod):
        invalid.append(f"{given[0]} with an {WHOLE_GPU} limit: ask for whole GPUs or a share")
    container = _target(pod, texts[CONTAINER], invalid)
    if invalid:
        return KaiShare(container, invalid=tuple(invalid))
    return KaiShare(container, devices or 1, memory, fraction)
