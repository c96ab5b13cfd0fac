"""JAX's plan: the contract as JAX's own environment variables and its CPU client's pool.

Pure: no JAX import. Everything but the thread count is an environment variable JAX reads
when it starts a backend, so it is set at ``import jax``, before JAX's code runs:

- ``VISIBLE_GPU``: JAX's own ``jax_cuda_visible_devices``, through ``jax.config.update``
  right after JAX's code ran, before a backend starts (other frameworks keep their GPUs).
  It is a flag: no JAX from 0.4.30 to 0.10.2 reads ``JAX_CUDA_VISIBLE_DEVICES`` from the
  environment (``jax/_src/xla_bridge.py``). ``none`` is ``JAX_PLATFORMS=cpu``.
- ``MEMORY_LIMIT_MB``: ``XLA_CLIENT_MEM_FRACTION``, the cap over the GPU's total memory
  (NVML), rounded down to 6 decimals so it never passes the cap; before jaxlib 0.4.32,
  which reads only the old name, ``XLA_PYTHON_CLIENT_MEM_FRACTION``. Never both: from
  0.4.32 on, jaxlib refuses both set (``ValueError`` at the GPU's start).
- ``MEMORY_GROWTH``: ``XLA_PYTHON_CLIENT_PREALLOCATE`` (``false`` grows on demand).
- ``VIRTUAL_SPLIT`` on a host without GPUs: ``JAX_NUM_CPU_DEVICES``; before JAX 0.5.1,
  which reads no such variable, ``--xla_force_host_platform_device_count`` in
  ``XLA_FLAGS``, added to the user's flags.

The installed JAX's and jaxlib's versions are read first (``node.versions``), and each
variable is written only to a version that reads it (docs/seams.md, versions column).
- ``REQUIRE_GPU``: ``JAX_PLATFORMS=cuda``, so JAX fails instead of falling back to CPU.
- ``CPU_THREADS``: the size of the CPU client's pool (see ``apply``).
- ``DISTRIBUTED``: Keras 3's ``KERAS_DISTRIBUTION_*``, and the arguments
  ``jax.distributed.initialize()`` leaves unset, filled by a wrapper (``cluster.launch``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from importlib.util import find_spec
from typing import Any

from ..budget import FRAMEWORK_READS, Budget
from ..budget.caps import Headroom
from ..budget.gpus import cap_over_gpu, cpu_split, no_gpu
from ..budget.roles import NAMES, Role, decide
from ..errors import ConfigError, Problem
from ..node.cuda import cuda_devices
from ..node.deviceplugin import partition_total
from ..node.nvml import read_inventory
from ..node.versions import Version, installed, shown
from ..node.xlaflags import flag as xla_flag_text
from ..node.xlaflags import value as xla_flag
from ..provenance import user_value
from ..settings import Settings
from . import Call, Patch, Peak, Plan, Read, release_memory

MODULE = "jax"
NAME = NAMES[MODULE]
QUALIFIED = True
OLDEST = {MODULE: (0, 4, 30)}
DISTRIBUTIONS = ()
READS = FRAMEWORK_READS
PREFIX = "jax."
# 626 MiB outside its pool on an H200 after the same work as PyTorch's (550 before, 618
# after a Keras fit); 1024 MiB (budget.caps).
HEADROOM = Headroom(1024, "JAX held up to 626 MiB outside its pool on an H200")
MIRRORS: dict[str, str] = {}
STAGES = ("before", "after")
REPORTED_BY = ""  # it reports its own invalid settings
SETS = ()  # it sets none of the variables tfboot reads as a user's while it imports
# JAX's CUDA plugins: without one JAX sees no GPU, whatever the node has.
CUDA_PLUGINS = ("jax_plugins.xla_cuda12", "jax_plugins.xla_cuda13")
BRIDGE = "_src.xla_bridge"  # where JAX keeps its backend factories (jax/_src/xla_bridge.py)
FRACTION_ENV = "XLA_CLIENT_MEM_FRACTION"
OLD_FRACTION_ENV = "XLA_PYTHON_CLIENT_MEM_FRACTION"  # JAX's deprecated name, still read
PREALLOCATE_ENV = "XLA_PYTHON_CLIENT_PREALLOCATE"
ALLOCATOR_ENV = "XLA_PYTHON_CLIENT_ALLOCATOR"
PLATFORMS_ENV = "JAX_PLATFORMS"
VISIBLE_ENV = "JAX_CUDA_VISIBLE_DEVICES"  # written by earlier tfboots; never read by JAX
VISIBLE_FLAG = "jax_cuda_visible_devices"
CPU_DEVICES_ENV = "JAX_NUM_CPU_DEVICES"
HOST_DEVICES_FLAG = "--xla_force_host_platform_device_count"  # read when JAX's count is unset
XLA_FLAGS_ENV = "XLA_FLAGS"
WRITES = (VISIBLE_ENV, PLATFORMS_ENV, FRACTION_ENV, OLD_FRACTION_ENV, PREALLOCATE_ENV,
          CPU_DEVICES_ENV, XLA_FLAGS_ENV)  # fmt: skip
# The first version that reads each variable whose reader moved (docs/seams.md):
# JAX_NUM_CPU_DEVICES: jax/_src/config.py, int_state("jax_num_cpu_devices") from JAX 0.5.1
# (0.5.0's is a flag with no environment read); XLA_CLIENT_MEM_FRACTION: jaxlib/xla_client.py,
# generate_pjrt_gpu_plugin_options, from jaxlib 0.4.32 (0.4.30 and 0.4.31 read only the old
# name; from 0.4.32 both set raise ValueError).
CPU_DEVICES_FROM = (0, 5, 1)
FRACTION_FROM = (0, 4, 32)
DECIMALS = 6


def LAUNCH(*args: Any) -> Any:
    """Its values for a task of a cluster (``cluster.launch.plan_jax``), loaded only where
    ``DISTRIBUTED`` is not off (no cluster code otherwise)."""
    from ..cluster.launch import plan_jax

    return plan_jax(*args)


def preallocates(value: str) -> bool:
    """``XLA_PYTHON_CLIENT_PREALLOCATE`` as JAX reads it (jaxlib/xla_client.py, JAX 0.10.2,
    ``generate_pjrt_gpu_plugin_options``): any value but ``false``, ``False`` or ``0``."""
    return value not in ("false", "False", "0")


def number(value: str) -> object:
    """A number as JAX's ``int()``/``float()`` of the variable reads it; else the text."""
    try:
        return float(value)
    except ValueError:
        return value


