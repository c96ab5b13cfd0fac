"""TensorFlow's adapter: the budget as ``tf.config`` calls, TensorFlow's own variables,
tf.data's defaults and the cluster's ``TF_CONFIG``.

``before`` TensorFlow's code runs, the budget is made (which validates the settings and the
cluster); ``after`` it, the plan lists the calls in the order TensorFlow requires (visible
devices, memory growth, logical devices, threads, placement and JIT flags). It only
configures: nothing here runs an op or lists logical devices, so TensorFlow's runtime
starts when user code first needs it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..budget import Budget
from ..budget.caps import Headroom
from ..budget.gpus import cpu_split, gpu_required, mig_warning, split_sizes, unused_on_cpu
from ..budget.hostmemory import for_tensorflow, share_of
from ..budget.hostpolicy import PINNED_SHARE
from ..budget.roles import LOADER, NAMES, Role, tensorflow_role
from ..errors import Problem
from ..node.hostmem import PINNED_ENV
from ..node.nccl import measure, why_needed
from ..node.versions import TENSORFLOW, parse
from ..node.xla import Toolchain, pip_toolchain, plan_toolchain
from ..provenance import user_value
from . import Call, Item, New, Patch, Peak, Plan, Read, release_memory

MODULE = "tensorflow"
NAME = NAMES[MODULE]
QUALIFIED = False
OLDEST = {MODULE: (2, 12)}
DISTRIBUTIONS = TENSORFLOW
READS = None  # every variable of the contract
PREFIX = "tf.config."
STAGES = ("before", "after")
REPORTED_BY = ""  # it reports its own invalid settings
SETS = ()  # it sets none of the variables tfboot reads as a user's while it imports

INTRA_ENV = "TF_NUM_INTRAOP_THREADS"
INTER_ENV = "TF_NUM_INTEROP_THREADS"
GROWTH_ENV = "TF_FORCE_GPU_ALLOW_GROWTH"
# What TensorFlow holds on a GPU outside its pool, kept free below a share (budget.caps): its
# own rule where it sizes its pool, 1536 MiB on compute capability 8.0 and later
# (MinSystemMemory, tensorflow/core/common_runtime/gpu/gpu_device.cc; 1050 MiB on 7.x),
# which any memory_limit bypasses.
HEADROOM = Headroom(1536, "TensorFlow's own reserve beside its pool on compute capability 8.0+")
MIRRORS = {"MEMORY_GROWTH": GROWTH_ENV}  # TensorFlow's own variable for the same setting
# What tfboot may write for TensorFlow; a parent's inherited value it does not plan is put back.
WRITES = (GROWTH_ENV, PINNED_ENV, "XLA_FLAGS")
DATA_HOOK = "_apply_debug_options"  # the Dataset method every consumer of a dataset calls
LIST = "config.list_physical_devices"  # listing GPUs starts the GPU driver
# Setting -> (call target, how the call is named): the calls made after the device ones.
FLAGS = (
    ("SOFT_PLACEMENT", "soft_placement", "config.set_soft_device_placement",
     "set_soft_device_placement"),
    ("LOG_DEVICE_PLACEMENT", "log_device_placement", "debugging.set_log_device_placement",
     "set_log_device_placement"),
    ("XLA_JIT", "xla_jit", "config.optimizer.set_jit", "optimizer.set_jit"),
)  # fmt: skip


def role(importing: Sequence[str], taken: Sequence[str], backend: Callable[[], str]) -> Role:
    """TensorFlow runs the model, or loads data for JAX or PyTorch (see ``budget.roles``)."""
    return tensorflow_role(taken, importing, backend)


def _loader(budget: Budget) -> bool:
    """TensorFlow is another framework's data loader and sees no GPU (unless LOADER_GPU)."""
    return budget.role.kind == LOADER and not budget.settings.loader_gpu


