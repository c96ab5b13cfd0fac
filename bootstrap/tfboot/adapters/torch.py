"""PyTorch's plan: ``CUDA_VISIBLE_DEVICES``, the caching allocator's cap, and its two pools.

Pure: no PyTorch import. PyTorch starts CUDA at its first CUDA call, not at import, so
everything is applied at ``import torch``:

- ``VISIBLE_GPU``: ``CUDA_VISIBLE_DEVICES`` narrowed to the chosen GPUs. PyTorch has no
  other way, and the variable is the process's: other frameworks see the same GPUs.
- ``MEMORY_LIMIT_MB``: ``torch.cuda.set_per_process_memory_fraction`` on each GPU, set when
  CUDA starts, as the cap over the total the caching allocator multiplies the fraction by
  (``fraction_of``): under an MPS limit or partition that total can be the share, not the
  GPU, and the cap PyTorch enforces is then the cap asked for.
- ``MEMORY_GROWTH=true`` is what PyTorch's caching allocator always does; ``false``
  (preallocate) is refused.
- ``CPU_THREADS``: ``torch.set_num_threads`` (unless ``OMP_NUM_THREADS`` is set, which
  PyTorch reads itself) and ``torch.set_num_interop_threads``.
- ``DISTRIBUTED``: the variables ``init_process_group()`` reads (``cluster.launch``).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..budget import FRAMEWORK_READS, Budget
from ..budget.caps import Headroom
from ..budget.gpus import no_gpu
from ..budget.roles import NAMES, Role, decide
from ..errors import ConfigError, Problem
from ..node.cuda import CUDA_VISIBLE, cuda_devices
from ..node.nvml import read_inventory
from ..node.shm import SharedMemory, read_shm
from ..node.versions import Version
from ..provenance import user_value
from ..settings import Settings
from . import Call, Patch, Peak, Plan, Read, release_memory

MODULE = "torch"
NAME = NAMES[MODULE]
QUALIFIED = True
OLDEST = {MODULE: (2, 4)}
DISTRIBUTIONS = ()
READS = FRAMEWORK_READS
PREFIX = "torch."
# 694 MiB outside its caching allocator on an H200 after a cuDNN convolution with backward
# and a bf16 matmul (516 MiB before); 1024 MiB keeps a third above it (budget.caps).
HEADROOM = Headroom(1024, "PyTorch held up to 694 MiB outside its pool on an H200")
MIRRORS: dict[str, str] = {}
STAGES = ("before", "after")
REPORTED_BY = ""  # it reports its own invalid settings
SETS = ()  # it sets none of the variables tfboot reads as a user's while it imports
# The variables PyTorch sizes its intra-op pool from, the later winning
# (aten/src/ATen/ParallelCommon.cpp, PyTorch 2.13, ``intraop_default_num_threads``).
THREAD_ENVS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
WRITES = (CUDA_VISIBLE,)
# What the caching allocator multiplies ``set_per_process_memory_fraction``'s fraction by
# (c10/cuda/CUDACachingAllocator.cpp, ``setMemoryFraction``; read from the libc10_cuda.so of
# every release from 2.4.0 to 2.15.0): the total ``cudaMemGetInfo`` reports before 2.10
# (under an MPS limit or partition, or HAMi's hooks, the share); from 2.10 the device's
# ``totalGlobalMem``, as ``get_device_properties`` reports it. The ``cudaMallocAsync``
# backend's allocator takes ``cudaMemGetInfo``'s total at every one of those versions.
DEVICE_TOTAL_FROM = (2, 10)
MEM_GET_INFO = "mem_get_info"  # torch.cuda.mem_get_info: cudaMemGetInfo's (free, total)
DEVICE_TOTAL = "get_device_properties"  # torch.cuda.get_device_properties(i).total_memory


def LAUNCH(*args: Any) -> Any:
    """Its values for a task of a cluster (``cluster.launch.plan_torch``), loaded only where
    ``DISTRIBUTED`` is not off (no cluster code otherwise)."""
    from ..cluster.launch import plan_torch

    return plan_torch(*args)


def env_threads(env: Mapping[str, str]) -> tuple[str, str] | None:
    """The variable and value PyTorch takes its thread count from, or None.

    PyTorch's Linux wheels are OpenMP builds: the count comes from MKL and OpenMP, which
    read each as a whole number above 0 with blanks around it (libgomp also takes a comma
    list, its first number counting), ``MKL_NUM_THREADS`` over ``OMP_NUM_THREADS``. A value
    with anything else (``1abc``) is ignored by them (run on PyTorch 2.13.0+cpu: 2 threads
    on 2 CPUs), so it does not count. (``ParallelCommon.cpp``'s ``std::stoi`` sizes only the
    native backend, which these wheels do not use.)
    """
    found = None
    for name in THREAD_ENVS:
        value = user_value(env, name)
        match = re.fullmatch(r"\s*([0-9]+)\s*(,[\s0-9,]*)?", value or "")
        if value is not None and match and int(match.group(1)) > 0:
            found = (name, value)
    return found


def fraction_of(version: Version | None, backend: str) -> str:
    """Which total PyTorch ``version``'s allocator (``backend``, as
    ``torch.cuda.get_allocator_backend`` names it) takes the per-process fraction of:
    ``MEM_GET_INFO`` or ``DEVICE_TOTAL``; an unknown version is taken as the newest."""
    if backend == "cudaMallocAsync" or (version is not None and version < DEVICE_TOTAL_FROM):
        return MEM_GET_INFO
    return DEVICE_TOTAL


def role(importing: Sequence[str], taken: Sequence[str], backend: Callable[[], str]) -> Role:
    """PyTorch runs the model, or came along with TensorFlow or Keras on another backend."""
    return decide(MODULE, importing, backend)


def facts(stage: str, budget: Budget, read: Read) -> dict[str, Any]:
    """Whether this process is torchrun itself; ``after``: the devices CUDA will list on a
    CUDA build, and whether CUDA started."""
    agent = None
    if budget.settings.cluster is not None:  # the cluster's code loads only when it is used
        from ..cluster.launch import torchrun_options

        agent = torchrun_options(getattr(sys, "orig_argv", sys.argv))
    if stage != "after":
        return {"agent": agent}
    cuda_build = read.attr("version.cuda") is not None
    devices: list[str] = []
    if cuda_build and budget.settings.device_given():
        devices = cuda_devices(budget.env, read_inventory(budget.env).count)[0]
    return {"devices": devices, "started": bool(read.call("cuda.is_initialized")), "agent": agent,
            "shm": read_shm()}  # fmt: skip


def plan(stage: str, budget: Budget, facts: Mapping[str, Any]) -> Plan:
    """``before``: what PyTorch cannot apply, refused before its code runs; ``after``: the
    plan, applied before CUDA starts."""
    if stage == "before":
        refusals_only = Plan(NAME, budget.role)
        refusals(refusals_only, budget.settings)
        refusals_only.check()
        if budget.settings.cluster is not None and budget.role.runs_model:
            budget.launch(NAME, LAUNCH, agent=facts["agent"])  # raises before PyTorch's code runs
        return refusals_only
    made = plan_torch(budget, facts["devices"], facts["agent"], facts["shm"])
    if facts["started"]:
        raise ConfigError(
            Problem(
                "",
                None,
                "PyTorch's CUDA had already started before tfboot applied the configuration",
                "set the variables before the first CUDA call",
            )
        )
    return made


def plan_torch(budget: Budget, devices: list[str], agent: tuple[str, ...] | None = None,
               shm: SharedMemory | None = None) -> Plan:  # fmt: skip
    """PyTorch's plan; ``devices``: what CUDA lists before narrowing (see ``cuda_devices``);
    ``agent``: this process is torchrun itself, with these options of its own; ``shm``:
    ``/dev/shm``, where DataLoader workers pass their batches."""
    settings, env = budget.settings, budget.env
    plan = Plan(NAME, budget.role)
    refusals(plan, settings)
    caps = None
    if devices and settings.visible_gpu != ():
        caps = _plan_gpus(plan, budget, devices)
    else:
        warning = no_gpu(settings, bool(devices), NAME, plan.role.runs_model)
        plan.warnings += [warning] if warning else []
        if devices:
            _narrow(plan, env, "")
            plan.decisions.append(f"no GPU: {CUDA_VISIBLE}= ({settings.shown('VISIBLE_GPU')})")
    threads = budget.threads(NAME)
    plan.warnings += threads.warnings
    if threads.count is not None:
        explicit = env_threads(env)
        if explicit is None:
            follows = "; followed while the job runs" if settings.cpu_threads == "auto" else ""
            plan.decisions.append(f"intra-op threads {threads.count} ({threads.why}{follows})")
            plan.calls.append(_threads("set_num_threads", threads.count, plan.decisions[-1]))
        else:
            plan.decisions.append(
                f"intra-op threads left to {explicit[0]}={explicit[1]} (explicit)"
            )
        plan.decisions.append(f"inter-op threads {threads.count} ({threads.why})")
        plan.calls.append(_threads("set_num_interop_threads", threads.count, plan.decisions[-1]))
    release_memory(plan, budget)
    if threads.count is not None and settings.cpu_threads == "auto" and env_threads(env) is None:
        why = "intra-op threads follow the CPU quota while the job runs"
        plan.calls.append(Patch("torch threads follow", (threads.count, budget.cpu.quota), why))
    if settings.cluster is not None and plan.role.runs_model:
        plan.cluster = budget.launch(NAME, LAUNCH, agent=agent)
        plan.environ.update(plan.cluster.environ)
        plan.warnings += plan.cluster.warnings
        deadline = plan.cluster.launch.deadline if plan.cluster.launch else None
        if deadline is not None:
            needs = ("distributed.init_process_group",)
            plan.calls.append(Patch("torch deadline", deadline, plan.cluster.line(), needs))
    _loader(plan, budget, shm)
    if caps is not None:
        plan.calls.append(caps)  # queued for CUDA's start, after the pools are sized
    plan.check()
    return plan


def _loader(plan: Plan, budget: Budget, shm: SharedMemory | None) -> None:
    """DataLoader workers against the CPU quota and ``/dev/shm`` (``executor.loader``); a
    ``/dev/shm`` smaller than a loader plausibly needs is said in the line."""
    if shm is not None and shm.small:
        plan.decisions.append(f"{shm.describe()}: DataLoader workers pass their batches "
                              "through it (checked when a loader starts)")  # fmt: skip
    quiet = budget.settings.control.log == "quiet"
    needs = (
        "utils.data.dataloader._MultiProcessingDataLoaderIter",
        "UntypedStorage._new_shared",
        "utils.data._utils.worker._worker_loop",
    )
    args = (budget.cpu.quota, budget.cpu.quota_source, quiet)
    plan.calls.append(Patch("torch loader", args, "DataLoader workers checked", needs))


def _threads(name: str, count: int, reason: str) -> Call:
    return Call(name, (count,), reason, name)


def refused(described: str, exc: Exception, applied: list[str]) -> Problem:
    """PyTorch refuses a thread count once its pools have started."""
    return Problem(
        "CPU_THREADS",
        None,
        f"PyTorch refused its thread count ({exc})",
        "set the variables before PyTorch's first parallel work",
    )


def refusals(plan: Plan, settings: Settings) -> None:
    """What PyTorch cannot apply (checked before its code runs, and again in the plan)."""
    for name, why in (
        ("SOFT_PLACEMENT", "PyTorch runs each operation where its tensors are"),
        ("LOG_DEVICE_PLACEMENT", "TensorFlow's placement log; PyTorch has none"),
        ("XLA_JIT", "PyTorch does not compile with XLA; torch.compile is chosen in the code"),
    ):
        if name in settings.given:
            plan.refuse(settings, name, why)
    if settings.cluster is not None:
        from ..cluster.launch import refusals as cluster_refusals

        for name, why in cluster_refusals(NAME, settings.cluster):
            plan.refuse(settings, name, why)
    if settings.virtual_split != 1:
        plan.refuse(settings, "VIRTUAL_SPLIT", "PyTorch has no logical devices")
    if settings.memory_growth is False:
        plan.refuse(
            settings,
            "MEMORY_GROWTH",
            "PyTorch's caching allocator always allocates on demand and cannot preallocate",
        )


def _narrow(plan: Plan, env: Mapping[str, str], chosen: str) -> None:
    """Narrow ``CUDA_VISIBLE_DEVICES`` (the record keeps what it was before)."""
    plan.environ[CUDA_VISIBLE] = chosen


def _plan_gpus(plan: Plan, budget: Budget, devices: list[str]) -> Patch | None:
    """Narrow the visible devices; each one's cap, by CUDA ordinal, set when CUDA starts."""
    settings, env = budget.settings, budget.env
    gpus = budget.gpus(len(devices), f"{NAME} will list")
    visible = gpus.visible
    if visible is not None:
        chosen = ",".join(devices[i] for i in visible)
        _narrow(plan, env, chosen)
        plan.decisions.append(
            f"GPUs {list(visible)} visible via {CUDA_VISIBLE}={chosen} "
            f"({settings.shown('VISIBLE_GPU')})"
        )
    caps = {ordinal: cap for ordinal, cap in enumerate(gpus.caps) if cap is not None}
    plan.gpu_count, plan.visible, plan.device_caps = len(devices), visible, caps
    if caps:
        shown = ", ".join(f"cuda:{o} {c} MiB" for o, c in caps.items())
        plan.decisions.append(
            f"caching allocator capped at {shown} via set_per_process_memory_fraction "
            f"({settings.shown('MEMORY_LIMIT_MB')})"
        )
    patch = None
    if caps:
        given = settings.given["MEMORY_LIMIT_MB"][0]
        needs = ("cuda._lazy_call", "cuda.device_count", "cuda.get_device_properties",
                 "cuda.mem_get_info", "cuda.get_allocator_backend",
                 "cuda.set_per_process_memory_fraction")  # fmt: skip
        patch = Patch("torch caps", (caps, given), plan.decisions[-1], needs)
    if settings.memory_growth:
        plan.decisions.append(
            f"memory grows on demand, as PyTorch's caching allocator always does "
            f"({settings.shown('MEMORY_GROWTH')})"
        )
    return patch


def peaks(read: Read, plan: Plan) -> list[Peak]:
    """Each GPU's caching-allocator peak (``max_memory_reserved``: what it held from CUDA, its
    pool at its most; ``memory_reserved`` its pool now), once CUDA has started;
    ``memory_stats``'s ``num_ooms`` counts the allocations it refused."""
    if not read.call("cuda.is_initialized"):
        return []
    devices = plan.devices()
    found = []
    for ordinal in range(int(read.call("cuda.device_count"))):
        physical, cap = devices[ordinal] if ordinal < len(devices) else (ordinal, None)
        stats = read.call("cuda.memory_stats", ordinal) or {}
        peak = int(read.call("cuda.max_memory_reserved", ordinal))
        found.append(
            Peak(ordinal, physical, peak, "torch.cuda.max_memory_reserved", cap,
                 ooms=stats.get("num_ooms"),
                 pool_bytes=int(read.call("cuda.memory_reserved", ordinal)), peak_pool_bytes=peak,
                 pool_source="torch.cuda.memory_reserved, max_memory_reserved")
        )  # fmt: skip
    return found