def fraction_text(cap_mib: int, total_bytes: int) -> str:
    """``cap / total`` rounded down to ``DECIMALS`` places, as JAX parses it."""
    scaled = cap_mib * (1 << 20) * 10**DECIMALS // total_bytes
    return f"{scaled // 10**DECIMALS}.{scaled % 10**DECIMALS:0{DECIMALS}d}"


def role(importing: Sequence[str], taken: Sequence[str], backend: Callable[[], str]) -> Role:
    """JAX runs the model, or came along with TensorFlow or Keras on another backend."""
    return decide(MODULE, importing, backend)


def facts(stage: str, budget: Budget, read: Read) -> dict[str, Any]:
    """``before``: each GPU's total bytes, as JAX will list them; ``after``: whether its CPU
    client can still be sized."""
    if stage == "after":
        totals = _gpus(budget.env) if budget.settings.device_given() else ()
        return {"pool": _pool_problem(read), "started": bool(read.attr(f"{BRIDGE}._backends")),
                "gpus": len(totals), "jax": installed("jax"),
                "narrowed": cuda_devices(budget.env, len(totals))[1]}  # fmt: skip
    totals = _gpus(budget.env) if budget.settings.device_given() else ()
    return {"totals": totals, "narrowed": cuda_devices(budget.env, len(totals))[1],
            "jax": installed("jax"), "jaxlib": installed("jaxlib")}  # fmt: skip


def plan(stage: str, budget: Budget, facts: Mapping[str, Any]) -> Plan:
    """``before``: JAX's environment; ``after``: its CPU client's pool."""
    if stage == "after":
        plan = _pool(budget, facts["pool"])
        visible = _visible(plan, budget, facts)
        _launch(plan, budget, visible, facts["jax"])
        return plan
    return plan_jax(budget, facts["totals"], facts["narrowed"], facts["jax"], facts["jaxlib"])