def facts(stage: str, budget: Budget, read: Read) -> dict[str, Any]:
    """The GPUs TensorFlow lists (only when a setting needs them: listing starts the GPU
    driver), whether it is a CUDA build (for XLA's toolchain), tf.data's hook, NCCL's room."""
    if stage != "after":
        return {}
    settings = budget.settings
    loader = _loader(budget)
    needs = settings.device_given() or settings.distributed != "off"
    listed = len(read.call(LIST, "GPU")) if needs and not loader else 0
    found: dict[str, Any] = {"gpus": listed}
    if settings.xla_jit and read.call("test.is_built_with_cuda"):
        found["toolchain"] = plan_toolchain(budget.env, pip_toolchain())
    dataset = read.attr("data.Dataset")
    found["data_hook"] = any(DATA_HOOK in vars(c) for c in getattr(dataset, "__mro__", ()))
    found["nccl"] = measure()
    found["version"] = read.attr("__version__", "?")
    return found


def LAUNCH(*args: Any) -> Any:
    """Its values for a task of a cluster (``cluster.tfjob.plan_tensorflow``: ``TF_CONFIG``),
    loaded only where ``DISTRIBUTED`` is not off."""
    from ..cluster.tfjob import plan_tensorflow

    return plan_tensorflow(*args)


def plan(stage: str, budget: Budget, facts: Mapping[str, Any]) -> Plan:
    """``before``: the cluster checked, nothing to do yet; ``after``: TensorFlow's plan, the
    cluster's ``TF_CONFIG``, NCCL's warnings and the peer watcher."""
    settings = budget.settings
    # The data loader of a job JAX or PyTorch forms is no task of TensorFlow's: no TF_CONFIG,
    # no peer watcher probing ports where nothing listens for TensorFlow.
    forms = settings.cluster is not None and budget.role.kind != LOADER
    if stage == "before":
        if forms:
            budget.launch(NAME, LAUNCH)  # raises on an invalid cluster, before its code runs
        return Plan(NAME, budget.role)
    made = make_plan(budget, facts["gpus"], facts)
    if settings.cluster is not None and not forms:
        made.decisions.append(
            f"cluster: none for TensorFlow ({budget.role.why}, which forms the job); "
            "TF_CONFIG not set, no peer watcher"
        )
    if forms:
        cluster = budget.launch(
            NAME, LAUNCH, replicas=made.local_replicas(), cpu_split=made.cpu_logical
        )
        made.cluster = cluster
        made.environ.update(cluster.environ)
        made.warnings += cluster.warnings
    if not facts["data_hook"] and made.host is not None and made.host.data is not None:
        made.warnings.append(
            f"tf.data defaults ({made.host.data.describe()}) not applied: TensorFlow "
            f"{facts['version']} has no Dataset.{DATA_HOOK}, where tfboot injects them; set "
            "tf.data.Options in the pipeline instead"
        )
    config = made.cluster.identity.cluster if made.cluster is not None else None
    visible = len(made.gpus_visible(made.gpu_count))
    made.warnings += facts["nccl"].warn(why_needed(visible, config.size if config else 0))
    _watch(made, budget)
    return made


def make_plan(budget: Budget, gpu_count: int, facts: Mapping[str, Any] | None = None) -> Plan:
    """TensorFlow's own settings for ``gpu_count`` listed GPUs: devices, threads, placement,
    JIT, host memory (``facts``: tf.data's hook, XLA's toolchain, as ``facts`` reads them)."""
    facts = facts or {}
    settings = budget.settings
    plan = Plan(NAME, budget.role, gpu_count=gpu_count)
    for name, attr, _target, _shown in FLAGS:
        if getattr(settings, attr) is not None:
            plan.decisions.append(settings.shown(name))
    if settings.mixed_precision is not None:
        plan.decisions.append(settings.shown("MIXED_PRECISION"))
    if _loader(budget):
        plan.visible = ()
        plan.decisions.append(f"no GPU: {budget.role.why} (LOADER_GPU=true gives it the GPUs)")
        plan.calls.append(_visible(plan))
    else:
        mig = mig_warning(settings, budget.env)
        plan.warnings += [mig] if mig else []
        if gpu_count and settings.visible_gpu != ():
            _gpus(plan, budget, gpu_count)
        else:
            _no_gpu(plan, budget, gpu_count)
    _threads(plan, budget)
    for name, attr, target, shown in FLAGS:
        value = getattr(settings, attr)
        if value is not None:
            plan.calls.append(Call(target, (value,), settings.shown(name), shown))
    data = _host_memory(plan, budget, facts.get("data_hook", True), facts.get("version"))
    release_memory(plan, budget)
    toolchain: Toolchain | None = facts.get("toolchain")
    if toolchain is not None:
        _toolchain(plan, toolchain)
    if data is not None:
        plan.calls.append(data)
    return plan


