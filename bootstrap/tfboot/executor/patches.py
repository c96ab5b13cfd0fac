"""The executor's own operations on a framework, beyond calls and environment variables.

Each takes the framework's module and the plan's arguments, and returns how the log
names what it did (None: nothing was done).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import os
from collections.abc import Callable
from types import ModuleType
from typing import Any

from ..adapters.jax import BRIDGE
from ..adapters.torch import MEM_GET_INFO, fraction_of
from ..budget.gpus import cap_over_gpu
from ..budget.hostmemory import DataDefaults
from ..budget.malloc import Watch
from ..budget.roles import NAMES
from ..errors import ConfigError, Problem
from ..frames import hidden
from ..node.versions import parse
from .wrapping import replace


def tf_data_defaults(tf: ModuleType, defaults: DataDefaults) -> str | None:
    """Every tf.data pipeline of the process gets ``defaults`` under its own options."""
    from .tfdata import HOOK, install

    if not install(tf, defaults):
        return None
    return f"tf.data.Dataset.{HOOK} gives every pipeline: {defaults.describe()}"


def jax_cpu_pool(jax: ModuleType, threads: int) -> str | None:
    """Make JAX's CPU client with ``threads`` threads in its pool.

    JAX sizes the pool from the CPUs the creating thread may run on. The client is created
    with that thread's affinity narrowed to ``threads`` CPUs; then the thread and every
    thread started meanwhile get their affinity back, so the pool is smaller but not pinned.
    """
    bridge: Any = jax
    for name in BRIDGE.split("."):
        bridge = getattr(bridge, name)
    registration = bridge._backend_factories["cpu"]
    factory = registration.factory

    def sized(*args: Any, **kwargs: Any) -> Any:
        allowed = os.sched_getaffinity(0)
        if len(allowed) <= threads:
            return factory(*args, **kwargs)
        before = set(os.listdir("/proc/self/task"))
        os.sched_setaffinity(0, sorted(allowed)[:threads])
        try:
            return factory(*args, **kwargs)
        finally:
            os.sched_setaffinity(0, allowed)
            for task in set(os.listdir("/proc/self/task")) - before:
                with contextlib.suppress(OSError):  # the thread has ended
                    os.sched_setaffinity(int(task), allowed)

    bridge._backend_factories["cpu"] = dataclasses.replace(registration, factory=sized)
    return f"JAX's CPU client created with {threads} threads"


def torch_caps(torch: ModuleType, caps: dict[int, int], given: str) -> str | None:
    """Queue each GPU's cap for CUDA's start, as a fraction of the total this PyTorch's
    allocator multiplies it by (``adapters.torch.fraction_of``), so that the cap it
    enforces is the cap asked for, under an MPS share too."""

    def cap_memory() -> None:
        from .loader import in_worker

        if in_worker():  # the cap is the main process's budget (executor.loader)
            return
        of = fraction_of(parse(torch.__version__), torch.cuda.get_allocator_backend())
        for ordinal, cap in caps.items():
            if ordinal >= torch.cuda.device_count():
                continue
            if of == MEM_GET_INFO:
                total = torch.cuda.mem_get_info(ordinal)[1]
            else:
                total = torch.cuda.get_device_properties(ordinal).total_memory
            if cap * (1 << 20) > total:
                raise ConfigError(
                    cap_over_gpu(given, cap, total >> 20, f"cuda:{ordinal}"), NAMES["torch"]
                )
            torch.cuda.set_per_process_memory_fraction(cap * (1 << 20) / total, ordinal)

    torch.cuda._lazy_call(cap_memory)
    return (f"torch.cuda.set_per_process_memory_fraction when CUDA starts: {caps} MiB, of the "
            "total its allocator multiplies the fraction by")  # fmt: skip


def torch_threads_follow(torch: ModuleType, threads: int, quota: float | None) -> str | None:
    """PyTorch's intra-op count following the CPU quota while the job runs
    (``executor.follow``), once per process."""
    from ..node.cpu import cgroup_root
    from .follow import start

    return start(torch, threads, quota, cgroup_root(os.environ))


def memory_governor(_module: ModuleType, watch: Watch) -> str | None:
    """This process's host-memory governor (``executor.governor``), once per process."""
    from .governor import start

    return start(watch)


