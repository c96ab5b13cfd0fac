"""The one rule from a GPU share to a framework's cap: the share minus what the framework
holds on the GPU outside its pool.

A GPU share (HAMi's, MPS's, KAI's, gpushare's) is counted by its enforcer over everything
the process holds on the GPU: the CUDA context, cuBLAS and cuDNN handles and workspaces,
loaded kernels, and NCCL's buffers, all outside the pool the framework's cap bounds. So
``MEMORY_LIMIT_MB=auto`` caps the pool at the share (``Settings.share``, a fact the contract
read) minus the framework's headroom, which its adapter declares (``HEADROOM``,
docs/gpu-memory.md), plus NCCL's where NCCL will run: a cluster an engine forms, or several
GPUs visible (its communicators take 0.5 to over 1 GiB per GPU, outside every pool:
nccl#964, #1685). ``MEMORY_HEADROOM_MB`` replaces the figure. ``VIRTUAL_SPLIT`` is checked
against the caps it gives.

The import, ``tfboot show``, ``doctor``, the usage report's suggestion, ``manifests`` and
``inject --memory-from-claims`` all take a framework's cap from ``with_caps``. Pure.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import SHARE_BELOW_ROOM, ConfigError, Problem
from ..node.visible import visible_count
from ..settings import HEADROOM, Settings, resolve, split_problems

if TYPE_CHECKING:
    from ..cluster.variables import ClusterSettings

NCCL_MIB = 1024


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
    count = visible_count(env)
    return (count is not None and count > 1) or shares > 1


def with_nccl(declared: Headroom, nccl: str) -> Headroom:
    """``declared`` with NCCL's share added where NCCL will run (``nccl``: why; "": it will not)."""
    if not nccl:
        return declared
    return Headroom(declared.mib + NCCL_MIB, f"{declared.why}, and {NCCL_MIB} MiB for NCCL: {nccl}")


def headroom(settings: Settings, env: Mapping[str, str], declared: Headroom | None,
             framework: str) -> Headroom:  # fmt: skip
    """What ``framework`` keeps free below a share: ``MEMORY_HEADROOM_MB``, else the figure
    its adapter ``declared``, with NCCL's where NCCL will run. A framework that reads a
    GPU cap and declared none is tfboot's own fault (``tests/test_limits.py``)."""
    if settings.memory_headroom_mb is not None:
        return Headroom(settings.memory_headroom_mb, f"{HEADROOM}={settings.given[HEADROOM][0]}")
    if declared is None:
        raise KeyError(f"no GPU headroom declared for {framework} (its adapter's HEADROOM)")
    return with_nccl(declared, nccl_reason(settings, env))


def nccl_reason(settings: Settings, env: Mapping[str, str]) -> str:
    """Why NCCL will run in this process ("": it will not): an engine forms a group, or
    several GPUs are visible (``VISIBLE_GPU`` naming one leaves one)."""
    visible = settings.visible_gpu
    nccl = _group(settings.distributed, settings.cluster, env)
    shares = len(settings.share.per_gpu) if settings.share is not None else 0
    if not nccl and (visible is None or len(visible) > 1) and several_gpus(env, shares):
        nccl = "several GPUs visible"
    return nccl


def _group(mode: str, cluster: ClusterSettings | None, env: Mapping[str, str]) -> str:
    """Why a group of processes will form here ("": none will): the engine ``DISTRIBUTED``
    finds, unless it finds none (a single node, a Slurm batch script outside srun)."""
    if mode == "off" or cluster is None:
        return ""
    from ..cluster.engines import BY_NAME, detect

    engine = BY_NAME.get(detect(mode, cluster, env))
    if engine is None or engine.outside(env):
        return ""
    found = engine.name
    return f"DISTRIBUTED={mode}" if mode == found else f"DISTRIBUTED={mode} found {found}"


def cap_below(share_mib: int, room: Headroom) -> int | None:
    """The cap below a share of ``share_mib`` MiB that leaves ``room``; None where the share
    leaves nothing (at or below the headroom)."""
    cap = share_mib - room.mib
    return cap if cap > 0 else None


def with_caps(settings: Settings, env: Mapping[str, str], declared: Headroom | None,
              framework: str) -> Settings:  # fmt: skip
    """``settings`` with ``framework``'s caps below the share ``MEMORY_LIMIT_MB=auto`` read
    (unchanged without one): the share minus the headroom, the source saying both. A share
    at or below the headroom, or a ``VIRTUAL_SPLIT`` the caps cannot hold, is a
    ``ConfigError`` naming them."""
    share = settings.share
    if share is None:
        return settings
    room = headroom(settings, env, declared, framework)
    problems: list[Problem] = []

    def cap(mib: int | None, where: str) -> int | None:
        below = None if mib is None else cap_below(mib, room)
        if mib is None or below is not None:
            return below
        problems.append(
            Problem(
                "MEMORY_LIMIT_MB",
                "auto",
                f"the share of {mib} MiB{where} ({share.source}) is at or below "
                f"{room.shown(framework)}: nothing would be left for {framework}'s pool",
                f"ask for a larger share, set {HEADROOM} lower, or set MEMORY_LIMIT_MB to a number",
                kind=SHARE_BELOW_ROOM,
            )
        )
        return None

    caps = {i: cap(mib, f" for GPU {i}") for i, mib in sorted(share.per_gpu.items())}
    per_gpu = {i: c for i, c in caps.items() if c is not None}
    default = cap(share.default, "")
    problems += split_problems(settings.virtual_split, [default, *per_gpu.values()])
    if problems:
        raise ConfigError(problems)
    how = "enforced" if share.enforced else "advisory"
    given = dict(settings.given)
    given["MEMORY_LIMIT_MB"] = (
        given["MEMORY_LIMIT_MB"][0], f"{share.source} ({how}) minus {room.shown(framework)}"
    )  # fmt: skip
    return dataclasses.replace(settings, memory_limit_mb=default, memory_limit_per_gpu=per_gpu,
                               given=given)  # fmt: skip


def settings_for(adapter: Any, env: Mapping[str, str]) -> Settings:
    """The settings ``adapter``'s framework applies in ``env``: the contract as it reads it
    (``READS``, ``MIRRORS``), and its caps below a share (``HEADROOM``, ``NAME``)."""
    settings = resolve(env, adapter.READS, adapter.MIRRORS)
    return with_caps(settings, env, adapter.HEADROOM, adapter.NAME)