def _visible(plan: Plan) -> Call:
    chosen = [Item(LIST, ("GPU",), i) for i in plan.visible or ()]
    return Call("config.set_visible_devices", (chosen, "GPU"), plan.decisions[-1],
                "set_visible_devices")  # fmt: skip


def _gpus(plan: Plan, budget: Budget, gpu_count: int) -> None:
    """Visible GPUs, then memory growth, then logical devices: TensorFlow's order."""
    settings = budget.settings
    gpus = budget.gpus(gpu_count, "TensorFlow lists")
    if gpus.visible is not None:
        plan.visible = gpus.visible
        plan.decisions.append(
            f"GPUs {list(gpus.visible)} visible ({settings.shown('VISIBLE_GPU')})"
        )
        plan.calls.append(_visible(plan))
    for index, cap in zip(gpus.indexes, gpus.caps, strict=True):
        sizes = split_sizes(settings, index, cap)
        if sizes:
            plan.logical_mb[index] = sizes
    logical = []
    if plan.logical_mb:
        described = ", ".join(f"GPU:{i} -> {list(s)} MiB" for i, s in plan.logical_mb.items())
        given = ("MEMORY_LIMIT_MB", "VIRTUAL_SPLIT")
        origin = ", ".join(settings.shown(n) for n in given if n in settings.given)
        plan.decisions.append(f"logical GPUs {described} ({origin})")
        logical = [_logical(Item(LIST, ("GPU",), i), [New(CONFIGURATION, (("memory_limit", mb),))
                                               for mb in sizes], plan.decisions[-1])
                   for i, sizes in plan.logical_mb.items()]  # fmt: skip
        if (user_value(budget.env, "TF_GPU_ALLOCATOR") or "").strip() == "cuda_malloc_async":
            plan.warnings.append(
                "TF_GPU_ALLOCATOR=cuda_malloc_async: memory_limit is then a release threshold, "
                "not a hard cap; unset TF_GPU_ALLOCATOR for a hard cap"
            )
    growth = settings.memory_growth
    if growth is not None:
        shown = settings.shown("MEMORY_GROWTH")
        if plan.logical_mb:
            # TF refuses set_memory_growth with logical devices; the allocator reads this.
            if growth:
                plan.environ[GROWTH_ENV] = "true"
            how = (
                f"grows up to the cap, via {GROWTH_ENV}=true" if growth else "preallocated, capped"
            )
            plan.decisions.append(f"memory {how} ({shown})")
        else:
            plan.decisions.append(f"memory growth {'on' if growth else 'off'} ({shown})")
            plan.calls += [
                Call("config.experimental.set_memory_growth", (Item(LIST, ("GPU",), i), growth),
                     plan.decisions[-1], "set_memory_growth")
                for i in gpus.indexes
            ]  # fmt: skip
    plan.calls += logical


CONFIGURATION = "config.LogicalDeviceConfiguration"


def _logical(device: Item, configs: list[New], reason: str) -> Call:
    return Call("config.set_logical_device_configuration", (device, configs), reason,
                "set_logical_device_configuration")  # fmt: skip


