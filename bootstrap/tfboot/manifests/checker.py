"""Running every container check over the inputs, into one ``Report``."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from ..kube.claims import read_claims
from ..kube.documents import DocumentError, InputError, parse_documents, read_source
from ..kube.kai import kai_share
from ..kube.report import Report
from ..kube.workloads import Container, configmaps, containers, dig, unreached, workload_templates
from .cluster import check_cluster
from .hardening import check_image, check_resources, check_security
from .injected import check_injected
from .podlevel import check_pod_level
from .variables import check_tfboot

CONTAINER_CHECKS = (check_resources, check_security, check_image, check_tfboot, check_injected,
                    check_pod_level)  # fmt: skip
# What a field of an unexpected type raises; it is a finding, not a crash.
SHAPE_ERRORS = (AttributeError, TypeError, KeyError, ValueError)
FIX = "run kubernetes-validate --strict on it to see which field has the wrong shape"


def check_text(file: str, text: str, report: Report) -> None:
    """Check every workload in one input."""
    notes: list[str] = []
    try:
        docs = parse_documents(text, notes)
    except DocumentError as exc:
        report.add((file, "-", "-"), "unreadable", str(exc))
        return
    for note in notes:
        report.add((file, "-", "-"), "duplicate-key", note, "give each key once")
    objects: set[str] = set()
    try:
        maps = configmaps(docs)
        claims = read_claims(docs)
        for obj, group, template in workload_templates(docs):
            objects.add(obj)
            pod = template["spec"]
            if not pod.get("containers"):
                report.add(
                    (file, obj, group or "-"),
                    "malformed",
                    "the Pod template has no containers: the API server refuses it",
                    "list the training container under spec.containers",
                )
            for container in containers(file, obj, pod, maps, group, claims, kai_share(template)):
                report.containers += 1
                for check in CONTAINER_CHECKS:
                    _run_check(check, container, report)
        for doc in docs:
            if isinstance(doc, dict):
                for why in unreached(doc):
                    obj = f"{doc.get('kind')}/{dig(doc, ('metadata', 'name')) or '?'}"
                    objects.add(obj)
                    report.add((file, obj, "-"), "not-checked", why)
        check_cluster(file, docs, maps, report)
    except SHAPE_ERRORS as exc:
        report.add((file, "-", "-"), "malformed", f"a field has the wrong shape: {_why(exc)}", FIX)
    report.objects += len(objects)


def _run_check(
    check: Callable[[Container, Report], None], container: Container, report: Report
) -> None:
    """One check; a field of an unexpected type is a finding, not a crash."""
    try:
        check(container, report)
    except SHAPE_ERRORS as exc:
        report.add(
            container.where,
            "malformed",
            f"{check.__name__} could not read this container: {_why(exc)}",
            FIX,
        )


def _why(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"


MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


KUSTOMIZATIONS = ("kustomization.yaml", "kustomization.yml", "Kustomization")


def expand(paths: Sequence[str]) -> list[str]:
    """Each path, a folder replaced by the YAML and JSON files under it (``.yaml``, ``.yml``,
    ``.json``, sorted, hidden ones left out), as kubeconform walks a folder. A kustomize
    folder is refused (its patches are no whole workloads): it must be rendered first."""
    found: list[str] = []
    for path in paths:
        if path == "-" or not os.path.isdir(path):
            found.append(path)
            continue
        for folder, subfolders, files in os.walk(path):
            kustomization = next((name for name in KUSTOMIZATIONS if name in files), None)
            if kustomization is not None:
                raise InputError(
                    f"{os.path.join(folder, kustomization)}: {folder} is a kustomize folder, "
                    "whose patches are no whole workloads; render it first: kubectl kustomize "
                    f"{folder} | tfboot manifests -"
                )
            subfolders[:] = sorted(d for d in subfolders if not d.startswith("."))
            found += [os.path.join(folder, name) for name in sorted(files)
                      if name.endswith(MANIFEST_SUFFIXES) and not name.startswith(".")]  # fmt: skip
    return found


def check_paths(paths: Sequence[str]) -> Report:
    """Check files and folders (``-`` for stdin); raises ``InputError`` when one cannot be
    read."""
    report = Report()
    for path in expand(paths):
        check_text(*read_source(path), report)
    if not report.objects and not any(f.rule == "unreadable" for f in report.findings):
        report.add(
            (", ".join(paths), "-", "-"),
            "no-workloads",
            "no Pod, Job, CronJob, Deployment, StatefulSet, DaemonSet or ReplicaSet found",
            "check that the input is the rendered manifests (kubectl kustomize DIR)",
        )
    return report
