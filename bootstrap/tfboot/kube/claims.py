"""DRA claims: the GPUs and the MPS memory limit a container's resource claims give it.

NVIDIA's DRA driver (``gpu.nvidia.com``) reads a claim's opaque ``GpuConfig`` (or
``MigDeviceConfig``). With ``sharing.strategy: MPS`` it sets ``sharing.mpsConfig``'s
``defaultPinnedDeviceMemoryLimit`` (every device) and ``defaultPerDevicePinnedMemoryLimit``
(device index or UUID to an amount, over the default) on the MPS control daemon it starts
for the claim, in MiB rounded down. The container gets only ``CUDA_MPS_PIPE_DIRECTORY``
and mounts, so ``MEMORY_LIMIT_MB=auto`` finds no limit there: the cap must be written
into the manifest, and this module finds the number.

Read: ResourceClaim (``spec``) and ResourceClaimTemplate (``spec.spec``) of
``resource.k8s.io`` v1 and v1beta2 (``requests[].exactly``, ``firstAvailable``) and v1beta1
(``requests[].deviceClassName``); a Pod's ``spec.resourceClaims`` (``resourceClaimName`` or
``resourceClaimTemplateName``) and a container's ``resources.claims`` (``name``, and
``request`` for one request of the claim). The config that applies to a request is the
driver's: the last entry for ``gpu.nvidia.com`` that names the request (``req`` or
``req/sub``), else the last that names none. A request with alternatives
(``firstAvailable``) counts its smallest limit. Claims are matched by kind and name;
namespaces are not compared, and of two claims with one name the smaller limit counts.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..node.deviceplugin import MPS_PIPE
from ..values import quote
from .documents import quantity

DRIVER = "gpu.nvidia.com"
# NVIDIA's device classes, by the config kind each takes; another class takes either kind.
CLASS_KINDS = {"gpu.nvidia.com": "GpuConfig", "mig.nvidia.com": "MigDeviceConfig"}
CONFIG_KINDS = ("GpuConfig", "MigDeviceConfig")
CLAIM_KINDS = {"ResourceClaim": ("spec",), "ResourceClaimTemplate": ("spec", "spec")}
LIMIT_FIELDS = ("defaultPinnedDeviceMemoryLimit", "defaultPerDevicePinnedMemoryLimit")
# What the driver mounts and sets for MPS clients (its CDI edits).
MPS_PIPE_PATH = "/tmp/nvidia-mps"


@dataclass(frozen=True)
class MpsLimit:
    """The smallest MPS pinned device memory limit a request gets, and where it is set."""

    mib: int
    # such as "ResourceClaimTemplate/gpu request mps: defaultPinnedDeviceMemoryLimit=10Gi"
    where: str


@dataclass(frozen=True)
class Request:
    """One request of a claim: NVIDIA devices asked for, MPS, its limit, limits unreadable."""

    gpus: int = 0
    mps: bool = False
    limit: MpsLimit | None = None
    invalid: tuple[str, ...] = ()


@dataclass(frozen=True)
class ClaimGrant:
    """What a container's DRA claims give it (all empty when it takes none)."""

    gpus: int = 0  # NVIDIA GPUs or MIG devices its requests ask for
    mps: bool = False  # an MPS config applies: the driver sets CUDA_MPS_PIPE_DIRECTORY
    limit: MpsLimit | None = None  # the smallest MPS limit among them
    missing: tuple[str, ...] = ()  # claims it takes that the inputs do not hold ("Kind/name")
    invalid: tuple[str, ...] = ()  # MPS limits that are no quantity the driver reads

    def env(self) -> dict[str, str]:
        """What the driver sets in the container: the MPS pipe directory, never the limit."""
        return {MPS_PIPE: MPS_PIPE_PATH} if self.mps else {}


# Claims by (kind, name), each its requests by name.
ClaimIndex = Mapping[tuple[str, str], Mapping[str, Request]]