def _no_gpu(plan: Plan, budget: Budget, gpu_count: int) -> None:
    settings = budget.settings
    hidden = gpu_count > 0  # VISIBLE_GPU=none on a GPU host
    if hidden:
        plan.visible = ()
        plan.decisions.append(f"no GPU visible: {settings.shown('VISIBLE_GPU')}")
        plan.calls.append(_visible(plan))
    if settings.require_gpu:
        raise gpu_required(settings, hidden, "TensorFlow lists no GPU")
    warning = None if hidden else unused_on_cpu(settings, sizes=True, required=True)
    plan.warnings += [warning] if warning else []
    count = cpu_split(settings)
    if count > 1:
        plan.cpu_logical = count
        why = settings.shown("VIRTUAL_SPLIT")
        plan.decisions.append(f"CPU:0 split into {count} logical CPUs ({why}, no GPU)")
        cpu = Item(LIST, ("CPU",), 0)
        plan.calls.append(_logical(cpu, [New(CONFIGURATION)] * count, plan.decisions[-1]))


def _threads(plan: Plan, budget: Budget) -> None:
    """Both pools get the thread budget, unless TensorFlow's own variable sizes the pool."""
    threads = budget.threads(NAME)
    plan.warnings += threads.warnings
    if threads.count is None:
        return
    for variable, pool, target in (
        (INTRA_ENV, "intra-op", "set_intra_op_parallelism_threads"),
        (INTER_ENV, "inter-op", "set_inter_op_parallelism_threads"),
    ):
        explicit = user_value(budget.env, variable)
        if explicit is not None:
            plan.decisions.append(f"{pool} threads left to {variable}={explicit} (explicit)")
        else:
            plan.decisions.append(f"{pool} threads {threads.count} ({threads.why})")
            plan.calls.append(
                Call(f"config.threading.{target}", (threads.count,), plan.decisions[-1], target)
            )


def _host_memory(plan: Plan, budget: Budget, hooked: bool, version: str | None) -> Patch | None:
    """tf.data's autotune budgets and pinned host memory from the limit and the CPU quota;
    the tf.data patch to make, or None."""
    settings, env = budget.settings, budget.env
    problem = budget.memory.problem
    if problem and settings.host_memory == "auto":
        plan.warnings.append(f"{problem}; TensorFlow's host-memory defaults are used")
    found = for_tensorflow(budget.host(), parse(version) if version else None)
    plan.warnings += found.warnings
    if found.data is None:
        return None
    plan.host = found
    patch = None
    if hooked:
        plan.decisions.append(
            f"tf.data defaults {found.data.describe()} ({'; '.join(found.reasons)}; a "
            "pipeline's own options win)"
        )
        patch = Patch("tf.data defaults", (found.data,), plan.decisions[-1])
    pinned = found.pinned_mib
    if pinned is None:
        return patch
    # Read only where TensorFlow makes a GPU's pinned host allocator; set without listing
    # devices, which would start the GPU driver at import.
    explicit = user_value(env, PINNED_ENV)
    if explicit is not None:
        plan.decisions.append(f"pinned host memory left to {PINNED_ENV}={explicit} (explicit)")
        return patch
    plan.environ[PINNED_ENV] = str(pinned)
    plan.decisions.append(
        f"pinned host memory up to {pinned} MiB via {PINNED_ENV} "
        f"({share_of(found.limit_mib, PINNED_SHARE, f'the {found.limit_mib} MiB limit')})"
    )
    return patch


def _toolchain(plan: Plan, toolchain: Toolchain) -> None:
    if toolchain.xla_flags is not None:
        plan.environ["XLA_FLAGS"] = toolchain.xla_flags
    if toolchain.decision:
        plan.decisions.append(toolchain.decision)
    if toolchain.warning:
        plan.warnings.append(toolchain.warning)


def _watch(plan: Plan, budget: Budget) -> None:
    """The peer watcher, for a task with peers."""
    cluster = plan.cluster
    if cluster is None or not cluster.peers:
        return
    config = cluster.identity.cluster
    names = config.names if config else {}
    quiet = budget.settings.control.log == "quiet"
    watch = (cluster.peers, cluster.settings.startup_timeout, quiet, names,
             cluster.settings.term_grace)  # fmt: skip
    plan.calls.append(Patch("peer watcher", watch, cluster.line()))


