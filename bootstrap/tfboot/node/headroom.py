"""The GPU memory each framework holds outside its own pool: what a share must keep free.

A GPU share (HAMi's, MPS's, KAI's, gpushare's) is counted by its enforcer over everything
the process holds on the GPU: the CUDA context, cuBLAS and cuDNN handles and workspaces,
loaded kernels, and NCCL's buffers, all outside the pool the framework's cap bounds. So
``MEMORY_LIMIT_MB=auto`` caps the pool at the share minus the framework's headroom, from
measurements (docs/gpu-memory.md):

- TensorFlow: its own rule where it sizes its pool, 1536 MiB on compute capability 8.0
  and later (``MinSystemMemory``, tensorflow/core/common_runtime/gpu/gpu_device.cc; 1050
  MiB on 7.x), which any ``memory_limit`` bypasses;
- PyTorch: 694 MiB outside its caching allocator on an H200 after a cuDNN convolution with
  backward and a bf16 matmul (516 MiB before); 1024 MiB keeps a third above it;
- JAX: 626 MiB outside its pool after the same work (550 before, 618 after a Keras fit);
- NCCL: its communicators take 0.5 to over 1 GiB per GPU, outside every pool (nccl#964,
  #1685), added wherever NCCL will run: several GPUs visible, or a cluster.

``MEMORY_HEADROOM_MB`` replaces the figure. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

VARIABLE = "MEMORY_HEADROOM_MB"
# The frameworks a budget is planned for, by module name, as messages name them.
NAMES = {"tensorflow": "TensorFlow", "jax": "JAX", "torch": "PyTorch"}
# framework module -> (MiB, why)
BASE: dict[str, tuple[int, str]] = {
    "tensorflow": (1536, "TensorFlow's own reserve beside its pool on compute capability 8.0+"),
    "torch": (1024, "PyTorch held up to 694 MiB outside its pool on an H200"),
    "jax": (1024, "JAX held up to 626 MiB outside its pool on an H200"),
}
NCCL_MIB = 1024
VISIBLE = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")


@dataclass(frozen=True)
class Headroom:
    """The MiB a framework keeps free below a share, and why."""

    mib: int
    why: str

    def shown(self, framework: str) -> str:
        return f"{self.mib} MiB of headroom for {framework} ({self.why})"


def several_gpus(env: Mapping[str, str], shares: int = 0) -> bool:
    """True when the container sees more than one GPU: ``CUDA_VISIBLE_DEVICES`` (else the
    NVIDIA runtime's ``NVIDIA_VISIBLE_DEVICES``) lists several, or a share names several."""
    for name in VISIBLE:
        value = env.get(name, "").strip()
        if value and value.lower() not in ("all", "none", "void"):
            return len([part for part in value.split(",") if part.strip()]) > 1 or shares > 1
    return shares > 1


def headroom(module: str, nccl: str = "", given: tuple[int, str] | None = None) -> Headroom:
    """``module``'s headroom; ``nccl``: why NCCL will run ("": it will not); ``given``:
    ``MEMORY_HEADROOM_MB`` as (MiB, how it is shown)."""
    if given is not None:
        return Headroom(given[0], given[1])
    if module not in BASE:  # never another framework's figure: tests/test_limits.py
        raise KeyError(f"no GPU headroom declared for {module!r} (node/headroom.py BASE)")
    mib, why = BASE[module]
    if nccl:
        return Headroom(mib + NCCL_MIB, f"{why}, and {NCCL_MIB} MiB for NCCL: {nccl}")
    return Headroom(mib, why)


def headroom_table() -> str:
    """The default headrooms, as messages list them: "TensorFlow 1536 MiB, ..."."""
    return ", ".join(f"{NAMES[m]} {mib} MiB" for m, (mib, _why) in BASE.items()) + (
        f", {NCCL_MIB} MiB more where NCCL runs"
    )