# Where TensorFlow waits for its peers: MultiWorkerMirroredStrategy's start (its server,
# then the coordination service's wait for every task), and a coordinator's connection to
# its cluster (ParameterServerStrategy, ``tf.config.experimental_connect_to_cluster``).
TF_WAITS = (
    ("tensorflow.python.distribute.collective_all_reduce_strategy",
     "CollectiveAllReduceExtended", "_initialize_multi_worker"),
    ("tensorflow.python.eager.remote", "", "connect_to_cluster"),
)  # fmt: skip


def peer_watcher(
    _tf: ModuleType,
    peers: Any,
    timeout: float,
    quiet: bool,
    names: dict[str, str],
    grace: float | None,
) -> str | None:
    """The process that ends this task when a peer is lost (``executor.watcher``), and
    each of TensorFlow's waits for its peers bracketed for it (``TF_WAITS``)."""
    import sys

    from .deadline import within
    from .watcher import watch

    watcher = watch(peers, timeout, quiet=quiet, names=names, grace=grace)
    if watcher is None:
        return None
    bracketed = []
    for module_name, owner_name, name in TF_WAITS:
        module = sys.modules.get(module_name)
        owner = getattr(module, owner_name, None) if owner_name else module
        if callable(getattr(owner, name, None)):
            replace(owner, name, lambda f: within(f, watcher.waiting, watcher.waited))
            bracketed.append(f"{owner_name or module_name.rpartition('.')[2]}.{name}")
    started = f"peer watcher started for {len(peers)} peer(s)"
    if not bracketed:  # a TensorFlow that waits elsewhere: the clock runs from the import
        watcher.waiting()
        return f"{started}; its clock from the import (none of TensorFlow's waits found)"
    return f"{started}; its clock from the start of each wait in {', '.join(bracketed)}"


def jax_distributed(
    jax: ModuleType, arguments: dict[str, Any], replicas: tuple[str, int] | None
) -> str | None:
    """``jax.distributed.initialize`` with the cluster's values for the arguments the
    caller leaves unset (None, or not passed); what the caller passes is kept. Once it
    returned, ``replicas`` (``DIST_REPLICAS_PER_WORKER``'s value and count) must be
    JAX's local device count."""
    filled: dict[str, Any] = {}

    def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(original)
        filled.update((n, v) for n, v in arguments.items() if n in signature.parameters)

        @functools.wraps(original)
        def initialize(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind_partial(*args, **kwargs).arguments
            for name, value in filled.items():
                if bound.get(name) is None:
                    bound[name] = value
            with hidden:
                done = original(**bound)
            if replicas is not None and (local := jax.local_device_count()) != replicas[1]:
                raise ConfigError(
                    Problem(
                        "DIST_REPLICAS_PER_WORKER",
                        replicas[0],
                        f"this JAX process has {local} local device(s) "
                        f"({jax.default_backend()}), but every worker must have {replicas[1]}",
                        "give every worker the same GPUs, or fix DIST_REPLICAS_PER_WORKER",
                        verdict="cannot be met on this host",
                    )
                )
            return done

        return initialize

    replace(jax.distributed, "initialize", wrap)
    return f"jax.distributed.initialize fills unset {', '.join(filled)}"


def torch_deadline(torch: ModuleType, seconds: int, waits: str) -> str | None:
    """Each call of ``torch.distributed.init_process_group`` must return within ``seconds``
    of its start, or the task ends, naming what it ``waits`` for (``executor.deadline``)."""
    from .deadline import bounded

    text = (
        f"cluster: PyTorch's group did not form within DIST_STARTUP_TIMEOUT={seconds} s of "
        f"init_process_group's start: {waits}; ending this task"
    )
    replace(torch.distributed, "init_process_group", lambda f: bounded(f, seconds, text))
    return f"torch.distributed.init_process_group bounded by {seconds} s from each call's start"


def torch_loader(torch: ModuleType, quota: float | None, source: str, quiet: bool) -> None:
    """DataLoader workers against the CPU quota and ``/dev/shm`` (``executor.loader``). It
    changes nothing of PyTorch's, so it is not counted as applied: a process that gets
    nothing else stays as silent as without tfboot."""
    from .loader import install

    install(torch, quota, source, quiet)


PATCHES: dict[str, Callable[..., str | None]] = {
    "torch loader": torch_loader,
    "jax distributed": jax_distributed,
    "torch deadline": torch_deadline,
    "tf.data defaults": tf_data_defaults,
    "jax cpu pool": jax_cpu_pool,
    "torch caps": torch_caps,
    "memory governor": memory_governor,
    "torch threads follow": torch_threads_follow,
    "peer watcher": peer_watcher,
}