def _get(node: Any, *path: str) -> Any:
    for key in path:
        node = node.get(key) if isinstance(node, Mapping) else None
    return node


def _list(node: Any) -> list[Any]:
    return node if isinstance(node, list) else []


def _amount(value: Any, what: str, invalid: list[str]) -> int | None:
    """A limit in MiB, rounded down as the driver does; None (and a note) when it is none."""
    amount = quantity(value)
    mib = math.floor(amount / (1 << 20)) if amount is not None else 0
    if mib <= 0:
        invalid.append(
            f"{what}={quote(value)}: expected a quantity of at least 1Mi such as 10Gi "
            "(the driver refuses the claim otherwise)"
        )
        return None
    return mib


def _mps_limit(mps: Any, where: str, invalid: list[str]) -> MpsLimit | None:
    """The smallest limit an ``mpsConfig`` sets, over the default and every device's."""
    found: list[tuple[int, str]] = []
    default = _get(mps, LIMIT_FIELDS[0])
    if default is not None:
        text = f"{where}: {LIMIT_FIELDS[0]}={default}"
        mib = _amount(default, f"{where}: {LIMIT_FIELDS[0]}", invalid)
        found += [(mib, text)] if mib else []
    per_device = _get(mps, LIMIT_FIELDS[1])
    for device, value in (per_device if isinstance(per_device, Mapping) else {}).items():
        field = f"{where}: {LIMIT_FIELDS[1]}[{device}]"
        mib = _amount(value, field, invalid)
        found += [(mib, f"{field}={value}")] if mib else []
    if not found:
        return None
    mib, text = min(found)
    return MpsLimit(mib, text)


def _applies(entry: Mapping[str, Any], name: str, device_class: str) -> bool | None:
    """Whether a config entry applies to request ``name``: True (named), None (names none,
    and its kind fits the class), False."""
    named = [str(r) for r in _list(entry.get("requests"))]
    if named:
        return any(r == name or name.startswith(f"{r}/") for r in named)
    kind = _get(entry, "opaque", "parameters", "kind")
    wanted = CLASS_KINDS.get(device_class)
    return None if kind in CONFIG_KINDS and wanted in (None, kind) else False


def _config(spec: Mapping[str, Any], name: str, device_class: str) -> Mapping[str, Any] | None:
    """The driver's parameters that apply to one request, by the driver's precedence."""
    entries = [
        e for e in _list(_get(spec, "devices", "config")) if _get(e, "opaque", "driver") == DRIVER
    ]
    fallback = None
    for entry in reversed(entries):
        applies = _applies(entry, name, device_class)
        if applies:
            return _get(entry, "opaque", "parameters")
        if applies is None and fallback is None:
            fallback = _get(entry, "opaque", "parameters")
    return fallback


