"""XLA's CUDA toolchain (``ptxas``, ``libdevice``) for ``XLA_JIT=true`` on a pip-installed
TensorFlow.

A CUDA build of TensorFlow installed from pip has no CUDA toolkit beside it, and XLA then
fails to compile for the GPU for want of ``ptxas`` and ``libdevice``
(tensorflow/tensorflow#58681, #57055, #60790; conda-forge/tensorflow-feedstock#420). The
fix users copy by hand is ``XLA_FLAGS=--xla_gpu_cuda_data_dir=`` pointing at the
``nvidia-cuda-nvcc`` pip package. tfboot does it for them: the user's own ``XLA_FLAGS`` is
kept and extended, never overwritten, and with no toolkit anywhere one warning names both
remedies.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from ..provenance import before
from .xlaflags import flag, value

FLAG = "--xla_gpu_cuda_data_dir"
PACKAGE = "nvidia.cuda_nvcc"  # the nvidia-cuda-nvcc-cu12 (or -cu13) pip package
# Where users keep a toolkit that XLA does not look in by itself: its CandidateCudaRoots
# (xla/tsl/platform/default/cuda_root_path.cc) reads no variable, so a toolkit named only
# here is given to XLA through the flag.
TOOLKITS = ("CUDA_HOME", "CUDA_PATH")
DEFAULT_TOOLKIT = "/usr/local/cuda"  # where XLA itself looks when no flag names one


@dataclass(frozen=True)
class Toolchain:
    """What to do for XLA: the ``XLA_FLAGS`` to set (None: leave it), and why."""

    xla_flags: str | None
    decision: str
    warning: str = ""


def has_toolchain(directory: str) -> bool:
    """``directory`` holds what XLA needs: ``nvvm/libdevice`` and ``bin/ptxas``."""
    return os.path.isdir(os.path.join(directory, "nvvm", "libdevice")) and os.path.isfile(
        os.path.join(directory, "bin", "ptxas")
    )


def pip_toolchain() -> str | None:
    """The ``nvidia-cuda-nvcc`` pip package's directory, when installed and complete."""
    from importlib.util import find_spec

    try:
        spec = find_spec(PACKAGE)
    except (ImportError, ValueError):
        return None
    for location in (spec.submodule_search_locations or []) if spec else []:
        if has_toolchain(location):
            return str(location)
    return None


def plan_toolchain(
    env: Mapping[str, str], found: str | None, default: str = DEFAULT_TOOLKIT
) -> Toolchain:
    """For a CUDA build with XLA_JIT on: point XLA at a toolkit in ``$CUDA_HOME`` or
    ``$CUDA_PATH`` (which XLA does not read), else at ``found`` (the pip package), unless
    ``XLA_FLAGS`` names a toolkit or XLA finds one itself (``default``)."""
    # The user's flags: tfboot's own earlier extension (a parent's, inherited) is not theirs.
    flags = before(env, "XLA_FLAGS") or ""
    if value(flags, FLAG) is not None:
        return Toolchain(None, "XLA's CUDA toolkit left to XLA_FLAGS (explicit)")
    if has_toolchain(default):
        return Toolchain(None, f"XLA's CUDA toolkit found by XLA at {default}")
    named = next(((n, env[n]) for n in TOOLKITS if env.get(n) and has_toolchain(env[n])), None)
    if named is not None:
        extended = f"{flags.strip()} {flag(FLAG, named[1])}".strip()
        return Toolchain(extended, f"XLA_FLAGS gets {FLAG}={named[1]} (${named[0]}, which XLA "
                                   "does not read itself)")  # fmt: skip
    if found is not None:
        extended = f"{flags.strip()} {flag(FLAG, found)}".strip()
        return Toolchain(
            extended, f"XLA_FLAGS gets {FLAG}={found} (the nvidia-cuda-nvcc pip package)"
        )
    return Toolchain(
        None,
        "",
        "XLA_JIT=true on a CUDA build of TensorFlow, but XLA will find no ptxas or "
        f"libdevice: no CUDA toolkit at {DEFAULT_TOOLKIT}, $CUDA_HOME or $CUDA_PATH, and no "
        "nvidia-cuda-nvcc pip package; pip install nvidia-cuda-nvcc-cu12 (tfboot then points "
        f"XLA at it), or set XLA_FLAGS={FLAG}=<a CUDA toolkit directory>",
    )
