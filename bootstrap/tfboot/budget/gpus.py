"""The GPU budget, for any framework: which GPUs, the cap of each, split sizes, and the
errors and warnings every framework gives the same way.

Pure: the framework says how many GPUs it lists, and how messages name that list.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..errors import ON_THIS_HOST, ConfigError, Problem
from ..node.visible import mig_instances
from ..settings import GPU_SETTINGS, Settings, split_count, split_fit, split_shown


@dataclass(frozen=True)
class Gpus:
    """The GPUs a framework lists (``count``), those left visible, and each one's cap."""

    count: int
    visible: tuple[int, ...] | None  # VISIBLE_GPU's indexes, checked; None: every GPU
    caps: tuple[int | None, ...]  # the cap of each of ``indexes``, in MiB (None: none)

    @property
    def indexes(self) -> Sequence[int]:
        """The visible GPUs' indexes in the framework's list."""
        return range(self.count) if self.visible is None else self.visible


def gpu_budget(settings: Settings, count: int, lists: str) -> Gpus:
    """The GPUs of ``count`` listed that stay visible, and their caps.

    ``lists`` says who lists them, for the error about a missing index ("TensorFlow lists").
    """
    visible = settings.visible_gpu
    missing = [i for i in visible or () if i >= count]
    if missing:
        raise ConfigError(
            Problem(
                "VISIBLE_GPU",
                settings.given["VISIBLE_GPU"][0],
                f"index {missing[0]} does not exist: {lists} {count} GPU(s), "
                f"indexes 0 to {count - 1}",
                "indexes count after CUDA_VISIBLE_DEVICES/NVIDIA_VISIBLE_DEVICES",
                verdict=ON_THIS_HOST,
            )
        )
    indexes = range(count) if visible is None else visible
    return Gpus(count, visible, tuple(settings.caps_mb(i) for i in indexes))


def split_sizes(settings: Settings, index: int, cap: int | None) -> tuple[int, ...]:
    """The logical devices' sizes on GPU ``index`` (``VIRTUAL_SPLIT`` over its cap, by
    ``settings.split_fit``)."""
    split = settings.virtual_split
    value = settings.given.get("VIRTUAL_SPLIT", (split_shown(split), ""))[0]
    sizes, problem = split_fit(split, cap, value, index)
    if problem is not None:
        raise ConfigError(problem)
    return sizes


def cpu_split(settings: Settings) -> int:
    """Logical CPUs ``VIRTUAL_SPLIT`` asks for on a host without GPUs (1: no split)."""
    return split_count(settings.virtual_split)


def gpu_required(settings: Settings, hidden: bool, none_found: str) -> ConfigError:
    """``REQUIRE_GPU`` with no GPU: hidden by ``VISIBLE_GPU=none``, or ``none_found``."""
    why = "VISIBLE_GPU=none hides every GPU" if hidden else none_found
    return ConfigError(
        Problem(
            "REQUIRE_GPU",
            settings.given["REQUIRE_GPU"][0],
            f"a GPU is required, but {why}",
            verdict=ON_THIS_HOST,
        )
    )


def cap_over_gpu(given: str, cap: int, total_mib: int, gpu: str) -> Problem:
    """``MEMORY_LIMIT_MB`` above what ``gpu`` has: never clamped."""
    return Problem(
        "MEMORY_LIMIT_MB",
        given,
        f"the cap of {cap} MiB is more than the {total_mib} MiB {gpu} has",
        verdict=ON_THIS_HOST,
    )


def unused_on_cpu(settings: Settings, sizes: bool, required: bool) -> str | None:
    """The warning for GPU settings on a host with no GPU; None when there is nothing to say.

    ``sizes``: split sizes count as a GPU setting; ``required``: an explicit REQUIRE_GPU
    alone is worth the warning.
    """
    ignored = [settings.shown(n) for n in GPU_SETTINGS if n in settings.given]
    if sizes and isinstance(settings.virtual_split, tuple):
        ignored.append(settings.shown("VIRTUAL_SPLIT") + " sizes")
    if not ignored and not (required and "REQUIRE_GPU" in settings.given):
        return None
    detail = "; not applied: " + ", ".join(ignored) if ignored else ""
    return f"no GPU found, running on CPU{detail}"


def no_gpu(settings: Settings, hidden: bool, framework: str, runs_model: bool) -> str | None:
    """No GPU for JAX or PyTorch (``hidden``: ``VISIBLE_GPU=none`` on a GPU host):
    ``REQUIRE_GPU`` fails and the GPU settings given are named in one warning, both only
    for a framework that runs the model."""
    if settings.require_gpu and runs_model:
        raise gpu_required(settings, hidden, f"{framework} finds no GPU")
    warning = unused_on_cpu(settings, sizes=False, required=False)
    return warning if warning and not hidden and runs_model else None


def mig_warning(settings: Settings, env: Mapping[str, str]) -> str | None:
    """One process can use one MIG slice: more than one visible is a warning (an error under
    ``REQUIRE_GPU``), as the others would stay idle."""
    slices = mig_instances(env)
    if len(slices) < 2:
        return None
    shown = ", ".join(slices[:2]) + (f" and {len(slices) - 2} more" if len(slices) > 2 else "")
    text = (
        f"{len(slices)} MIG instances are visible ({shown}), but one process uses one MIG "
        "slice: CUDA gives it the first and the others stay idle"
    )
    how = (
        "run one process per slice, each with CUDA_VISIBLE_DEVICES set to its own MIG UUID "
        "(under Kubernetes, one Pod or container per nvidia.com/mig-* slice)"
    )
    if settings.require_gpu:
        raise ConfigError(
            Problem("REQUIRE_GPU", settings.given["REQUIRE_GPU"][0], text, how, ON_THIS_HOST)
        )
    return f"{text}; {how}"