def _alternatives(request: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """``(name, exact request)`` for a request: itself (v1beta1), ``exactly``, or each
    ``firstAvailable`` subrequest (``req/sub``)."""
    name = str(request.get("name", ""))
    subrequests = _list(request.get("firstAvailable"))
    if subrequests:
        for sub in subrequests:
            if isinstance(sub, Mapping):
                yield f"{name}/{sub.get('name', '')}", sub
    else:
        exactly = request.get("exactly")
        yield name, exactly if isinstance(exactly, Mapping) else request


def _count(exact: Mapping[str, Any]) -> int:
    """Devices an exact request asks for: ``count`` (1 when unset); ``All`` counts 1."""
    count = exact.get("count", 1) if exact.get("allocationMode", "ExactCount") != "All" else 1
    return count if isinstance(count, int) and count > 0 else 1


def _request(spec: Mapping[str, Any], request: Mapping[str, Any], claim: str) -> Request:
    """One request: the smallest over its alternatives, as any of them may be chosen."""
    gpus, mps, limits, invalid = [], False, [], []
    for name, exact in _alternatives(request):
        device_class = str(exact.get("deviceClassName", ""))
        params = _config(spec, name, device_class)
        kind = _get(params, "kind")
        nvidia = device_class in CLASS_KINDS or kind in CONFIG_KINDS
        gpus.append(_count(exact) if nvidia else 0)
        sharing = _get(params, "sharing")
        if kind in CONFIG_KINDS and _get(sharing, "strategy") == "MPS":
            mps = True
            where = f"{claim} request {name}"
            limit = _mps_limit(_get(sharing, "mpsConfig"), where, invalid)
            limits += [limit] if limit else []
    least = min(limits, key=lambda limit: limit.mib) if limits else None
    return Request(min(gpus) if gpus else 0, mps, least, tuple(invalid))


def _smaller(known: Request | None, other: Request) -> Request:
    """Of two requests of one name (two claims of one name), the one with the smaller limit."""
    if known is None:
        return other
    if other.limit is None:
        return known
    return other if known.limit is None or other.limit.mib < known.limit.mib else known


def read_claims(docs: Sequence[Any]) -> dict[tuple[str, str], dict[str, Request]]:
    """The ResourceClaims and ResourceClaimTemplates in the inputs, by (kind, name)."""
    index: dict[tuple[str, str], dict[str, Request]] = {}
    for doc in docs:
        kind = doc.get("kind") if isinstance(doc, Mapping) else None
        if kind not in CLAIM_KINDS or not str(doc.get("apiVersion", "")).startswith("resource."):
            continue
        name = str(_get(doc, "metadata", "name") or "?")
        spec = _get(doc, *CLAIM_KINDS[kind])
        spec = spec if isinstance(spec, Mapping) else {}
        requests = index.setdefault((kind, name), {})
        for request in _list(_get(spec, "devices", "requests")):
            if isinstance(request, Mapping):
                found = _request(spec, request, f"{kind}/{name}")
                key = str(request.get("name", ""))
                requests[key] = _smaller(requests.get(key), found)
    return index


def _pod_claims(pod: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """A Pod's claims by the name its containers use: ``(kind, name)`` of the object."""
    found: dict[str, tuple[str, str]] = {}
    for entry in _list(pod.get("resourceClaims")):
        if not isinstance(entry, Mapping):
            continue
        source = entry.get("source")  # before Kubernetes 1.31 the reference was under source
        source = source if isinstance(source, Mapping) else entry
        if source.get("resourceClaimName"):
            found[str(entry.get("name"))] = ("ResourceClaim", str(source["resourceClaimName"]))
        elif source.get("resourceClaimTemplateName"):
            template = str(source["resourceClaimTemplateName"])
            found[str(entry.get("name"))] = ("ResourceClaimTemplate", template)
    return found


def claim_grant(
    pod: Mapping[str, Any], container: Mapping[str, Any], claims: ClaimIndex
) -> ClaimGrant:
    """What the claims ``container`` takes (``resources.claims``) give it in ``pod``."""
    by_name = _pod_claims(pod)
    taken: list[Request] = []
    missing: list[str] = []
    for use in _list(_get(container, "resources", "claims")):
        ref = by_name.get(str(_get(use, "name")))
        if ref is None:
            continue  # no such Pod claim: the API server refuses the Pod
        if ref not in claims:
            missing.append(f"{ref[0]}/{ref[1]}")
            continue
        wanted = _get(use, "request")
        taken += [r for name, r in claims[ref].items() if not wanted or name == wanted]
    limits = [r.limit for r in taken if r.limit is not None]
    return ClaimGrant(
        gpus=sum(r.gpus for r in taken),
        mps=any(r.mps for r in taken),
        limit=min(limits, key=lambda limit: limit.mib) if limits else None,
        missing=tuple(dict.fromkeys(missing)),
        invalid=tuple(dict.fromkeys(i for r in taken for i in r.invalid)),
    )
