"""The rules for every container, tfboot or not: resources, security context, pinned image."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..kube.documents import quantity
from ..kube.report import Report
from ..kube.template import is_injected_init
from ..kube.workloads import DEVICE_COUNTS, MAX_DEVICES, MIG_RESOURCE, Container, mounted_at


def check_resources(container: Container, report: Report) -> None:
    """cpu and memory requests and limits present, quantities valid, requests within limits."""
    requests, limits = container.resources("requests"), container.resources("limits")
    for kind, values in (("requests", requests), ("limits", limits)):
        # Kubernetes defaults a missing request to its limit.
        given = {**limits, **values} if kind == "requests" else values
        missing = [r for r in ("cpu", "memory") if r not in given]
        if missing:
            report.add(
                container.where,
                "resources-missing",
                f"no {' or '.join(missing)} {kind}",
                f"set resources.{kind}.{missing[0]}" + (" and memory" if len(missing) > 1 else ""),
            )
        for name, value in values.items():
            amount = quantity(value)
            if amount is None:
                report.add(
                    container.where,
                    "quantity-invalid",
                    f"resources.{kind}.{name}: {value!r} is not a quantity",
                    "write a quantity such as 500m, 2, 4Gi",
                )
            elif _is_device(name) and amount > MAX_DEVICES:
                report.add(
                    container.where,
                    "quantity-invalid",
                    f"resources.{kind}.{name}: {value!r} is more than the {MAX_DEVICES} devices "
                    "tfboot accepts per container",
                    "ask for the devices one node has",
                )
    _check_request_pairs(container, requests, limits, report)


def _is_device(name: str) -> bool:
    return name in DEVICE_COUNTS or MIG_RESOURCE.match(name) is not None


def _check_request_pairs(
    container: Container, requests: Mapping[str, Any], limits: Mapping[str, Any], report: Report
) -> None:
    for name, value in requests.items():
        asked, cap = quantity(value), quantity(limits.get(name))
        if asked is None or cap is None:
            continue
        if "/" in str(name) and asked != cap:
            report.add(
                container.where,
                "extended-resource-requests",
                f"{name}: request {value} differs from limit {limits[name]}",
                "give extended resources in limits only (requests default to them)",
            )
        elif asked > cap:
            report.add(
                container.where,
                "requests-over-limits",
                f"{name}: request {value} is above the limit {limits[name]}",
                "make the request at most the limit",
            )


SecurityRule = tuple[str, Callable[[Container], bool], str, str]
SECURITY_RULES: tuple[SecurityRule, ...] = (
    (
        "run-as-non-root",
        lambda c: c.effective("runAsNonRoot") is True and c.effective("runAsUser") != 0,
        "runAsNonRoot is not true, or runAsUser is 0",
        "set securityContext.runAsNonRoot: true and a non-zero runAsUser",
    ),
    (
        "read-only-root-fs",
        lambda c: c.security().get("readOnlyRootFilesystem") is True,
        "readOnlyRootFilesystem is not true",
        "set it, with emptyDir volumes for /tmp and HOME",
    ),
    (
        "privilege-escalation",
        lambda c: c.security().get("allowPrivilegeEscalation") is False,
        "allowPrivilegeEscalation is not false",
        "set securityContext.allowPrivilegeEscalation: false",
    ),
    (
        "privileged",
        lambda c: c.security().get("privileged") is not True,
        "the container is privileged",
        "remove privileged: true",
    ),
    (
        "capabilities-drop-all",
        lambda c: "ALL" in ((c.security().get("capabilities") or {}).get("drop") or []),
        "capabilities.drop does not list ALL",
        'set securityContext.capabilities.drop: ["ALL"]',
    ),
    (
        "seccomp-profile",
        lambda c: (
            (c.effective("seccompProfile") or {}).get("type") in ("RuntimeDefault", "Localhost")
        ),
        "seccompProfile is not RuntimeDefault or Localhost (on the container or the Pod)",
        "set securityContext.seccompProfile.type: RuntimeDefault",
    ),
    (
        "tmp-not-writable",
        lambda c: (
            c.security().get("readOnlyRootFilesystem") is not True
            or bool(mounted_at(c.spec, "/tmp"))
            or is_injected_init(c.spec.get("name"))  # tfboot's own: cp and printf, no /tmp
        ),
        "the root filesystem is read-only and /tmp is not a volume",
        "mount an emptyDir at /tmp",
    ),
)


def check_security(container: Container, report: Report) -> None:
    """The hardened security context, one rule per setting."""
    for rule, holds, message, hint in SECURITY_RULES:
        if not holds(container):
            report.add(container.where, rule, message, hint)


def check_image(container: Container, report: Report) -> None:
    """The image is pinned by a tag other than ``latest``, or by digest."""
    image = str(container.spec.get("image", ""))
    if "@" in image:
        return
    name, _, tag = image.rpartition(":")
    if not name or "/" in tag or tag == "latest":
        report.add(
            container.where,
            "image-not-pinned",
            f"image {image or '(none)'} is not pinned by tag",
            "give a version tag such as :1.0.0 (kustomize images: newTag), or a digest",
        )