def plan_jax(budget: Budget, totals: tuple[int, ...], narrowed: bool = False,
             jax: Version | None = None, jaxlib: Version | None = None) -> Plan:  # fmt: skip
    """JAX's environment; ``totals``: total bytes of each GPU JAX will list (none: no GPU).

    ``narrowed``: CUDA_VISIBLE_DEVICES already holds only the visible GPUs (set for PyTorch).
    ``jax``, ``jaxlib``: the installed versions (None: unknown, taken as the newest).
    """
    settings, env = budget.settings, budget.env
    plan = Plan(NAME, budget.role)
    _refusals(plan, settings)
    gpu_count = len(totals)
    if gpu_count and settings.visible_gpu != ():
        _plan_gpus(plan, budget, totals, narrowed, jaxlib)
    else:
        warning = no_gpu(settings, gpu_count > 0, NAME, plan.role.runs_model)
        plan.warnings += [warning] if warning else []
        if gpu_count and plan.setenv(env, PLATFORMS_ENV, "cpu", settings, "VISIBLE_GPU"):  # none
            plan.decisions.append(f"no GPU: {PLATFORMS_ENV}=cpu ({settings.shown('VISIBLE_GPU')})")
        count = cpu_split(settings)
        how = _host_devices(plan, budget, count, jax) if count > 1 else None
        if how is not None:
            plan.cpu_logical = count
            why = settings.shown("VIRTUAL_SPLIT")
            plan.decisions.append(f"{count} CPU devices via {how} ({why}, no GPU)")
    plan.warnings += budget.threads(NAME).warnings
    release_memory(plan, budget)
    plan.check()
    if settings.cluster is not None and plan.role.runs_model:
        budget.launch(
            NAME, LAUNCH, visible=None, version=jax
        )  # raises on an invalid cluster, before JAX's code runs
    return plan


def _launch(plan: Plan, budget: Budget, visible: tuple[int, ...] | None,
            jax: Version | None) -> None:  # fmt: skip
    """The cluster: Keras 3's variables, and ``jax.distributed.initialize``'s arguments."""
    if budget.settings.cluster is None or not plan.role.runs_model:
        return
    cluster = budget.launch(NAME, LAUNCH, visible=visible, version=jax)
    plan.cluster = cluster
    plan.environ.update(cluster.environ)
    plan.warnings += cluster.warnings
    if cluster.launch is not None:
        args = (cluster.launch.arguments, cluster.launch.replicas)
        plan.calls.append(Patch("jax distributed", args, cluster.line(), ("distributed",)))


def _host_devices(plan: Plan, budget: Budget, count: int, jax: Version | None) -> str | None:
    """``JAX_NUM_CPU_DEVICES`` for ``VIRTUAL_SPLIT``; it overrides the XLA flag JAX reads when
    it is unset (jax/_src/xla_bridge.py, JAX 0.10.2, ``num_cpu_devices``), so a user's flag
    with another count is a contradiction, never silently beaten. Before JAX 0.5.1, which
    reads no ``JAX_NUM_CPU_DEVICES``, the flag itself, added to the user's ``XLA_FLAGS``.
    What carries the count, or None (a contradiction)."""
    settings, env = budget.settings, budget.env
    flags = user_value(env, XLA_FLAGS_ENV) or ""
    given = xla_flag(flags, HOST_DEVICES_FLAG)
    if given is not None and number(given) != count:
        plan.problems.append(
            Problem(
                "VIRTUAL_SPLIT",
                settings.given["VIRTUAL_SPLIT"][0],
                f"it contradicts {HOST_DEVICES_FLAG}={given} in XLA_FLAGS, which JAX reads",
                "set only one of them",
            )
        )
        return None
    if jax is not None and jax < CPU_DEVICES_FROM:
        shown_flag = f"{HOST_DEVICES_FLAG}={count}"
        if given is None:
            added = xla_flag_text(HOST_DEVICES_FLAG, str(count))
            plan.environ[XLA_FLAGS_ENV] = f"{flags.strip()} {added}".strip()
        return (f"{XLA_FLAGS_ENV} {shown_flag} (JAX {shown(jax)} reads no {CPU_DEVICES_ENV}, "
                f"from {shown(CPU_DEVICES_FROM)})")  # fmt: skip
    if plan.setenv(env, CPU_DEVICES_ENV, str(count), settings, "VIRTUAL_SPLIT", number):
        return CPU_DEVICES_ENV
    return None


def _visible(plan: Plan, budget: Budget, facts: Mapping[str, Any]) -> tuple[int, ...] | None:
    """``jax_cuda_visible_devices`` for ``VISIBLE_GPU``, set before a backend starts: the
    GPUs made visible, or None where none were chosen this way."""
    settings = budget.settings
    if not facts["gpus"] or facts["narrowed"] or settings.visible_gpu == ():
        return None
    visible = budget.gpus(facts["gpus"], f"{NAME} will list").visible
    if visible is None:
        return None
    why = settings.shown("VISIBLE_GPU")
    if facts["started"]:
        plan.warnings.append(f"{why} not applied to JAX: its backends had already started")
        return None
    listed = ",".join(map(str, visible))  # JAX splits it at ","
    plan.decisions.append(f"GPUs {list(visible)} visible via jax.config {VISIBLE_FLAG} ({why})")
    plan.calls.append(Call("config.update", (VISIBLE_FLAG, listed), plan.decisions[-1],
                           "config.update"))  # fmt: skip
    return visible