def refused(described: str, exc: Exception, applied: list[str]) -> Problem:
    """A ``tf.config`` call refused: TensorFlow's runtime had started."""
    return Problem(
        "",
        None,
        f"TensorFlow's runtime was already initialised before tfboot applied the "
        f"configuration, so {described} was refused ({exc}); applied before it: "
        f"{applied or 'nothing'}",
        "set the variables before the first TensorFlow op (tfboot applies them at "
        "`import tensorflow`), or restart the process",
    )


# Where TensorFlow keeps its runtime: ``context._context`` is made at import, and its
# ``_context_handle`` only when the runtime starts (tensorflow/python/eager/context.py, 2.21).
CONTEXT = "tensorflow.python.eager.context"


def peaks(read: Read, plan: Plan) -> list[Peak]:
    """Each logical GPU's ``get_memory_info`` peak (the BFC allocator's bytes in use at its
    highest), once the runtime has started: asking earlier would start it. Its pool, which
    TensorFlow does not expose, is known only where it was taken whole (``bfc_pool``)."""
    from os import environ  # read at the report: TensorFlow read it when it made its devices

    context = getattr(read.loaded(CONTEXT), "_context", None)
    if getattr(context, "_context_handle", None) is None:
        return []
    devices = plan.devices()
    grows = _grows(read, environ)
    found = []
    for index, device in enumerate(read.call("config.list_logical_devices", "GPU")):
        physical, cap = devices[index] if index < len(devices) else (index, None)
        info = read.call("config.experimental.get_memory_info", device.name)
        pool, source = bfc_pool(int(info["peak"]), cap, grows)
        found.append(
            Peak(index, physical, int(info["peak"]), "tf.config.experimental.get_memory_info",
                 cap, pool_bytes=pool, peak_pool_bytes=pool, pool_source=source)
        )  # fmt: skip
    return found


def _grows(read: Read, env: Mapping[str, str]) -> str:
    """Why the GPU allocator's pool grows rather than being taken whole ("": it is taken
    whole): ``TF_FORCE_GPU_ALLOW_GROWTH`` overrides ``set_memory_growth`` when it is ``true``
    or ``false`` (gpu_bfc_allocator.cc); ``cuda_malloc_async`` is not BFC."""
    forced = env.get(GROWTH_ENV)
    if forced in ("true", "false"):
        return f"{GROWTH_ENV}=true" if forced == "true" else ""
    if (env.get("TF_GPU_ALLOCATOR") or "").strip() == "cuda_malloc_async":
        return "TF_GPU_ALLOCATOR=cuda_malloc_async"
    visible = read.call("config.get_visible_devices", "GPU")
    growth = any(read.call("config.experimental.get_memory_growth", d) for d in visible)
    return "set_memory_growth" if growth else ""


def bfc_pool(peak: int, cap: int | None, grows: str) -> tuple[int | None, str]:
    """What one logical GPU's BFC allocator holds from the driver, and where that came from.
    ``get_memory_info`` gives bytes in use only (``current``, ``peak``; AllocatorStats'
    ``pool_bytes`` is not exposed), so the pool is known only where BFC takes its whole
    ``memory_limit`` at its first allocation: a cap (a logical device's ``memory_limit``),
    and growth off. ``grows``: why it grows ("": it does not)."""
    unexposed = "TensorFlow exposes no pool figures (get_memory_info: current and peak only)"
    if grows:
        return None, f"unknown: the pool grows ({grows}) and {unexposed}"
    if cap is None:
        return None, f"unknown: TensorFlow sized the pool itself (no memory_limit) and {unexposed}"
    taken = cap << 20 if peak else 0  # nothing allocated yet: no region taken
    return taken, f"the memory_limit {cap} MiB, preallocated: growth off ({unexposed})"
