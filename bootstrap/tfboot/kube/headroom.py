"""The headroom ``tfboot manifests`` keeps below a GPU share, for the caps it advises and checks.

Offline, the framework a container will run is read from its spec where the spec says
(``kube.framework``): the headroom is then that framework's. Where it does not, a cap the
checker advises keeps TensorFlow's headroom, the largest (its adapter's ``HEADROOM``), so it is
safe for any framework, and the messages say so and what PyTorch and JAX need; the
no-headroom warning fires only below the smallest headroom any framework needs. Each
framework's figure comes from the function the import calls (``budget.caps.headroom``),
given what the container will see at run time: NCCL's share is added where an engine forms
a group (``DISTRIBUTED`` finds one in the Pod's variables) or several GPUs are granted, and
the container's own ``MEMORY_HEADROOM_MB`` replaces every figure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..budget.caps import Headroom, cap_below, headroom
from ..budget.roles import NAMES
from ..cluster import NAMES as CLUSTER_NAMES
from ..errors import ConfigError
from ..frameworks import HEADROOMS
from ..node.visible import NVIDIA_VISIBLE
from ..settings import HEADROOM as VARIABLE
from ..settings import Settings, resolve
from .framework import ORDER, framework_of, judged

ADVISED = "tensorflow"  # the framework whose headroom an advised cap keeps: the largest
NCCL_NAMES = ("DISTRIBUTED", "VISIBLE_GPU", *CLUSTER_NAMES)  # what decides where NCCL runs


@dataclass(frozen=True)
class Advice:
    """The headroom below a share: ``room`` for an advised cap, and each framework's."""

    room: Headroom
    # (frameworks as messages name them, MiB), the advised framework first
    rooms: tuple[tuple[str, int], ...]
    given: bool = False  # the container's own MEMORY_HEADROOM_MB, for every framework
    framework: str = ADVISED  # the framework judged for (module name)
    judged: str = ""  # how: the framework the spec names and why, or the assumption

    @property
    def least(self) -> int:
        """The smallest headroom any framework needs: less is gpu-memory-no-headroom."""
        return min(mib for _names, mib in self.rooms)

    def cap(self, share: int) -> int | None:
        """The cap to write below ``share`` MiB; None when the share leaves no room."""
        return cap_below(share, self.room)

    def shown(self) -> str:
        """Such as "1536 MiB of headroom for TensorFlow (why; PyTorch and JAX need 1024 MiB)"."""
        if self.given:
            return f"{self.room.mib} MiB of headroom ({self.room.why})"
        others = [f"{names} need {mib} MiB" for names, mib in self.rooms[1:]]
        why = "; ".join([self.room.why, *others])
        return f"{self.room.mib} MiB of headroom for {NAMES[self.framework]} ({why})"

    def caps(self, share: int) -> str:
        """Each framework's cap below ``share``: "TensorFlow 2560 MiB, PyTorch and JAX 3072 MiB"."""
        return ", ".join(f"{names} {share - mib} MiB" for names, mib in self.rooms)


def _runtime(env: Mapping[str, str], gpus: int) -> dict[str, str]:
    """What the container will see at run time: its variables, the ``gpus`` GPUs granted as
    the NVIDIA runtime lists them, and an Indexed Job's completion index."""
    runtime = {**env, "JOB_COMPLETION_INDEX": env.get("JOB_COMPLETION_INDEX") or "0"}
    if gpus and not env.get(NVIDIA_VISIBLE, "").strip():
        runtime[NVIDIA_VISIBLE] = ",".join(str(index) for index in range(gpus))
    return runtime


def _settings(runtime: Mapping[str, str]) -> Settings:
    """The contract's variables that decide a headroom, as the import parses them; an invalid
    one is reported as config-invalid, and is read here as unset."""
    for names in ((*NCCL_NAMES, VARIABLE), NCCL_NAMES):
        try:
            return resolve(runtime, names)
        except ConfigError:
            continue
    return resolve({}, ())  # every one invalid: none read


def advice(env: Mapping[str, str], gpus: int, spec: Mapping[str, Any] | None = None) -> Advice:
    """The headroom below a share for a container with ``env`` and ``gpus`` GPUs granted,
    for the framework its ``spec`` names (``kube.framework``), else TensorFlow's: each
    framework's as its import keeps it (``budget.caps.headroom``: the container's own
    ``MEMORY_HEADROOM_MB``, else the figure its adapter declares, NCCL's added where it will
    run)."""
    runtime = _runtime(env, gpus)
    settings = _settings(runtime)

    def room(module: str) -> Headroom:
        return headroom(settings, runtime, HEADROOMS[module], NAMES[module])

    if settings.memory_headroom_mb is not None:
        given = room(ADVISED)
        mib = given.mib
        return Advice(Headroom(mib, f"{given.why}, the container's own"),
                      (("every framework", mib),), True)  # fmt: skip
    found = framework_of(spec or {}, env)
    if found is None:
        by_mib: dict[int, list[str]] = {}
        for module in (ADVISED, *(m for m in ORDER if m != ADVISED)):
            by_mib.setdefault(room(module).mib, []).append(NAMES[module])
        rooms = tuple((" and ".join(names), mib) for mib, names in by_mib.items())
        return Advice(room(ADVISED), rooms, judged=judged(None))
    module = found[0]
    own = room(module)
    return Advice(own, ((NAMES[module], own.mib),), framework=module, judged=judged(found))