def _pool(budget: Budget, problem: str | None) -> Plan:
    """JAX's CPU client with the thread budget's pool, when it can still be sized."""
    plan = Plan(NAME, budget.role)
    threads = budget.threads(NAME)
    if threads.count is None:
        return plan
    if problem is not None:
        plan.warnings.append(problem)
        return plan
    plan.decisions.append(f"CPU client pool {threads.count} threads ({threads.why})")
    plan.calls.append(Patch("jax cpu pool", (threads.count,), plan.decisions[-1]))
    return plan


def _pool_problem(read: Read) -> str | None:
    """Why JAX's CPU client cannot be sized, or None."""
    registry = read.attr(f"{BRIDGE}._backend_factories")
    if not isinstance(registry, dict) or "cpu" not in registry:
        return (
            "CPU_THREADS not applied to JAX: this JAX has no CPU client to size "
            f"(no jax.{BRIDGE}._backend_factories['cpu'])"
        )
    if read.attr(f"{BRIDGE}._backends"):
        return "CPU_THREADS not applied to JAX: its backends had already started"
    return None


def _gpus(env: Mapping[str, str]) -> tuple[int, ...]:
    """Total bytes of each GPU JAX will list: none without a CUDA plugin or NVML."""
    try:
        plugin = any(find_spec(name) is not None for name in CUDA_PLUGINS)
    except (ImportError, ValueError):
        plugin = False
    if not plugin:
        return ()
    inventory = read_inventory(env)
    listed = cuda_devices(env, inventory.count)[0]
    if not inventory.totals:
        return ()
    # CUDA's order need not be NVML's: each GPU is taken as the largest, so the fraction
    # never gives a GPU more than the cap. Under MPS memory partitioning CUDA's total is the
    # partition: the fraction is of that, so the limit is never taken twice.
    total, partition = max(inventory.totals), partition_total(env)
    return (min(total, partition) if partition else total,) * len(listed)


def _refusals(plan: Plan, settings: Settings) -> None:
    for name, why in (
        ("SOFT_PLACEMENT", "JAX places each computation itself; soft placement is TensorFlow's"),
        (
            "LOG_DEVICE_PLACEMENT",
            "TensorFlow's placement log; JAX logs compilations with JAX_LOG_COMPILES",
        ),
    ):
        if name in settings.given:
            plan.refuse(settings, name, why)
    if settings.xla_jit is False:
        plan.refuse(
            settings,
            "XLA_JIT",
            "JAX always compiles with XLA (jax.disable_jit is a debugging switch)",
        )
    elif settings.xla_jit:
        plan.decisions.append(f"XLA JIT: always on in JAX ({settings.shown('XLA_JIT')})")
    if settings.cluster is not None:
        from ..cluster.launch import refusals as cluster_refusals

        for name, why in cluster_refusals(NAME, settings.cluster):
            plan.refuse(settings, name, why)


def _plan_gpus(plan: Plan, budget: Budget, totals: tuple[int, ...], narrowed: bool,
               jaxlib: Version | None) -> None:  # fmt: skip
    settings, env = budget.settings, budget.env
    gpus = budget.gpus(len(totals), f"{NAME} will list")
    visible = gpus.visible
    plan.gpu_count, plan.visible = len(totals), visible
    plan.device_caps = {i: cap for i, cap in enumerate(gpus.caps) if cap is not None}
    if visible is not None and narrowed:
        plan.decisions.append(
            f"GPUs {list(visible)} visible: CUDA_VISIBLE_DEVICES already narrowed for PyTorch"
        )
    if settings.require_gpu and plan.role.runs_model and user_value(env, PLATFORMS_ENV) is None:
        plan.environ[PLATFORMS_ENV] = "cuda"
        plan.decisions.append(
            f"{PLATFORMS_ENV}=cuda: no CPU fallback ({settings.shown('REQUIRE_GPU')})"
        )
    split = settings.virtual_split
    if split != 1:
        plan.refuse(settings, "VIRTUAL_SPLIT", "JAX has no logical GPUs: one device per GPU")
    caps = gpus.caps
    if caps and all(c is not None for c in caps):
        _plan_cap(plan, settings, min(c for c in caps if c is not None), max(totals), env, jaxlib)
    growth = settings.memory_growth
    if growth is not None and plan.setenv(
        env, PREALLOCATE_ENV, str(not growth).lower(), settings, "MEMORY_GROWTH", preallocates
    ):
        how = "grows on demand" if growth else "preallocated"
        shown = plan.environ.get(PREALLOCATE_ENV) or user_value(env, PREALLOCATE_ENV)
        plan.decisions.append(
            f"memory {how} via {PREALLOCATE_ENV}={shown} ({settings.shown('MEMORY_GROWTH')})"
        )


