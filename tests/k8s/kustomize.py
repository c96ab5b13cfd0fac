"""Render the project's kustomize overlays with the real ``kubectl``, and read what comes out.

``kubectl kustomize`` needs kustomize v5 or later (``replacements``, ``components``); the
version check fails clearly on an older one, such as Debian's ``kubernetes-client`` 1.20.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "k8s"
OVERLAYS = tuple(
    sorted(p.name for p in (K8S / "overlays").iterdir() if (p / "kustomization.yaml").exists())
)
MIN_KUSTOMIZE = (5, 0)
# The Kubernetes versions the manifests are validated against: the oldest supported and the
# newest schema kubernetes-validate bundles.
KUBERNETES_VERSIONS = ("1.27.0", "1.37.0")


class KubectlError(RuntimeError):
    """kubectl is missing, too old, or failed."""


def find_kubectl() -> str | None:
    """``$KUBECTL`` or ``kubectl`` on PATH, when it is an executable."""
    return shutil.which(os.environ.get("KUBECTL") or "kubectl")


def kustomize_version(kubectl: str) -> tuple[int, ...]:
    """The kustomize version built into ``kubectl``, as numbers."""
    proc = subprocess.run(
        [kubectl, "version", "--client", "-o", "json"], capture_output=True, text=True, timeout=60
    )
    if proc.returncode != 0:
        raise KubectlError(f"{kubectl} version failed: {proc.stderr.strip()}")
    text = json.loads(proc.stdout).get("kustomizeVersion", "")
    match = re.match(r"v?(\d+)\.(\d+)", text)
    if not match:
        raise KubectlError(f"{kubectl} reports no kustomize version ({text!r})")
    return tuple(int(part) for part in match.groups())


def render_text(kubectl: str, directory: Path) -> str:
    """``kubectl kustomize DIRECTORY``: the rendered multi-document YAML."""
    proc = subprocess.run(
        [kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=120
    )
    if proc.returncode != 0:
        raise KubectlError(f"kubectl kustomize {directory} failed:\n{proc.stderr}")
    return proc.stdout


def documents(text: str) -> list[dict[str, Any]]:
    """The YAML documents of ``text``."""
    return [doc for doc in yaml.safe_load_all(text) if doc is not None]


def copy_k8s(destination: Path) -> Path:
    """A copy of the whole ``k8s/`` tree (kustomize refuses paths outside its root)."""
    target = destination / "k8s"
    shutil.copytree(K8S, target)
    return target


def set_literal(env_file: Path, name: str, value: str) -> None:
    """Change ``name=...`` in a kustomize ``envs:`` file, failing when it is not there."""
    lines = env_file.read_text().splitlines()
    changed = [f"{name}={value}" if line.startswith(f"{name}=") else line for line in lines]
    assert changed != lines, f"{name} not in {env_file}"
    env_file.write_text("\n".join(changed) + "\n")


def pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    """The Pod spec of a Job, Deployment, ... document."""
    return doc["spec"]["template"]["spec"]


def containers(docs: list[dict[str, Any]]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """``(pod spec, container)`` for every container of every workload in ``docs``."""
    for doc in docs:
        if doc.get("kind") in ("Job", "Deployment", "StatefulSet", "DaemonSet"):
            spec = pod_spec(doc)
            for container in spec.get("containers", []):
                yield spec, container


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    """The container's env entries by name (the value, or the ``valueFrom`` mapping)."""
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}
