"""The devices CUDA lists, from ``CUDA_VISIBLE_DEVICES`` as it was before tfboot narrowed it."""

from __future__ import annotations

from collections.abc import Mapping

CUDA_VISIBLE = "CUDA_VISIBLE_DEVICES"
# What CUDA_VISIBLE_DEVICES was before tfboot narrowed it for PyTorch ("-" when unset): a
# child process, or a second framework, then counts VISIBLE_GPU from the same list.
CUDA_VISIBLE_BASE = "TFBOOT_CUDA_VISIBLE_BASE"
UNSET = "-"


def cuda_devices(env: Mapping[str, str], gpu_count: int) -> tuple[list[str], bool]:
    """The devices CUDA lists before tfboot narrows them, and whether tfboot already did.

    From ``CUDA_VISIBLE_DEVICES`` (as set before tfboot, see ``CUDA_VISIBLE_BASE``), else
    NVML's ``gpu_count`` indexes.
    """
    current = env.get(CUDA_VISIBLE)
    base = env.get(CUDA_VISIBLE_BASE)
    narrowed = base is not None and current is not None
    source = (base if base != UNSET else None) if narrowed else current
    if source is None:
        return [str(i) for i in range(gpu_count)], narrowed
    entries = [e.strip() for e in source.split(",")]
    listed: list[str] = []
    for entry in entries:  # CUDA stops at the first entry it cannot use
        if not entry or entry.startswith("-") or (entry.isdigit() and int(entry) >= gpu_count):
            break
        listed.append(entry)
    return listed, narrowed
