"""The devices CUDA lists, from ``CUDA_VISIBLE_DEVICES`` as it was before tfboot narrowed it.

tfboot narrows ``CUDA_VISIBLE_DEVICES`` for PyTorch; the record of its writes
(``provenance``) keeps the value before, so a child process, or a second framework,
counts ``VISIBLE_GPU`` from the same list, while a value the user set since is theirs.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..provenance import TFBOOT, before, writer
from .visible import CUDA_VISIBLE, parse_devices


def cuda_devices(env: Mapping[str, str], gpu_count: int) -> tuple[list[str], bool]:
    """The devices CUDA lists before tfboot narrows them, and whether tfboot already did.

    From ``CUDA_VISIBLE_DEVICES`` (as it was before tfboot narrowed it, as CUDA reads it:
    ``node.visible``), else NVML's ``gpu_count`` indexes.
    """
    narrowed = writer(env, CUDA_VISIBLE) == TFBOOT
    source = before(env, CUDA_VISIBLE)
    if source is None:
        return [str(i) for i in range(gpu_count)], narrowed
    return parse_devices(CUDA_VISIBLE, source).cuda(gpu_count), narrowed