def _plan_cap(plan: Plan, settings: Settings, cap: int, total: int, env: Mapping[str, str],
              jaxlib: Version | None) -> None:  # fmt: skip
    """The cap as the fraction name this jaxlib reads, never both names: a user's value of
    either name with the same meaning is kept and tfboot writes none."""
    total_mib = total >> 20
    if cap > total_mib:
        raise ConfigError(
            cap_over_gpu(settings.given["MEMORY_LIMIT_MB"][0], cap, total_mib, "the GPU")
        )
    fraction = fraction_text(cap, total)
    names = (FRACTION_ENV, OLD_FRACTION_ENV)
    if not all(plan.agrees(env, n, fraction, settings, "MEMORY_LIMIT_MB", number) for n in names):
        return
    reads_new = jaxlib is None or jaxlib >= FRACTION_FROM
    name = FRACTION_ENV if reads_new else OLD_FRACTION_ENV
    # A jaxlib that reads both refuses both set; one that reads the old name only ignores
    # the new one, so the old name is written beside a user's new one.
    theirs = [n for n in (names if reads_new else (OLD_FRACTION_ENV,)) if user_value(env, n)]
    if not theirs:
        plan.environ[name] = fraction
    how = f"{theirs[0]}={fraction} (yours)" if theirs else f"{name}={fraction}"
    if name != FRACTION_ENV:
        how += f" (jaxlib {shown(jaxlib)} reads no {FRACTION_ENV}, from {shown(FRACTION_FROM)})"
    plan.decisions.append(
        f"memory capped at {how} of {total_mib} MiB ({settings.shown('MEMORY_LIMIT_MB')})"
    )
    allocator = user_value(env, ALLOCATOR_ENV)
    if allocator is not None and allocator.lower() == "platform":
        plan.warnings.append(
            f"{ALLOCATOR_ENV}={allocator}: JAX then ignores the memory fraction, so the cap "
            f"does not hold; unset {ALLOCATOR_ENV}"
        )


def refused(described: str, exc: Exception, applied: list[str]) -> Problem:
    """JAX's plan makes no call that can be refused; a refusal is still named."""
    return Problem("", None, f"JAX refused {described} ({exc})")


def peaks(read: Read, plan: Plan) -> list[Peak]:
    """Each GPU's ``peak_bytes_in_use``, ``bytes_limit`` and pool (``Device.memory_stats``),
    once JAX has made its backends (jax/_src/xla_bridge.py keeps them in ``_backends``)."""
    from os import environ  # read at the report: JAX read it when it made its client

    if not read.attr(f"{BRIDGE}._backends"):
        return []
    devices = plan.devices()
    found = []
    gpus = [d for d in read.call("local_devices") if getattr(d, "platform", "") == "gpu"]
    for ordinal, device in enumerate(gpus):
        stats = device.memory_stats() or {}
        if "peak_bytes_in_use" not in stats:
            continue
        physical, cap = devices[ordinal] if ordinal < len(devices) else (ordinal, None)
        pool, peak_pool, source = pool_of(stats, environ.get(PREALLOCATE_ENV))
        found.append(
            Peak(ordinal, physical, int(stats["peak_bytes_in_use"]), "jax Device.memory_stats",
                 cap, stats.get("bytes_limit"), pool_bytes=pool, peak_pool_bytes=peak_pool,
                 pool_source=source)
        )  # fmt: skip
    return found


def pool_of(
    stats: Mapping[str, Any], preallocate: str | None
) -> tuple[int | None, int | None, str]:
    """What JAX's allocator holds from the driver, now and at its most, and where that came
    from: PJRT's ``pool_bytes``/``peak_pool_bytes`` where it gives them; else ``bytes_limit``
    when the pool was taken whole at the start (``preallocate``: the variable, None unset)."""
    if "pool_bytes" in stats:
        now = int(stats["pool_bytes"])
        return now, int(stats.get("peak_pool_bytes", now)), "jax Device.memory_stats pool_bytes"
    shown = f"{PREALLOCATE_ENV}={preallocate}" if preallocate is not None else \
        f"{PREALLOCATE_ENV} unset"  # fmt: skip
    if preallocates(preallocate or "true") and "bytes_limit" in stats:
        limit = int(stats["bytes_limit"])
        return limit, limit, (f"jax Device.memory_stats bytes_limit: preallocated ({shown}), "
                              "no pool_bytes")  # fmt: skip
    return None, None, f"unknown: JAX grows its pool ({shown}) and memory_stats has no pool_bytes"
