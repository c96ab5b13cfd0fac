"""The ``MEMORY_LIMIT_MB`` each container needs under its DRA claim's MPS limit.

NVIDIA's DRA driver keeps a claim's MPS limit on the MPS control daemon, out of the
container's sight, so ``MEMORY_LIMIT_MB=auto`` cannot find it at import. This gives the
number to write into the manifest instead (``tfboot inject`` carries it into the container).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .claims import ClaimIndex, read_claims
from .environment import container_env
from .headroom import advice
from .report import Report
from .workloads import Container, container_grant, containers, workloads


def container_mps_cap(container: Container, env: Mapping[str, str]) -> int | None:
    """``MEMORY_LIMIT_MB`` under the container's MPS limit: the limit minus the headroom
    (``headroom.advice``: the container's ``MEMORY_HEADROOM_MB``, else its framework's, with
    NCCL's where it gets several GPUs or sets ``DISTRIBUTED``). None without a limit, or
    when the limit leaves no room for a cap."""
    limit = container.dra.limit
    if limit is None:
        return None
    return advice(env, container_grant(container).count, container.spec).cap(limit.mib)


def pod_mps_caps(pod: Mapping[str, Any], claims: ClaimIndex) -> dict[str, int]:
    """Container name -> cap in MiB, for the containers of one Pod spec under an MPS limit.

    ``claims`` is ``claims.read_claims(docs)``. The rules are those of ``mps_caps``.
    """
    found: dict[str, int] = {}
    for container in containers("", "", dict(pod), {}, claims=claims):
        env = container_env(container, container_grant(container), Report())
        cap = container_mps_cap(container, env)
        if cap is not None:
            found[container.name] = cap
    return found


def mps_caps(docs: Sequence[Any]) -> dict[tuple[str, str, str], int]:
    """``(object, group, container) -> MEMORY_LIMIT_MB`` in MiB for every container, init
    containers too, of every Pod template in ``docs`` (``documents.parse_documents``) that
    takes a DRA claim with an MPS limit of NVIDIA's driver.

    ``object`` is ``Kind/name`` and ``group`` the Pod template's group ("" for the built-in
    kinds; a JobSet's replicatedJob, a TFJob's replica type), as ``workloads.workloads``
    yields them. The value is the smallest limit among the claim requests the container
    takes (``defaultPinnedDeviceMemoryLimit`` or any ``defaultPerDevicePinnedMemoryLimit``,
    in MiB rounded down, as the driver sets it) minus the headroom of
    ``container_mps_cap``: 1536 MiB (TensorFlow's, the largest), 2560 with NCCL, or the
    container's ``MEMORY_HEADROOM_MB``. Left out: containers with no such claim, whose
    claim the inputs do not hold, or whose limit is at or below that headroom (no cap
    fits: ``tfboot manifests`` says so). Reads only; the documents are not changed.
    """
    claims = read_claims(docs)
    found: dict[tuple[str, str, str], int] = {}
    for obj, group, pod in workloads(docs):
        for name, cap in pod_mps_caps(pod, claims).items():
            found[(obj, group, name)] = cap
    return found
